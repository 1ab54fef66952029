"""The garbage collector (kube-controller-manager's `garbagecollector`), beside the API server.

It watches every resource type the server lists (discovery; refreshed when CRDs change), keeps a graph
of ownerReferences, and through the API:

- deletes a dependent once all its owners are gone (background propagation), or drops the references
  to the owners that are gone when others remain;
- for an owner deleted with `propagationPolicy: Foreground` (finalizer `foregroundDeletion`) deletes
  its dependents first and removes the finalizer once no dependent with `blockOwnerDeletion` is left;
- for an owner deleted with `propagationPolicy: Orphan` (finalizer `orphan`) removes the owner's
  reference from every dependent, then the finalizer.

Like the real one it is asynchronous: a DELETE returns while dependents still exist. `delay` holds back
every step it takes (after an owner vanishes, before finishing a foreground or orphan deletion) so tests
and people can see those windows on purpose.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubelocal.kubeclient import MERGE_PATCH, ApiError, Informer, KubeClient

from .discovery import SKIPPED, ApiResource, by_kind, discover, group_of
from .runtime import Controller, ignore_missing

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass
class GraphNode:
    """What the collector remembers of one object."""

    resource: ApiResource
    namespace: str | None
    name: str
    uid: str
    owners: list[dict[str, Any]] = field(default_factory=list)
    deleting: bool = False
    finalizers: tuple[str, ...] = ()


def dependent_action(owner_states: Mapping[str, bool]) -> str:
    """What to do with a dependent given, per owner uid, whether that owner still exists:
    "keep" (all owners alive), "delete" (none left), or "unlink" (drop the references to the gone ones)."""
    if not owner_states:
        return "keep"
    alive = sum(1 for exists in owner_states.values() if exists)
    if alive == len(owner_states):
        return "keep"
    return "delete" if alive == 0 else "unlink"


class GarbageCollector(Controller):
    name = "garbage-collector"

    def __init__(self, client: KubeClient, *, delay: float = 0.0, rediscover_seconds: float = 30.0) -> None:
        super().__init__(client)
        self.delay = delay
        self.rediscover_seconds = rediscover_seconds
        self.graph: dict[str, GraphNode] = {}
        self.dependents: dict[str, set[str]] = {}
        self.kinds: dict[tuple[str, str], ApiResource] = {}
        self._watched: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._rediscover = asyncio.Event()
        self.watch(CRD_PATH, lambda _kind, _crd: self._rediscover.set())

    async def started(self) -> None:
        await self._refresh()
        self.spawn(self._discovery_loop(), "discovery")

    async def stop(self) -> None:
        for task in self._watched.values():
            task.cancel()
        await asyncio.gather(*self._watched.values(), return_exceptions=True)
        await super().stop()

    async def _discovery_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.rediscover_seconds):
                    await self._rediscover.wait()
            except TimeoutError:
                pass
            self._rediscover.clear()
            try:
                await self._refresh()
            except (ApiError, OSError) as exc:
                log.debug("garbage collector: discovery failed: %s", exc)

    async def _refresh(self) -> None:
        """Watch every listable, deletable type not yet watched (new CRDs), wait for their first list."""
        resources = [r for r in await discover(self.client)
                     if {"list", "watch", "delete"} <= r.verbs and (r.group, r.plural) not in SKIPPED]
        self.kinds = by_kind(resources)
        new = []
        for res in resources:
            key = (res.group, res.plural)
            if key in self._watched:
                continue

            def handler(kind: str, obj: dict[str, Any], res: ApiResource = res) -> None:
                self._on_event(res, kind, obj)

            informer = Informer(self.client, res.path(), handler)
            self._watched[key] = asyncio.create_task(informer.run(), name=f"gc-{res.plural}")
            new.append(informer)
        await asyncio.gather(*(i.synced.wait() for i in new))

    # -- the graph ------------------------------------------------------------------------------------

    def _on_event(self, res: ApiResource, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        old = self.graph.get(uid)
        for ref in old.owners if old else ():
            self.dependents.get(ref.get("uid") or "", set()).discard(uid)
        if kind == "DELETED":
            self.graph.pop(uid, None)
            for dep in list(self.dependents.get(uid, ())):
                self.queue.add_after(("dependent", dep), self.delay)
            for ref in old.owners if old else meta.get("ownerReferences") or []:
                self.queue.add_after(("owner", ref.get("uid")), self.delay)  # a foreground owner may wait for it
            return
        node = GraphNode(res, meta.get("namespace"), meta["name"], uid, list(meta.get("ownerReferences") or []),
                         bool(meta.get("deletionTimestamp")), tuple(meta.get("finalizers") or ()))
        self.graph[uid] = node
        for ref in node.owners:
            self.dependents.setdefault(ref.get("uid") or "", set()).add(uid)
            owner = self.graph.get(ref.get("uid") or "")
            if owner is None or owner.deleting:
                self.queue.add_after(("dependent", uid), self.delay)
                self.queue.add_after(("owner", ref.get("uid")), self.delay)
        if node.deleting and {FOREGROUND, ORPHAN} & set(node.finalizers):
            self.queue.add_after(("owner", uid), self.delay)

    async def sync(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        what, uid = key
        if what == "dependent":
            await self._sync_dependent(uid)
        else:
            await self._sync_owner(uid)

    async def _owner_exists(self, ref: Mapping[str, Any], namespace: str | None) -> bool:
        """Ask the server, not the cache: an owner created a moment ago may not have reached us yet."""
        res = self.kinds.get((group_of(ref.get("apiVersion") or ""), ref.get("kind") or ""))
        if res is None:
            return False
        try:
            owner = await self.client.get(res.path(namespace if res.namespaced else None, ref.get("name")))
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return bool((owner.get("metadata") or {}).get("uid") == ref.get("uid"))

    async def _sync_dependent(self, uid: str) -> None:
        node = self.graph.get(uid)
        if node is None or node.deleting:
            return
        states = {ref["uid"]: await self._owner_exists(ref, node.namespace) for ref in node.owners if ref.get("uid")}
        action = dependent_action(states)
        path = node.resource.path(node.namespace, node.name)
        if action == "delete":
            await ignore_missing(self.client.delete(path, {"propagationPolicy": "Background",
                                                           "preconditions": {"uid": uid}}))
        elif action == "unlink":
            keep = [ref for ref in node.owners if states.get(ref.get("uid") or "")]
            await ignore_missing(self.client.patch(path, {"metadata": {"ownerReferences": keep}}, MERGE_PATCH))

    async def _sync_owner(self, uid: str) -> None:
        node = self.graph.get(uid)
        if node is None or not node.deleting:
            return
        path = node.resource.path(node.namespace, node.name)
        current = await ignore_missing(self.client.get(path))
        if current is None or current["metadata"].get("uid") != uid:
            return
        meta = current["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        deps = [self.graph[d] for d in sorted(self.dependents.get(uid, ())) if d in self.graph]
        if ORPHAN in finalizers:
            for dep in deps:
                keep = [ref for ref in dep.owners if ref.get("uid") != uid]
                await ignore_missing(self.client.patch(dep.resource.path(dep.namespace, dep.name),
                                                       {"metadata": {"ownerReferences": keep or None}}, MERGE_PATCH))
            finalizers.remove(ORPHAN)
        if FOREGROUND in finalizers:
            blocking = False
            for dep in deps:
                if not dep.deleting:
                    await ignore_missing(self.client.delete(dep.resource.path(dep.namespace, dep.name),
                                                            {"propagationPolicy": "Foreground",
                                                             "preconditions": {"uid": dep.uid}}))
                if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in dep.owners):
                    blocking = True
            if not blocking:
                finalizers.remove(FOREGROUND)
        if finalizers != list(meta.get("finalizers") or []):
            await ignore_missing(self.client.patch(path, {"metadata": {
                "finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}}, MERGE_PATCH))
