"""Node declarations for the local control plane: `--nodes` specs parsed into Node objects.

Grammar: entries separated by `;`, each `[COUNTx][NAME]{key:value,...}`.
Keys: `cpu`, `memory`, `gpu` (nvidia.com/gpu), `pods` (max pods), `sim` (true: a simulated node, whose
pods run no process), `label:k=v` and `taint:k=v:Effect` (both repeatable). Unnamed nodes are called
`node-0`, `node-1`, ...; a named entry with a count gives `NAME-0`, `NAME-1`, ...
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from kubelocal.resources import GPU

#: What the process kubelet reports as its version (Node status) and how its probes introduce themselves (a kubelet
#: sends `kube-probe/<major>.<minor>` of its own version).
KUBELET_VERSION = "v1.37.0-tfjob-local"
PROBE_USER_AGENT = "kube-probe/1.37"

DEFAULT_CPU: int = (os.cpu_count() or 1) * 4
DEFAULT_MEMORY: str = "64Gi"
#: Local nodes hold more pods than kubelet's default 110, so a benchmark's hundreds of pods fit one node.
DEFAULT_MAX_PODS: int = 1000

#: What `tfjob local` uses when --nodes is not given: one node, cpu = 4 × cores, 64Gi memory.
DEFAULT_NODES: str = f"1x{{cpu:{DEFAULT_CPU},memory:{DEFAULT_MEMORY}}}"

_STANDARD_LABELS = frozenset({"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                              "beta.kubernetes.io/os", "beta.kubernetes.io/arch"})
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_KEYS = "cpu, memory, gpu, pods, sim, label:KEY=VALUE, taint:KEY=VALUE:EFFECT"
#: The label a simulated node carries (`sim:true` in --nodes): its pods' lifecycle is simulated, no process runs.
SIM_LABEL = "kubelocal.dev/sim"
_ENTRY = re.compile(r"^(?:(?P<count>\d+)\s*x\s*)?(?P<name>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?\s*\{(?P<body>[^{}]*)\}$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class NodeSpecError(ValueError):
    """A --nodes spec that cannot be read; the message names the entry and what to write instead."""


def parse_node_spec(spec: str) -> list[dict[str, Any]]:
    """Node objects declared by a spec like "2x{gpu:4,cpu:16,memory:64Gi}" or "a{cpu:8};b{gpu:2}"."""
    nodes: list[dict[str, Any]] = []
    unnamed = 0
    entries = [e.strip() for e in spec.split(";") if e.strip()]
    if not entries:
        raise NodeSpecError(f"--nodes {spec!r}: declares no node (example: 2x{{gpu:4,cpu:16,memory:64Gi}})")
    for entry in entries:
        match = _ENTRY.match(entry)
        if not match:
            raise NodeSpecError(
                f"--nodes entry {entry!r}: expected [COUNTx][NAME]{{key:value,...}}, "
                f"e.g. 2x{{gpu:4,cpu:16,memory:64Gi}} or node-a{{cpu:8,label:zone=a}}"
            )
        count = int(match["count"]) if match["count"] else 1
        if count < 1:
            raise NodeSpecError(f"--nodes entry {entry!r}: the count must be at least 1")
        props = _parse_body(entry, match["body"])
        for i in range(count):
            if match["name"]:
                name = match["name"] if count == 1 and not match["count"] else f"{match['name']}-{i}"
            else:
                name = f"node-{unnamed}"
                unnamed += 1
            nodes.append(make_node(name, **props))
    names = [n["metadata"]["name"] for n in nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise NodeSpecError(f"--nodes {spec!r}: node names must be unique, repeated: {', '.join(duplicates)}")
    return nodes


def _parse_body(entry: str, body: str) -> dict[str, Any]:
    props: dict[str, Any] = {"labels": {}, "taints": []}
    for item in (i.strip() for i in body.split(",")):
        if not item:
            continue
        key, sep, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise NodeSpecError(f"--nodes entry {entry!r}: {item!r} needs a value, as in cpu:8 (keys: {_KEYS})")
        if key in ("cpu", "memory", "gpu", "pods"):
            try:
                quantity = parse_quantity(value)
            except ValueError:
                raise NodeSpecError(f"--nodes entry {entry!r}: {key}:{value} is not a quantity "
                                    f"(e.g. cpu:500m, memory:64Gi, gpu:4)") from None
            if quantity < 0 or (key in ("gpu", "pods") and quantity != int(quantity)):
                raise NodeSpecError(f"--nodes entry {entry!r}: {key}:{value} must be a non-negative "
                                    f"{'whole number' if key in ('gpu', 'pods') else 'quantity'}")
            props[key] = value
        elif key == "sim":
            if value not in ("true", "false"):
                raise NodeSpecError(f"--nodes entry {entry!r}: sim:{value} must be sim:true or sim:false")
            props["sim"] = value == "true"
        elif key == "label":
            label_key, eq, label_value = value.partition("=")
            if not eq or not label_key:
                raise NodeSpecError(f"--nodes entry {entry!r}: label:{value} must be label:KEY=VALUE")
            props["labels"][label_key] = label_value
        elif key == "taint":
            props["taints"].append(_parse_taint(entry, value))
        else:
            raise NodeSpecError(f"--nodes entry {entry!r}: unknown key {key!r} (keys: {_KEYS})")
    return props


def _parse_taint(entry: str, value: str) -> dict[str, str]:
    kv, colon, effect = value.rpartition(":")
    if not colon or effect not in TAINT_EFFECTS or not kv:
        raise NodeSpecError(f"--nodes entry {entry!r}: taint:{value} must be taint:KEY=VALUE:EFFECT "
                            f"with EFFECT one of {', '.join(TAINT_EFFECTS)}")
    taint_key, _, taint_value = kv.partition("=")
    taint = {"key": taint_key, "effect": effect}
    if taint_value:
        taint["value"] = taint_value
    return taint


def make_node(
    name: str,
    *,
    cpu: str | int = DEFAULT_CPU,
    memory: str = DEFAULT_MEMORY,
    gpu: str | int = 0,
    pods: str | int = DEFAULT_MAX_PODS,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    sim: bool = False,
) -> dict[str, Any]:
    """A Ready Node object with this capacity (allocatable = capacity), labels and taints; `sim`: a simulated
    node (labelled SIM_LABEL=true), whose pods the kubelet simulates instead of running."""
    if not _DNS_NAME.match(name) or len(name) > 253:
        raise NodeSpecError(f"node name {name!r}: must be a DNS subdomain (lowercase letters, digits, '-', '.')")
    capacity = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
    if parse_quantity(str(gpu)) > 0:
        capacity[GPU] = str(gpu)
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        **({SIM_LABEL: "true"} if sim else {}),
        **(labels or {}),
    }
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = list(taints)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [],  # the kubelet fills these in when it registers the node
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "sim://local" if sim else "process://local",
                "kernelVersion": os.uname().release,
                "osImage": f"tfjob local {'simulated' if sim else 'process'} kubelet",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def describe_nodes(nodes: list[dict[str, Any]]) -> str:
    """One line per node: name, capacity, labels beyond the standard ones, taints."""
    lines = []
    for node in nodes:
        cap = node["status"]["capacity"]
        parts = [f"{k}={cap[k]}" for k in ("cpu", "memory", GPU) if k in cap]
        extra = {k: v for k, v in node["metadata"]["labels"].items() if k not in _STANDARD_LABELS}
        if extra:
            parts.append("labels " + ",".join(f"{k}={v}" for k, v in extra.items()))
        taints = node["spec"].get("taints") or []
        if taints:
            parts.append("taints " + ",".join(
                f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}" for t in taints))
        lines.append(f"{node['metadata']['name']}: {' '.join(parts)}")
    return "\n".join(lines)


#: Labels a kubelet may set on its own Node under NodeRestriction (k8s.io/kubelet/pkg/apis, v0.37), besides any in
#: the `[*.]kubelet.kubernetes.io` and `[*.]node.kubernetes.io` namespaces.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch"})
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _in_namespace(namespace: str, suffix: str) -> bool:
    return namespace == suffix or namespace.endswith("." + suffix)


def kubelet_may_set(label: str) -> bool:
    """Whether a kubelet may set this label on its own Node (the NodeRestriction admission plugin's rule): any label
    outside the kubernetes.io and k8s.io namespaces, the well-known node labels, the kubelet's and node's own
    namespaces; never one in node-restriction.kubernetes.io (only an administrator may set those)."""
    namespace = label.split("/", 1)[0] if "/" in label else ""
    if _in_namespace(namespace, "node-restriction.kubernetes.io"):
        return False
    if not any(_in_namespace(namespace, ns) for ns in ("kubernetes.io", "k8s.io")):
        return True
    return label in KUBELET_LABELS or any(_in_namespace(namespace, ns) for ns in _KUBELET_LABEL_NAMESPACES)


def split_labels(labels: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels the node's kubelet sets itself, labels an administrator sets for it), as kubeadm labels a node
    `node-role.kubernetes.io/...` after it joins."""
    own = {k: v for k, v in labels.items() if kubelet_may_set(k)}
    return own, {k: v for k, v in labels.items() if k not in own}


def is_simulated(node: Mapping[str, Any] | None) -> bool:
    """Whether the node is a simulated one (its pods run no process)."""
    return ((node or {}).get("metadata") or {}).get("labels", {}).get(SIM_LABEL) == "true"
