"""The RBAC authorizer: the cluster's Roles, ClusterRoles and their bindings decide for identified callers.

kube-apiserver's RBAC (`plugin/pkg/auth/authorizer/rbac`) in small: a request is allowed when some
ClusterRoleBinding, or a RoleBinding in the request's namespace, binds a subject matching the user (by
name, by group, or as a ServiceAccount) to a role with a rule that covers the verb, API group, resource
(`resource/subresource`), name, or non-resource URL. Aggregated ClusterRoles are read as stored.

Who is identified: a ServiceAccount by its bearer token (authentication.py), and a caller that
impersonates (`Impersonate-User`, what `kubectl --as` sends). A caller without credentials is the local
admin (`system:masters`): this authorizer has no opinion on it and `AlwaysAllow` after it decides. For an
identified caller RBAC's silence is a denial: the 403 kube-apiserver words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .authorization import ADMIN, Attributes, Decision, UserInfo
from .store import Store

ROLES = ("rbac.authorization.k8s.io", "roles")
CLUSTER_ROLES = ("rbac.authorization.k8s.io", "clusterroles")
ROLE_BINDINGS = ("rbac.authorization.k8s.io", "rolebindings")
CLUSTER_ROLE_BINDINGS = ("rbac.authorization.k8s.io", "clusterrolebindings")


def subject_matches(subject: Mapping[str, Any], user: UserInfo, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    name = subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{ns}:{name}"
    return False


def _has(values: Iterable[str] | None, wanted: str) -> bool:
    values = list(values or [])
    return "*" in values or wanted in values


def rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """One PolicyRule against one request (kube's `RuleAllows`)."""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.is_resource_request:
        for url in rule.get("nonResourceURLs") or []:
            if url == "*" or url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1])):
                return True
        return False
    if not _has(rule.get("apiGroups"), attrs.api_group):
        return False
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    resources = list(rule.get("resources") or [])
    covered = "*" in resources or resource in resources
    if not covered and not (attrs.subresource and f"*/{attrs.subresource}" in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def role_rules(store: Store, role_ref: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
    if role_ref.get("kind") == "ClusterRole":
        role = store.get(CLUSTER_ROLES, None, role_ref.get("name") or "")
    else:
        role = store.get(ROLES, namespace, role_ref.get("name") or "")
    return list((role or {}).get("rules") or [])


def allowed_by(store: Store, attrs: Attributes) -> bool:
    """Whether any binding that applies to the request grants it."""
    bindings = [(b, "") for b in _objects(store, CLUSTER_ROLE_BINDINGS, None)]
    if attrs.namespace:
        bindings += [(b, attrs.namespace) for b in _objects(store, ROLE_BINDINGS, attrs.namespace)]
    for binding, ns in bindings:
        if not any(subject_matches(s, attrs.user, ns) for s in binding.get("subjects") or []):
            continue
        if any(rule_allows(rule, attrs) for rule in role_rules(store, binding.get("roleRef") or {}, ns)):
            return True
    return False


def _objects(store: Store, key: tuple[str, str], namespace: str | None) -> list[dict[str, Any]]:
    return [s.obj for s in store.items(key, namespace)]


def is_admin(user: UserInfo) -> bool:
    return user == ADMIN or "system:masters" in user.groups


class RBACAuthorizer:
    """Allow what the bindings grant an identified caller; deny the rest. No opinion on the admin."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def authorize(self, attrs: Attributes) -> tuple[Decision, str]:
        if is_admin(attrs.user):
            return Decision.NO_OPINION, ""
        if _always_allowed(attrs):
            return Decision.ALLOW, ""
        return (Decision.ALLOW, "") if allowed_by(self.store, attrs) else (Decision.DENY, "")


def _always_allowed(attrs: Attributes) -> bool:
    """What kube-apiserver's bootstrap roles give every authenticated caller (system:basic-user,
    system:discovery, system:public-info-viewer): asking who it is, what it may do, and discovery."""
    if attrs.is_resource_request:
        return attrs.verb == "create" and (attrs.api_group, attrs.resource) in (
            ("authorization.k8s.io", "selfsubjectaccessreviews"),
            ("authorization.k8s.io", "selfsubjectrulesreviews"),
            ("authentication.k8s.io", "selfsubjectreviews"),
        )
    path = attrs.path.rstrip("/") or "/"
    return attrs.verb == "get" and (
        path in ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi/v2")
        or path.startswith(("/api/", "/apis/", "/openapi/v3"))
    )
