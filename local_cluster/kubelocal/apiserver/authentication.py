"""Authentication: who a request comes from, as kube-apiserver's authentication filter decides it.

A request with `Authorization: Bearer <token>` is a ServiceAccount's (tokens.py) or is refused with 401 and
kube-apiserver's Status. A request without credentials is the local admin (`system:masters`): tests, kubectl
and the plane's own components reach the API that way, as a cluster's admin does with its client
certificate. Either may impersonate (`Impersonate-User`/`Impersonate-Group`, `kubectl --as`); a token's
caller needs RBAC's `impersonate` on the users, groups or serviceaccounts it names, as on a cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .authorization import ADMIN, Attributes, Authorizer, Decision, UserInfo, authorize, forbidden, user_from_headers
from .tokens import ServiceAccountTokens, Unauthorized

log = logging.getLogger(__name__)
SA_PREFIX = "system:serviceaccount:"


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The bearer token of an `Authorization` header, if it carries one."""
    value = headers.get("Authorization") or ""
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip()


def impersonation(headers: Mapping[str, str]) -> UserInfo | None:
    """The identity `Impersonate-User`/`Impersonate-Group` ask for, else None."""
    return user_from_headers(headers) if headers.get("Impersonate-User") else None


def authenticate(headers: Mapping[str, str], tokens: ServiceAccountTokens,
                 authorizers: list[Authorizer]) -> UserInfo:
    """The request's user: its token's ServiceAccount or the admin, then whom it impersonates (if allowed)."""
    token = bearer_token(headers)
    caller = ADMIN
    if token is not None:
        try:
            caller = tokens.authenticate(token)
        except Unauthorized as exc:
            log.info("Unable to authenticate the request: %s", exc.why)
            raise
    wanted = impersonation(headers)
    if wanted is None:
        return caller
    if caller is not ADMIN:
        _check_impersonation(caller, wanted, headers, authorizers)
    return wanted


def _check_impersonation(caller: UserInfo, wanted: UserInfo, headers: Mapping[str, str],
                         authorizers: list[Authorizer]) -> None:
    """kube's impersonation filter: `impersonate` on users/NAME (or serviceaccounts/NAME in its namespace) and
    on groups/NAME for each Impersonate-Group."""
    checks: list[tuple[str, str, str]] = []  # (resource, namespace, name)
    if wanted.name.startswith(SA_PREFIX) and wanted.name.count(":") == 3:
        _, _, ns, name = wanted.name.split(":")
        checks.append(("serviceaccounts", ns, name))
    else:
        checks.append(("users", "", wanted.name))
    checks += [("groups", "", v) for k, v in headers.items() if k.lower() == "impersonate-group"]
    for resource, ns, name in checks:
        attrs = Attributes(user=caller, verb="impersonate", is_resource_request=True, path="",
                           resource=resource, namespace=ns, name=name)
        decision, reason = authorize(authorizers, attrs)
        if decision is not Decision.ALLOW:
            raise forbidden(attrs, reason)
