"""rbac: requests → permissions → rules, and the exact comparison with what RBAC objects grant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import rbac
from deployhelpers import renderer


@dataclass
class Rec:
    verb: str
    group: str | None
    resource: str | None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    status_code: int = 200


P = rbac.Permission


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (Rec("get", "", "pods", namespace="a", name="p"), {P("", "pods", "get", "a", "p")}),
        (Rec("create", "", "pods", namespace="a", name="p"), {P("", "pods", "create", "a", None)}),
        (Rec("list", "tfjob.dev", "tfjobs"), {P("tfjob.dev", "tfjobs", "list", None, None)}),
        (Rec("patch", "tfjob.dev", "tfjobs", "status", "a", "j"), {P("tfjob.dev", "tfjobs/status", "patch", "a", "j")}),
        (Rec("get", None, None), set()),  # discovery: /apis
        (Rec("create", "", "secrets", namespace="a", status_code=403), set()),  # refused: not needed
        (Rec("create", "", "pods", namespace="a", status_code=409), {P("", "pods", "create", "a", None)}),
    ],
)
def test_each_request_needs_one_permission(record: Rec, expected: set[rbac.Permission]) -> None:
    assert rbac.permissions([record]) == expected


def test_cluster_role_covers_every_namespace_and_role_only_its_own() -> None:
    cluster = rbac.Grant(None, "", "pods", "create", None)
    local = rbac.Grant("a", "", "pods", "create", None)
    named = rbac.Grant("a", "coordination.k8s.io", "leases", "update", "op")
    assert cluster.covers(P("", "pods", "create", "b", None))
    assert not local.covers(P("", "pods", "create", "b", None))
    assert not local.covers(P("", "pods", "create", None, None))  # a cross-namespace list needs a ClusterRole
    assert named.covers(P("coordination.k8s.io", "leases", "update", "a", "op"))
    assert not named.covers(P("coordination.k8s.io", "leases", "update", "a", "other"))


def _objects(rules: list[dict[str, Any]], *, namespace: str | None = None) -> list[dict[str, Any]]:
    kind = "Role" if namespace else "ClusterRole"
    meta = {"name": "op", **({"namespace": namespace} if namespace else {})}
    return [
        {"kind": kind, "metadata": meta, "rules": rules},
        {"kind": f"{kind}Binding", "metadata": meta, "roleRef": {"kind": kind, "name": "op"},
         "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "sys"}]},
    ]


def test_compare_reports_missing_and_extra_permissions() -> None:
    objects = _objects([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}])
    needed = {P("", "pods", "create", "a", None), P("", "services", "create", "a", None)}
    result = rbac.compare(rbac.grants(objects, "sa", "sys"), needed)
    assert result.missing == [P("", "services", "create", "a", None)]
    assert [(g.resource, g.verb) for g in result.extra] == [("pods", "delete")]
    assert not result.exact


def test_bindings_to_other_service_accounts_grant_nothing() -> None:
    objects = _objects([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    assert rbac.grants(objects, "someone-else", "sys") == set()


def test_minimal_rules_round_trip_to_an_exact_grant() -> None:
    needed = {
        P("tfjob.dev", "tfjobs", "watch", None, None),
        P("tfjob.dev", "tfjobs", "list", None, None),
        P("tfjob.dev", "tfjobs/status", "patch", "a", "j1"),
        P("tfjob.dev", "tfjobs/status", "patch", "b", "j2"),
        P("", "pods", "create", "a", None),
        P("", "pods", "create", "b", None),
        P("coordination.k8s.io", "leases", "create", "sys", None),
        P("coordination.k8s.io", "leases", "get", "sys", "op"),
        P("coordination.k8s.io", "leases", "update", "sys", "op"),
    }
    rules = rbac.minimal_rules(needed)
    assert set(rules) == {None, "sys"}
    objects = _objects(rules[None]) + [
        o | {"metadata": {**o["metadata"], "name": "le"}} for o in _objects(rules["sys"], namespace="sys")
    ]
    objects[-1]["roleRef"]["name"] = "le"
    assert rbac.compare(rbac.grants(objects, "sa", "sys"), needed).exact
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["op"],
            "verbs": ["get", "update"]} in rules["sys"]


def test_wildcards_and_secrets_are_flagged_and_the_chart_has_none() -> None:
    bad = _objects([{"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["get"]}])
    assert len(rbac.wildcard_or_secret_rules(bad)) == 2
    for values in ({}, {"watchNamespaces": ["a"]}, {"webhook": {"certManager": {"enabled": True}}}):
        assert rbac.wildcard_or_secret_rules(renderer.render_chart(values)) == []


CLUSTER_PATCH = rbac.Grant(None, "", "pods", "patch", None)
ROLE_PATCH = rbac.Grant("sys", "", "pods", "patch", None)


@pytest.mark.parametrize(
    ("granted", "needed", "wider_than_needed"),
    [
        # A cluster-wide grant used only where a Role already covers it: the cluster-wide one is too wide.
        ({CLUSTER_PATCH, ROLE_PATCH}, {P("", "pods", "patch", "sys", "op-0")}, [CLUSTER_PATCH]),
        # Used in another namespace too: both are needed (the Role keeps leader election self-contained).
        ({CLUSTER_PATCH, ROLE_PATCH}, {P("", "pods", "patch", "sys", "op-0"), P("", "pods", "patch", "a", "p")}, []),
        ({CLUSTER_PATCH}, {P("", "pods", "patch", "sys", "op-0")}, []),
    ],
)
def test_compare_flags_grants_wider_than_their_uses(
        granted: set[rbac.Grant], needed: set[rbac.Permission], wider_than_needed: list[rbac.Grant]) -> None:
    result = rbac.compare(granted, needed)
    assert result.redundant == wider_than_needed and result.missing == [] and result.extra == []


def test_blocking_owner_references_need_update_on_the_owners_finalizers() -> None:
    pod = {"metadata": {"namespace": "a", "ownerReferences": [
        {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "name": "j", "blockOwnerDeletion": True},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "c"},
    ]}}
    assert rbac.owner_reference_permissions(pod) == {P("tfjob.dev", "tfjobs/finalizers", "update", "a", "j")}
