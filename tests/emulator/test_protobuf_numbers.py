"""Protobuf field numbers pinned against upstream Kubernetes, byte for byte.

Each row is one field as upstream's generated.proto numbers it; the body is built here by hand from those
numbers (not from `protobuf_fields.SPEC`), so a wrong number in SPEC shows up as a field decoded to the
wrong place, or refused as unknown. Numbers read from kubernetes/kubernetes
staging/src/k8s.io/{api,apimachinery} generated.proto: apps/v1 at 0122c43a, batch/v1 at 008b3652, rbac/v1 at
081ac6b5, coordination/v1 at 1672e6d6, scheduling/v1 at 05c351a9, meta/v1 at 779e95a0; core/v1 PodSpec
from the struct tags of a copy of core/v1 types.go that has hostnameOverride (1.34+).
"""

from __future__ import annotations

from typing import Any

import pytest

from kubelocal.apiserver import protobuf

Path = tuple[tuple[str, int, bool], ...]  # (JSON field, upstream number, is a list)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bool | int | str | bytes) -> bytes:
    if isinstance(value, bool | int):  # wire type 0: varint
        return _varint(number << 3) + _varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data  # wire type 2: length-delimited


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """runtime.Unknown: typeMeta=1 {apiVersion=1, kind=2}, raw=2, behind the `k8s\\x00` magic."""
    return b"k8s\x00" + _field(1, _field(1, api_version) + _field(2, kind)) + _field(2, raw)


def _wire(path: Path, value: Any) -> bytes:
    (_, number, _), rest = path[0], path[1:]
    if not rest:
        values = value if isinstance(value, list) else [value]
        return b"".join(_field(number, v) for v in values)
    return _field(number, _wire(rest, value))


def _json(path: Path, value: Any) -> Any:
    (name, _, is_list), rest = path[0], path[1:]
    inner = _json(rest, value) if rest else value
    return {name: [inner] if is_list else inner}


def _p(*segments: str) -> Path:
    """'spec:2' is a field, 'conditions:6[]' a list of messages."""
    out = []
    for s in segments:
        name, _, number = s.partition(":")
        out.append((name, int(number.removesuffix("[]")), number.endswith("[]")))
    return tuple(out)


RBAC = "rbac.authorization.k8s.io/v1"
ROWS: list[tuple[str, str, Path, Any]] = [
    # apps/v1: the group the old note doubted
    ("apps/v1", "Deployment", _p("spec:2", "progressDeadlineSeconds:9"), 30),
    ("apps/v1", "Deployment", _p("spec:2", "paused:7"), True),
    ("apps/v1", "Deployment", _p("status:3", "readyReplicas:7"), 2),
    ("apps/v1", "Deployment", _p("status:3", "terminatingReplicas:9"), 1),
    ("apps/v1", "Deployment", _p("status:3", "conditions:6[]", "reason:4"), "NewReplicaSetAvailable"),
    ("apps/v1", "Deployment", _p("spec:2", "strategy:4", "type:1"), "Recreate"),
    ("apps/v1", "ReplicaSet", _p("spec:2", "minReadySeconds:4"), 5),
    ("apps/v1", "ReplicaSet", _p("status:3", "observedGeneration:3"), 4),
    ("apps/v1", "ReplicaSet", _p("status:3", "terminatingReplicas:7"), 1),
    # batch/v1
    ("batch/v1", "Job", _p("spec:2", "backoffLimit:7"), 3),
    ("batch/v1", "Job", _p("spec:2", "suspend:10"), True),
    ("batch/v1", "Job", _p("spec:2", "backoffLimitPerIndex:12"), 1),
    ("batch/v1", "Job", _p("spec:2", "podReplacementPolicy:14"), "Failed"),
    ("batch/v1", "Job", _p("spec:2", "managedBy:15"), "example.com/ctl"),
    ("batch/v1", "Job", _p("status:3", "failedIndexes:10"), "1,3"),
    ("batch/v1", "Job", _p("status:3", "terminating:11"), 1),
    ("batch/v1", "Job", _p("status:3", "uncountedTerminatedPods:8", "failed:2"), ["uid-1"]),
    # rbac/v1
    (RBAC, "Role", _p("rules:2[]", "resourceNames:4"), ["one"]),
    (RBAC, "ClusterRole", _p("rules:2[]", "nonResourceURLs:5"), ["/healthz"]),
    (RBAC, "RoleBinding", _p("roleRef:3", "kind:2"), "Role"),
    (RBAC, "RoleBinding", _p("subjects:2[]", "namespace:4"), "team"),
    (RBAC, "ClusterRoleBinding", _p("subjects:2[]", "apiGroup:2"), "rbac.authorization.k8s.io"),
    # meta/v1 (through a ConfigMap's metadata)
    ("v1", "ConfigMap", _p("metadata:1", "finalizers:14"), ["example.com/keep"]),
    ("v1", "ConfigMap", _p("metadata:1", "generateName:2"), "cm-"),
    ("v1", "ConfigMap", _p("metadata:1", "ownerReferences:13[]", "apiVersion:5"), "apps/v1"),
    ("v1", "ConfigMap", _p("metadata:1", "ownerReferences:13[]", "blockOwnerDeletion:7"), True),
    ("v1", "ConfigMap", _p("metadata:1", "managedFields:17[]", "operation:2"), "Update"),
    # coordination/v1, scheduling/v1, core/v1
    ("coordination.k8s.io/v1", "Lease", _p("spec:2", "leaseTransitions:5"), 3),
    ("scheduling.k8s.io/v1", "PriorityClass", _p("preemptionPolicy:5"), "Never"),
    ("v1", "Pod", _p("spec:2", "shareProcessNamespace:27"), True),
    ("v1", "Pod", _p("spec:2", "hostnameOverride:41"), "box"),
    ("v1", "Pod", _p("spec:2", "containers:2[]", "envFrom:19[]", "prefix:1"), "P_"),
]
IDS = [f"{kind}." + ".".join(segment[0] for segment in path) for _, kind, path, _ in ROWS]


@pytest.mark.parametrize(("api_version", "kind", "path", "value"), ROWS, ids=IDS)
def test_a_field_sent_under_its_upstream_number_decodes_to_its_json_place(
    api_version: str, kind: str, path: Path, value: Any
) -> None:
    body = _envelope(api_version, kind, _wire(path, value))
    assert protobuf.decode(body) == {"apiVersion": api_version, "kind": kind, **_json(path, value)}


@pytest.mark.parametrize(("api_version", "kind", "path", "value"), ROWS, ids=IDS)
def test_a_field_is_written_under_its_upstream_number(api_version: str, kind: str, path: Path, value: Any) -> None:
    obj = {"apiVersion": api_version, "kind": kind, **_json(path, value)}
    assert _wire(path, value) in protobuf.encode(obj)
