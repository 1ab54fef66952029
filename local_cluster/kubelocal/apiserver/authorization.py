"""Authorization: every resource request is put to an `Authorizer` before it reaches storage.

The shape is kube-apiserver's (`k8s.io/apiserver/pkg/authorization/authorizer`): the handler builds
`Attributes` from the request (who, verb, group, resource, subresource, namespace, name), asks the
authorizer chain, and answers 403 with kube-apiserver's message when it denies. The server's chain is
RBAC, then `AlwaysAllow` for the local admin (a request without credentials); `authentication.py` says
who the caller is. Like kube-apiserver's union authorizer, the first authorizer with an opinion decides.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .errors import ApiError, resource_label
from .errors import details as status_details
from .requestinfo import RequestInfo


@dataclass(frozen=True)
class UserInfo:
    """Who is asking: a ServiceAccount (its token), whom the caller impersonates, or the local admin."""

    name: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


ADMIN = UserInfo("system:admin", ("system:masters", "system:authenticated"))


def user_from_headers(headers: Mapping[str, str]) -> UserInfo:
    """The request's identity: `Impersonate-User`/`Impersonate-Group` (kubectl --as/--as-group), else admin."""
    name = headers.get("Impersonate-User")
    if not name:
        return ADMIN
    groups = tuple(v for k, v in headers.items() if k.lower() == "impersonate-group")
    if name.startswith("system:serviceaccount:"):
        ns = name.split(":")[2] if name.count(":") >= 3 else ""
        groups += ("system:serviceaccounts", f"system:serviceaccounts:{ns}")
    return UserInfo(name, (*groups, "system:authenticated"))


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes: the request as an authorizer sees it."""

    user: UserInfo
    verb: str
    is_resource_request: bool
    path: str
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @staticmethod
    def of(info: RequestInfo, user: UserInfo, path: str) -> Attributes:
        return Attributes(
            user=user,
            verb=info.verb,
            is_resource_request=info.is_resource,
            path=path,
            api_group=info.group or "",
            api_version=info.version or "",
            resource=info.resource or "",
            subresource=info.subresource or "",
            namespace=info.namespace or "",
            name=info.name or "",
        )


class Decision(enum.Enum):
    DENY = "Deny"
    ALLOW = "Allow"
    NO_OPINION = "NoOpinion"


class Authorizer(Protocol):
    """One authorization mode (AlwaysAllow, RBAC, ...)."""

    def authorize(self, attrs: Attributes) -> tuple[Decision, str]:
        """The decision and a reason (shown in the 403 message when it denies)."""
        ...


class AlwaysAllow:
    def authorize(self, attrs: Attributes) -> tuple[Decision, str]:
        return Decision.ALLOW, ""


def authorize(authorizers: list[Authorizer], attrs: Attributes) -> tuple[Decision, str]:
    """The union authorizer: the first authorizer with an opinion decides; none at all denies."""
    for authorizer in authorizers:
        decision, reason = authorizer.authorize(attrs)
        if decision is not Decision.NO_OPINION:
            return decision, reason
    return Decision.DENY, ""


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    """The 403 kube-apiserver sends: `pods "p" is forbidden: User "u" cannot get resource "pods" ...`."""
    user = attrs.user.name
    if not attrs.is_resource_request:
        message = f'forbidden: User "{user}" cannot {attrs.verb} path "{attrs.path}"'
        return ApiError(403, message + (f": {reason}" if reason else ""), details={})
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    where = f' in the namespace "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
    named = f' "{attrs.name}"' if attrs.name else ""
    message = (
        f'{resource_label(attrs.api_group, resource)}{named} is forbidden: User "{user}" cannot '
        f'{attrs.verb} resource "{resource}" in API group "{attrs.api_group}"{where}'
    )
    if reason:
        message += f": {reason}"
    # StatusDetails as Go writes them: name, group, kind, each left out when empty (`omitempty`).
    return ApiError(403, message, details=status_details(attrs.name, attrs.api_group, attrs.resource))
