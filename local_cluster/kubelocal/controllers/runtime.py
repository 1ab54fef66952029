"""The plumbing every controller shares, as in kube-controller-manager: informers feed a work queue of
keys, one worker syncs a key at a time, a failed sync is retried with backoff.

Controllers talk to the API server only through its HTTP API (`KubeClient`), so every write they make
passes the server's rules and shows up in its request log, as a real controller's would.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

import aiohttp

from kubelocal.kubeclient import ApiError, Informer, KubeClient

log = logging.getLogger(__name__)

#: Errors a sync may hit when the server is busy or an object changed under it: retry, don't crash.
TRANSIENT: tuple[type[BaseException], ...] = (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError)


class WorkQueue:
    """Keys waiting to be synced; a key queued twice before its sync runs is synced once."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._pending: set[Hashable] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: Hashable) -> None:
        if key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    async def get(self) -> Hashable:
        key = await self._queue.get()
        self._pending.discard(key)
        return key

    def close(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()


class Controller:
    """Informers plus a queue plus `sync(key)`; subclasses declare the informers and the sync."""

    name = "controller"

    def __init__(self, client: KubeClient, *, retry_backoff: tuple[float, float] = (0.05, 2.0)) -> None:
        self.client = client
        self.queue = WorkQueue()
        self.retry_backoff = retry_backoff
        self.informers: list[Informer] = []
        self._failures: dict[Hashable, int] = {}
        self._tasks: list[asyncio.Task[Any]] = []

    def watch(self, path: str, handler: Callable[[str, dict[str, Any]], None],
              params: Mapping[str, str] | None = None, index_fields: tuple[str, ...] = ()) -> Informer:
        """Declare an informer (started by `start`), its cache indexed by `index_fields`."""
        informer = Informer(self.client, path, handler, params=params, index_fields=index_fields)
        self.informers.append(informer)
        return informer

    async def sync(self, key: Hashable) -> None:
        raise NotImplementedError

    def enqueue_controller(self, kind: str) -> Callable[[str, dict[str, Any]], None]:
        """An informer handler that queues (namespace, name) of the object's controller of this kind
        (a pod's ReplicaSet or Job, a ReplicaSet's Deployment)."""

        def handler(_event: str, obj: dict[str, Any]) -> None:
            ref = controller_of(obj)
            if ref and ref.get("kind") == kind:
                self.queue.add((obj["metadata"]["namespace"], ref["name"]))

        return handler

    def enqueue_all(self, informer: Informer) -> None:
        """Queue every cached object's (namespace, name): a first look after the caches filled."""
        for key in list(informer.cache):
            self.queue.add(key)

    async def start(self) -> None:
        """Start the informers, wait until their caches are filled, then start the worker."""
        for informer in self.informers:
            self._tasks.append(asyncio.create_task(informer.run(), name=f"{self.name}-informer"))
        await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
        self._tasks.append(asyncio.create_task(self._work(), name=f"{self.name}-worker"))
        await self.started()

    async def started(self) -> None:
        """Called once the caches are synced: queue whatever needs a first look."""

    async def stop(self) -> None:
        self.queue.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def spawn(self, coro: Awaitable[Any], name: str) -> None:
        """A background task that lives as long as the controller."""
        self._tasks.append(asyncio.ensure_future(coro))
        self._tasks[-1].set_name(f"{self.name}-{name}")

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self.sync(key)
            except asyncio.CancelledError:
                raise
            except TRANSIENT as exc:
                self._retry(key, exc)
            except Exception:  # a bug: log it and keep the controller alive, as the real ones do
                log.exception("%s: sync of %r failed", self.name, key)
                self._retry(key, None)
            else:
                self._failures.pop(key, None)

    def _retry(self, key: Hashable, exc: BaseException | None) -> None:
        count = self._failures.get(key, 0) + 1
        self._failures[key] = count
        base, cap = self.retry_backoff
        delay = min(cap, base * 2 ** (count - 1))
        log.debug("%s: sync of %r failed (%s); retrying in %.2fs", self.name, key, exc, delay)
        self.queue.add_after(key, delay)


async def ignore_missing(call: Awaitable[Any]) -> Any:
    """Await a write; a 404 (the object is already gone) is not an error for a controller."""
    try:
        return await call
    except ApiError as exc:
        if exc.status != 404:
            raise
        return None


async def create_or_exists(call: Awaitable[Any]) -> Any:
    """Await a create; a 409 AlreadyExists means another sync got there first."""
    try:
        return await call
    except ApiError as exc:
        if exc.status != 409:
            raise
        return None


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    """The ownerReference a controller puts on what it creates (blocks foreground deletion of the owner)."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": controller, "blockOwnerDeletion": True}


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ownerReference marked controller: true, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None
