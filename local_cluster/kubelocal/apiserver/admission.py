"""Admission: the chain every write passes through between decoding and storage.

This is the extension point for policy, shaped like kube-apiserver's admission plugins
(`k8s.io/apiserver/pkg/admission`). A write runs, in order:

1. **mutating** plugins (`MutatingPlugin.admit`), in registration order: they may change
   `request.obj` in place (defaulting, ServiceAccount token mounts, mutating webhooks);
2. the kind's REST strategy (`strategy.py`: generateName, schema validation, pruning, defaults);
3. **validating** plugins (`ValidatingPlugin.validate`), in registration order: they may only
   refuse (CEL ValidatingAdmissionPolicy, validating webhooks, quota).

A plugin refuses by raising `ApiError` (use `errors.invalid(...)` for a 422 with causes, or an
`ApiError(403, ...)` as kube-apiserver's plugins do); it adds a client-visible warning by appending
to `request.warnings`. Register with `ApiServer.admission.register(plugin)`; a plugin says which
requests it cares about in `handles`. Dry-run requests pass through the chain like real ones
(`request.dry_run` is set so a plugin with side effects can skip them, as webhooks declare
`sideEffects`). Built in: `NamespaceLifecycle` (404 for a missing namespace, 403 for a terminating one).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .authorization import ADMIN, UserInfo
from .errors import ApiError, not_found
from .registry import ResourceType
from .store import Key, Store

NS_KEY: Key = ("", "namespaces")


class Operation(enum.Enum):
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"


@dataclass
class AdmissionRequest:
    """admission.Attributes: one write as a plugin sees it."""

    operation: Operation
    rt: ResourceType
    namespace: str | None
    name: str
    obj: dict[str, Any] | None  # the object to be stored (None for DELETE); mutating plugins edit it
    old: dict[str, Any] | None = None  # the stored object (UPDATE, DELETE)
    subresource: str | None = None
    dry_run: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)  # query parameters or DeleteOptions
    user: UserInfo = ADMIN
    warnings: list[str] = field(default_factory=list)


@runtime_checkable
class MutatingPlugin(Protocol):
    name: str

    def handles(self, request: AdmissionRequest) -> bool: ...

    def admit(self, request: AdmissionRequest) -> None:
        """Change `request.obj` in place, or raise ApiError to refuse."""
        ...


@runtime_checkable
class ValidatingPlugin(Protocol):
    name: str

    def handles(self, request: AdmissionRequest) -> bool: ...

    def validate(self, request: AdmissionRequest) -> None:
        """Raise ApiError to refuse; never change the object."""
        ...


class AdmissionChain:
    """The ordered mutating and validating plugins of one API server."""

    def __init__(self) -> None:
        self.mutating: list[MutatingPlugin] = []
        self.validating: list[ValidatingPlugin] = []

    def register(self, plugin: MutatingPlugin | ValidatingPlugin) -> None:
        """Append a plugin to the phase(s) it implements (a plugin may implement both)."""
        registered = False
        if isinstance(plugin, MutatingPlugin):
            self.mutating.append(plugin)
            registered = True
        if isinstance(plugin, ValidatingPlugin):
            self.validating.append(plugin)
            registered = True
        if not registered:
            raise TypeError(f"{plugin!r} implements neither admit() nor validate()")

    def admit(self, request: AdmissionRequest) -> None:
        for plugin in self.mutating:
            if plugin.handles(request):
                plugin.admit(request)

    def validate(self, request: AdmissionRequest) -> None:
        for plugin in self.validating:
            if plugin.handles(request):
                plugin.validate(request)


class NamespaceLifecycle:
    """No new objects in a namespace that does not exist or is being terminated."""

    name = "NamespaceLifecycle"

    def __init__(self, store: Store) -> None:
        self._store = store

    def handles(self, request: AdmissionRequest) -> bool:
        return request.operation is Operation.CREATE and request.rt.namespaced and request.subresource is None

    def admit(self, request: AdmissionRequest) -> None:
        ns = request.namespace
        assert ns is not None
        space = self._store.get(NS_KEY, None, ns)
        if space is None:
            raise not_found("", "namespaces", ns)
        if space["metadata"].get("deletionTimestamp"):
            rt = request.rt
            raise ApiError(
                403,
                f'{rt.plural} "" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated",
                details={"group": rt.group, "kind": rt.plural},
            )
