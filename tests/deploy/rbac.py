"""Least-privilege RBAC from evidence: recorded API requests → the permissions they needed → RBAC rules.

Pure functions over plain data. The deploy tests feed them the request log of real operator runs on the local
control plane and compare the result with the rules the Helm chart grants: nothing missing, nothing extra.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tfjob_operator.serving.addressing import PUBLISHED_NAME, PUBLISHED_NAMESPACE

#: Verbs RBAC knows for resource requests (the API server maps HTTP methods onto these).
RESOURCE_VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})


class Request(Protocol):
    """What a recorded request must carry (`local.apiserver.faults.RequestRecord` has it)."""

    verb: str
    group: str | None
    resource: str | None
    subresource: str | None
    namespace: str | None
    name: str | None
    status_code: int


@dataclass(frozen=True, order=True)
class Permission:
    """One thing a request needed: `namespace` None means cluster scope or across all namespaces."""

    group: str
    resource: str  # with "/subresource" when there is one
    verb: str
    namespace: str | None
    name: str | None


#: Reads the chart grants none of: where the object exists its publisher lets every caller read it (as kubeadm's
#: RoleBinding does for kube-public/cluster-info), and where it does not the operator takes the 404 or 403 for
#: "a cluster" (`tfjob_operator.serving.addressing`).
PUBLIC_READS = frozenset({Permission("", "configmaps", "get", PUBLISHED_NAMESPACE, PUBLISHED_NAME)})


def permissions(records: Iterable[Request]) -> set[Permission]:
    """The permissions a set of requests needed; non-resource requests (discovery) and PUBLIC_READS need none of
    ours."""
    out = set()
    for r in records:
        if r.resource is None or r.group is None or r.verb not in RESOURCE_VERBS:
            continue
        if r.status_code in (401, 403):
            continue  # refused: the operator tried without needing success (e.g. optional features)
        resource = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        # create, list, watch and deletecollection are never name-scoped in RBAC.
        name = None if r.verb in ("create", "list", "watch", "deletecollection") else r.name
        out.add(Permission(r.group, resource, r.verb, r.namespace, name))
    return out - PUBLIC_READS


@dataclass(frozen=True, order=True)
class Grant:
    """One (namespace-or-cluster, group, resource, verb, name-or-any) atom of what RBAC objects grant."""

    namespace: str | None  # None: a ClusterRole bound cluster-wide (covers every namespace)
    group: str
    resource: str
    verb: str
    name: str | None  # None: any name

    def covers(self, p: Permission) -> bool:
        return (
            (self.namespace is None or self.namespace == p.namespace)
            and (self.group, self.resource, self.verb) == (p.group, p.resource, p.verb)
            and (self.name is None or self.name == p.name)
        )


def _rule_grants(rule: Mapping[str, Any], namespace: str | None) -> list[Grant]:
    names = rule.get("resourceNames") or [None]
    return [
        Grant(namespace, group, resource, verb, name)
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
        for name in names
    ]


def grants(objects: Iterable[Mapping[str, Any]], service_account: str, sa_namespace: str) -> set[Grant]:
    """Everything RBAC objects (as rendered) grant to one ServiceAccount, through its bindings."""
    objects = list(objects)
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    out: set[Grant] = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == service_account
                   and s.get("namespace") == sa_namespace for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role_ns = scope if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        if role is None:
            continue
        for rule in role.get("rules") or []:
            out.update(_rule_grants(rule, scope))
    return out


@dataclass(frozen=True)
class Comparison:
    """Needed permissions nothing grants, granted atoms no request used, and grants wider than their uses need."""

    missing: list[Permission]
    extra: list[Grant]
    redundant: list[Grant] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.missing and not self.extra and not self.redundant


def _grant_key(g: Grant) -> tuple[str, str, str, str, str]:
    return (g.namespace or "", g.group, g.resource, g.verb, g.name or "")


def subsumes(wider: Grant, narrower: Grant) -> bool:
    """`wider` grants everything `narrower` does (same group/resource/verb, scope and name at least as wide)."""
    return (
        wider != narrower
        and (wider.group, wider.resource, wider.verb) == (narrower.group, narrower.resource, narrower.verb)
        and (wider.namespace is None or wider.namespace == narrower.namespace)
        and (wider.name is None or wider.name == narrower.name)
    )


def compare(granted: set[Grant], needed: set[Permission]) -> Comparison:
    """Nothing missing (every need covered), nothing extra (every grant used), nothing wider than its uses need."""
    missing = sorted(p for p in needed if not any(g.covers(p) for g in granted))
    extra = sorted((g for g in granted if not any(g.covers(p) for p in needed)), key=_grant_key)
    redundant = sorted((g for g in granted if _wider_than_needed(g, granted, needed)), key=_grant_key)
    return Comparison(missing, extra, redundant)


def _wider_than_needed(g: Grant, granted: set[Grant], needed: set[Permission]) -> bool:
    """Every need `g` covers is met by a grant that is not wider than `g` (e.g. a ClusterRole rule whose only
    uses are in one namespace that a Role already covers). A narrow grant beside a wider one is left alone."""
    used = [p for p in needed if g.covers(p)]
    return bool(used) and all(any(o != g and o.covers(p) and not subsumes(o, g) for o in granted) for p in used)


def owner_reference_permissions(obj: Mapping[str, Any]) -> set[Permission]:
    """What creating `obj` needs beyond `create` where OwnerReferencesPermissionEnforcement is enabled (OpenShift,
    hardened clusters): `update` on the owner's `finalizers` subresource for each blockOwnerDeletion reference."""
    meta = obj.get("metadata") or {}
    out = set()
    for ref in meta.get("ownerReferences") or []:
        if not ref.get("blockOwnerDeletion"):
            continue
        api_version = str(ref.get("apiVersion") or "v1")
        group = api_version.split("/")[0] if "/" in api_version else ""
        plural = str(ref["kind"]).lower() + "s"
        out.add(Permission(group, f"{plural}/finalizers", "update", meta.get("namespace"), ref.get("name")))
    return out


def minimal_rules(needed: Iterable[Permission], *, cluster_wide: bool = True) -> dict[str | None, list[dict[str, Any]]]:
    """RBAC rules granting exactly `needed`, keyed by namespace (None: the ClusterRole).

    With `cluster_wide`, namespaced needs seen in several namespaces (or across all) go to the ClusterRole;
    needs seen in one namespace only stay in that namespace's Role. Name-scoped needs keep resourceNames.
    """
    needed = set(needed)
    spread: dict[tuple[str, str, str], set[str | None]] = defaultdict(set)
    for p in needed:
        spread[(p.group, p.resource, p.verb)].add(p.namespace)
    buckets: dict[tuple[str | None, str, str, tuple[str, ...]], set[str]] = defaultdict(set)
    for p in needed:
        namespaces = spread[(p.group, p.resource, p.verb)]
        scope = None if p.namespace is None or (cluster_wide and len(namespaces) > 1) else p.namespace
        names = _names_for(needed, p, scope)
        buckets[(scope, p.group, p.resource, names)].add(p.verb)
    rules: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    merged: dict[tuple[str | None, str, tuple[str, ...], tuple[str, ...]], list[str]] = defaultdict(list)
    for (scope, group, resource, names), verb_set in sorted(buckets.items(),
                                                           key=lambda kv: (kv[0][0] or "", kv[0][1:])):
        merged[(scope, group, tuple(sorted(verb_set)), names)].append(resource)
    for (scope, group, verbs, names), resources in merged.items():
        rule: dict[str, Any] = {"apiGroups": [group], "resources": sorted(set(resources))}
        if names:
            rule["resourceNames"] = list(names)
        rule["verbs"] = list(verbs)
        rules[scope].append(rule)
    return dict(rules)


def _names_for(needed: set[Permission], p: Permission, scope: str | None) -> tuple[str, ...]:
    """resourceNames for p's (group, resource, verb) in scope, or () when any unnamed request needs it."""
    same = [q for q in needed if (q.group, q.resource, q.verb) == (p.group, p.resource, p.verb)
            and (scope is None or q.namespace == scope)]
    if any(q.name is None for q in same):
        return ()
    return tuple(sorted({q.name for q in same if q.name is not None}))


def wildcard_or_secret_rules(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """Rules that grant `*` anywhere or touch Secrets, described for an assertion message."""
    problems = []
    for o in objects:
        if o["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in o.get("rules") or []:
            if any("*" in (rule.get(k) or []) for k in ("apiGroups", "resources", "verbs", "resourceNames")):
                problems.append(f"{o['kind']}/{o['metadata']['name']}: wildcard in {rule}")
            if "secrets" in (rule.get("resources") or []):
                problems.append(f"{o['kind']}/{o['metadata']['name']}: grants secrets {rule}")
    return problems
