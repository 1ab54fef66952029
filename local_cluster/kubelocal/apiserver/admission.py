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

Plugins are plain functions, but one that waits on I/O (a webhook call) must not hold the event loop,
where every other client's request is served. It asks through `awaited(key, call)`: under
`run_admitted` (how the handler runs every write), the first time this raises `Pending` before the write
has changed anything (plugins run before storage; the only one that writes, quota, runs last); the call
runs on a worker thread, its answer is kept under `key`, and the write runs again from the start, when
`awaited` returns the answer. Outside `run_admitted`, `awaited` makes the call in place.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Hashable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from .authorization import ADMIN, UserInfo
from .errors import ApiError, not_found
from .registry import ResourceType
from .store import Key, Store

NS_KEY: Key = ("", "namespaces")
#: Rounds of one write under `run_admitted` (each may meet one more call); past this, the object kept changing.
MAX_ROUNDS = 32

T = TypeVar("T")
# The answers the write this request is running has had so far (None: not under `run_admitted`).
_ANSWERS: ContextVar[dict[Hashable, Any] | None] = ContextVar("admission_answers", default=None)


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
    # (group, version, kind) of `obj` when a subresource has its own kind (pods/eviction: policy/v1 Eviction)
    kind: tuple[str, str, str] | None = None


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


# -- plugins that wait on I/O -----------------------------------------------------------------------------


class Pending(Exception):
    """A plugin needs `call` made before the write can go on (raised before the write changed anything)."""

    def __init__(self, key: Hashable, call: Callable[[], Any]) -> None:
        super().__init__(f"admission call pending: {key!r}")
        self.key, self.call = key, call


def awaited(key: Hashable, call: Callable[[], T]) -> T:
    """What `call` returns, for a plugin. `call` is blocking I/O that touches no server state and raises
    nothing (it returns its failure); `key` names the answer within one write. Under `run_admitted` the
    answer is the one kept from an earlier round, or `Pending` has it made off the event loop; otherwise
    the call is made here."""
    answers = _ANSWERS.get()
    if answers is None:
        return call()
    if key in answers:
        return answers[key]  # type: ignore[no-any-return]
    raise Pending(key, call)


def stable(key: str, make: Callable[[], T]) -> T:
    """A value the server makes for a write (a generated name, a uid), the same in every round of it under
    `run_admitted`, so a webhook's answer is about the object that is stored."""
    answers = _ANSWERS.get()
    if answers is None:
        return make()
    slot = ("stable", key)
    if slot not in answers:
        answers[slot] = make()
    return answers[slot]  # type: ignore[no-any-return]


async def run_admitted(write: Callable[[], T], *, again: Callable[[], Awaitable[None]] | None = None) -> T:
    """Run a write (a synchronous REST operation) so that its plugins' calls wait on worker threads while
    the event loop serves other requests: each `Pending` call is made, kept, and the write run again.
    `again` renews, before a further round, what the write consumed (a body it takes over)."""
    answers: dict[Hashable, Any] = {}
    token = _ANSWERS.set(answers)
    try:
        for _ in range(MAX_ROUNDS):
            try:
                return write()
            except Pending as pending:
                answers[pending.key] = await asyncio.to_thread(pending.call)
                if again is not None:
                    await again()
    finally:
        _ANSWERS.reset(token)
    raise ApiError(409, f"Operation cannot be fulfilled: the object changed {MAX_ROUNDS} times while its admission "
                        "calls were made; try again", reason="Conflict")
