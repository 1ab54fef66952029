"""Parse a request URL the way kube-apiserver's RequestInfoFactory does (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


@dataclass(frozen=True)
class RequestInfo:
    is_resource: bool
    verb: str
    group: str | None = None
    version: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    path: str = ""
    #: The name segment of the URL itself (`name` may instead come from a metadata.name field selector).
    url_name: str | None = None


def parse_request(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """Classify a request into verb, group, version, resource, subresource, namespace and name."""
    parts = [p for p in path.split("/") if p]
    method = method.upper()
    plain = RequestInfo(False, method.lower(), path=path)
    if not parts or parts[0] not in ("api", "apis"):
        return plain
    if parts[0] == "api":
        if len(parts) < 3:
            return plain
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 4:
            return plain
        group, version, rest = parts[1], parts[2], parts[3:]
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    url_name = name
    sub = "/".join(rest[2:]) or None
    if resource == "namespaces" and namespace is None and name is not None:
        namespace = name
    watching = query.get("watch") in ("1", "true", "True")
    verb = {
        "GET": "get" if name else "list",
        "HEAD": "get" if name else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, method.lower())
    if verb in ("list", "get") and watching:
        verb = "watch"
    if resource == "namespaces" and name is None:
        namespace = None
    if name is None and verb in ("list", "watch"):
        # A list/watch narrowed to one name by field selector authorizes as that name (as Kubernetes).
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("=")
            if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                name = value.lstrip("=").strip()
    return RequestInfo(True, verb, group, version, resource, sub, namespace, name, path, url_name)
