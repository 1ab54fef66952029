"""The virtual resources that answer questions instead of storing objects: access reviews
(authorization.k8s.io: SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview,
SelfSubjectRulesReview), SelfSubjectReview (authentication.k8s.io), and the APIService list
(apiregistration.k8s.io) kube-apiserver keeps for its own group-versions. Nothing here is stored.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from .authorization import Attributes, Authorizer, Decision, UserInfo, authorize
from .errors import ApiError, invalid
from .rbac import CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS, is_admin, role_rules, subject_matches
from .registry import Registry
from .store import Store

AUTHZ = "authorization.k8s.io"
AUTHN = "authentication.k8s.io"
APIREG = "apiregistration.k8s.io"
REVIEWS = {
    (AUTHZ, "selfsubjectaccessreviews"),
    (AUTHZ, "subjectaccessreviews"),
    (AUTHZ, "localsubjectaccessreviews"),
    (AUTHZ, "selfsubjectrulesreviews"),
    (AUTHN, "selfsubjectreviews"),
}
API_SERVICES = (APIREG, "apiservices")


def _attributes(user: UserInfo, spec: dict[str, Any], kind: str, namespace: str | None) -> Attributes:
    res = spec.get("resourceAttributes")
    non = spec.get("nonResourceAttributes")
    if res is None and non is None:
        raise invalid(
            kind,
            AUTHZ,
            "",
            [
                (
                    "spec.resourceAttributes",
                    "FieldValueRequired",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            ],
        )
    if res is not None:
        ns = res.get("namespace") or ""
        if namespace is not None and ns not in ("", namespace):
            raise invalid(
                kind,
                AUTHZ,
                "",
                [("spec.resourceAttributes.namespace", "FieldValueInvalid", "must match metadata.namespace")],
            )
        return Attributes(
            user=user,
            verb=res.get("verb") or "",
            is_resource_request=True,
            path="",
            api_group=res.get("group") or "",
            api_version=res.get("version") or "",
            resource=res.get("resource") or "",
            subresource=res.get("subresource") or "",
            namespace=namespace or ns,
            name=res.get("name") or "",
        )
    assert non is not None
    return Attributes(user=user, verb=non.get("verb") or "", is_resource_request=False, path=non.get("path") or "")


def _user_of_spec(spec: dict[str, Any]) -> UserInfo:
    name = spec.get("user") or ""
    groups = tuple(spec.get("groups") or [])
    if not name and not groups:
        raise invalid(
            "SubjectAccessReview",
            AUTHZ,
            "",
            [("spec.user", "FieldValueRequired", "at least one of user or group must be specified")],
        )
    extra = {k: tuple(v) for k, v in (spec.get("extra") or {}).items()}
    return UserInfo(name, groups, extra)


def access_review(
    authorizers: list[Authorizer], caller: UserInfo, resource: str, body: dict[str, Any], namespace: str | None
) -> dict[str, Any]:
    """The review with `status` filled: allowed when the authorizer chain would allow the request."""
    kind = {
        "selfsubjectaccessreviews": "SelfSubjectAccessReview",
        "subjectaccessreviews": "SubjectAccessReview",
        "localsubjectaccessreviews": "LocalSubjectAccessReview",
    }[resource]
    spec = body.get("spec") or {}
    user = caller if resource == "selfsubjectaccessreviews" else _user_of_spec(spec)
    decision, reason = authorize(authorizers, _attributes(user, spec, kind, namespace))
    out = _echo(body, kind, AUTHZ)
    out["status"] = {"allowed": decision is Decision.ALLOW}
    if decision is Decision.DENY and not is_admin(user):
        out["status"]["reason"] = reason or ""
    return out


def rules_review(store: Store, caller: UserInfo, body: dict[str, Any]) -> dict[str, Any]:
    """SelfSubjectRulesReview (`kubectl auth can-i --list`): the rules bound to the caller in a namespace."""
    namespace = (body.get("spec") or {}).get("namespace") or ""
    out = _echo(body, "SelfSubjectRulesReview", AUTHZ)
    if is_admin(caller):
        resource_rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        non_resource = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
    else:
        rules: list[dict[str, Any]] = []
        bindings = [(s.obj, "") for s in store.items(CLUSTER_ROLE_BINDINGS, None)]
        if namespace:
            bindings += [(s.obj, namespace) for s in store.items(ROLE_BINDINGS, namespace)]
        for binding, ns in bindings:
            if any(subject_matches(s, caller, ns) for s in binding.get("subjects") or []):
                rules += [dict(r) for r in role_rules(store, binding.get("roleRef") or {}, ns)]
        resource_rules = [
            {
                "verbs": ["create"],
                "apiGroups": [AUTHZ],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            },
            {"verbs": ["create"], "apiGroups": [AUTHN], "resources": ["selfsubjectreviews"]},
        ] + [r for r in rules if "nonResourceURLs" not in r]
        non_resource = [r for r in rules if "nonResourceURLs" in r]
    out["status"] = {"resourceRules": resource_rules, "nonResourceRules": non_resource, "incomplete": False}
    return out


def self_subject_review(caller: UserInfo, body: dict[str, Any]) -> dict[str, Any]:
    """SelfSubjectReview (`kubectl auth whoami`): the caller's user info as the server sees it."""
    out = _echo(body, "SelfSubjectReview", AUTHN)
    info: dict[str, Any] = {"username": caller.name, "groups": list(caller.groups)}
    if caller.extra:
        info["extra"] = {k: list(v) for k, v in caller.extra.items()}
    out["status"] = {"userInfo": info}
    return out


def _echo(body: dict[str, Any], kind: str, group: str) -> dict[str, Any]:
    out = copy.deepcopy(body) if isinstance(body, dict) else {}
    out["kind"], out["apiVersion"] = kind, f"{group}/v1"
    meta = out.setdefault("metadata", {})
    meta.setdefault("creationTimestamp", None)
    return out


def review(
    store: Store, authorizers: list[Authorizer], caller: UserInfo, resource: str, body: Any, namespace: str | None
) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request was not a review object", reason="BadRequest")
    if resource == "selfsubjectreviews":
        return self_subject_review(caller, body)
    if resource == "selfsubjectrulesreviews":
        return rules_review(store, caller, body)
    return access_review(authorizers, caller, resource, body, namespace)


# --- apiregistration.k8s.io ---------------------------------------------------------------------------------

#: kube-apiserver's priorities for its built-in groups (kube-aggregator's apiVersionPriorities).
_PRIORITIES = {
    "": (18000, 1),
    "apiregistration.k8s.io": (17800, 15),
    "apps": (17800, 15),
    "events.k8s.io": (17750, 15),
    "authentication.k8s.io": (17700, 15),
    "authorization.k8s.io": (17600, 15),
    "autoscaling": (17500, 9),
    "batch": (17400, 15),
    "certificates.k8s.io": (17300, 15),
    "networking.k8s.io": (17200, 15),
    "policy": (17100, 15),
    "rbac.authorization.k8s.io": (17000, 15),
    "storage.k8s.io": (16800, 15),
    "admissionregistration.k8s.io": (16700, 15),
    "apiextensions.k8s.io": (16400, 15),
    "scheduling.k8s.io": (16600, 15),
    "coordination.k8s.io": (16500, 15),
    "node.k8s.io": (16300, 15),
    "discovery.k8s.io": (16200, 15),
    "flowcontrol.apiserver.k8s.io": (16100, 21),
    "resource.k8s.io": (15900, 15),
}


def api_services(registry: Registry, created: str) -> list[dict[str, Any]]:
    """One APIService per served group-version, all Local (served by this server), as kube-apiserver lists."""
    gvs = [("", "v1")] + [(g, v) for g, vs in registry.groups().items() for v in vs]
    out = []
    for group, version in gvs:
        builtin = group in _PRIORITIES
        group_min, version_priority = _PRIORITIES.get(group, (1000, 100))
        name = f"{version}.{group}"
        out.append(
            {
                "kind": "APIService",
                "apiVersion": f"{APIREG}/v1",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"apiservice/{name}")),
                    "resourceVersion": "1",
                    "creationTimestamp": created,
                    "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart" if builtin else "true"},
                },
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": group_min,
                    "versionPriority": version_priority,
                },
                "status": {
                    "conditions": [
                        {
                            "type": "Available",
                            "status": "True",
                            "lastTransitionTime": created,
                            "reason": "Local",
                            "message": "Local APIServices are always available",
                        }
                    ]
                },
            }
        )
    return sorted(out, key=lambda s: s["metadata"]["name"])  # as etcd's key order lists them


def api_service_list(registry: Registry, created: str, rv: int, added: list[dict[str, Any]]) -> dict[str, Any]:
    """The Local APIServices and those clients created (`added`, stored), in name order."""
    local = api_services(registry, created)
    names = {s["metadata"]["name"] for s in local}
    items = local + [s for s in added if s["metadata"]["name"] not in names]
    items.sort(key=lambda s: s["metadata"]["name"])
    return {"kind": "APIServiceList", "apiVersion": f"{APIREG}/v1", "metadata": {"resourceVersion": str(rv)},
            "items": items}


def local_api_service(registry: Registry, created: str, name: str) -> dict[str, Any] | None:
    """The Local APIService of that name (a group-version this server serves), else None."""
    return next((svc for svc in api_services(registry, created) if svc["metadata"]["name"] == name), None)
