"""The RBAC authorizer's decisions as tables: which PolicyRule covers which request, which subject is whom."""

from __future__ import annotations

from typing import Any

import pytest

from kubelocal.apiserver.authorization import ADMIN, Attributes, UserInfo, user_from_headers
from kubelocal.apiserver.rbac import rule_allows, subject_matches

SA = user_from_headers({"Impersonate-User": "system:serviceaccount:team:trainer"})


def req(verb: str, resource: str = "", group: str = "", sub: str = "", name: str = "", path: str = "") -> Attributes:
    return Attributes(SA, verb, not path, path, group, "v1", resource, sub, "team", name)


PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}


@pytest.mark.parametrize(
    ("rule", "request_", "allowed"),
    [
        (PODS, req("get", "pods"), True),
        (PODS, req("delete", "pods"), False),
        (PODS, req("get", "pods", group="apps"), False),
        (PODS, req("get", "pods", sub="log"), False),  # a subresource is its own resource
        ({**PODS, "resources": ["pods/log"]}, req("get", "pods", sub="log"), True),
        ({**PODS, "resources": ["*/log"]}, req("get", "pods", sub="log"), True),
        ({**PODS, "resources": ["*"]}, req("get", "pods", sub="exec"), True),
        ({**PODS, "verbs": ["*"]}, req("deletecollection", "pods"), True),
        ({**PODS, "apiGroups": ["*"]}, req("get", "pods", group="apps"), True),
        ({**PODS, "apiGroups": ["*"]}, req("get", "deployments", group="apps"), False),  # resources still must match
        ({**PODS, "resourceNames": ["a"]}, req("get", "pods", name="a"), True),
        ({**PODS, "resourceNames": ["a"]}, req("get", "pods", name="b"), False),
        ({**PODS, "resourceNames": ["a"]}, req("list", "pods"), False),  # a list names nothing
        ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, req("get", path="/healthz"), True),
        ({"nonResourceURLs": ["/metrics*"], "verbs": ["get"]}, req("get", path="/metrics/cadvisor"), True),
        ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, req("get", path="/livez"), False),
        (PODS, req("get", path="/api"), False),  # a resource rule never covers a path
    ],
)
def test_a_policy_rule_covers_exactly_what_it_names(rule: dict[str, Any], request_: Attributes, allowed: bool) -> None:
    assert rule_allows(rule, request_) is allowed


@pytest.mark.parametrize(
    ("subject", "binding_ns", "user", "matches"),
    [
        ({"kind": "ServiceAccount", "name": "trainer", "namespace": "team"}, "", SA, True),
        ({"kind": "ServiceAccount", "name": "trainer"}, "team", SA, True),  # a RoleBinding's namespace by default
        ({"kind": "ServiceAccount", "name": "trainer", "namespace": "other"}, "", SA, False),
        ({"kind": "Group", "name": "system:serviceaccounts:team"}, "", SA, True),
        ({"kind": "Group", "name": "system:serviceaccounts"}, "", SA, True),
        ({"kind": "User", "name": "system:serviceaccount:team:trainer"}, "", SA, True),
        ({"kind": "User", "name": "alice"}, "", UserInfo("alice"), True),
        ({"kind": "Group", "name": "system:masters"}, "", ADMIN, True),
        ({"kind": "User", "name": "alice"}, "", SA, False),
    ],
)
def test_a_binding_subject_names_users_groups_and_service_accounts(
    subject: dict[str, Any], binding_ns: str, user: UserInfo, matches: bool
) -> None:
    assert subject_matches(subject, user, binding_ns) is matches
