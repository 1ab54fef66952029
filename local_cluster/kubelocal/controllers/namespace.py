"""The namespace controller: a deleted namespace stays `Terminating` while its content is deleted through
the API, then its `kubernetes` finalizer is removed (`/finalize`) and it goes away.

While it terminates, the API server refuses creates in it with 403 Forbidden ("... because it is being
terminated"); that rule is the server's (NamespaceLifecycle admission), the draining is this controller's.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kubelocal.kubeclient import KubeClient

from .discovery import ApiResource, discover
from .runtime import Controller, ignore_missing

FINALIZER = "kubernetes"
NS_PATH = "/api/v1/namespaces"


class NamespaceController(Controller):
    name = "namespace-controller"

    def __init__(self, client: KubeClient, *, recheck_seconds: float = 0.2) -> None:
        super().__init__(client)
        self.recheck_seconds = recheck_seconds
        self.namespaces = self.watch(NS_PATH, self._on_namespace)

    def _on_namespace(self, kind: str, ns: dict[str, Any]) -> None:
        if kind != "DELETED" and ns["metadata"].get("deletionTimestamp"):
            self.queue.add(ns["metadata"]["name"])

    async def started(self) -> None:
        for _, ns in list(self.namespaces.cache.items()):
            self._on_namespace("ADDED", ns)

    async def sync(self, key: Hashable) -> None:
        name = str(key)
        ns = await ignore_missing(self.client.get(f"{NS_PATH}/{name}"))
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        resources = [r for r in await discover(self.client)
                     if r.namespaced and {"list", "deletecollection"} <= r.verbs]
        remaining = 0
        for res in resources:
            remaining += await self._drain(res, name)
        if remaining:
            self.queue.add_after(name, self.recheck_seconds)  # pods in their grace period, finalizers
            return
        finalizers = [f for f in (ns.get("spec") or {}).get("finalizers") or [] if f != FINALIZER]
        if FINALIZER in ((ns.get("spec") or {}).get("finalizers") or []):
            body = {**ns, "spec": {**ns.get("spec", {}), "finalizers": finalizers}}
            await ignore_missing(self.client.request("PUT", f"{NS_PATH}/{name}/finalize", body=body))
        await ignore_missing(self.client.delete(f"{NS_PATH}/{name}"))

    async def _drain(self, res: ApiResource, namespace: str) -> int:
        """Delete what is left of one type; how many objects still exist."""
        listing = await self.client.get(res.path(namespace))
        items = listing.get("items") or []
        if any(not (item.get("metadata") or {}).get("deletionTimestamp") for item in items):
            await ignore_missing(self.client.delete(res.path(namespace), {"propagationPolicy": "Background"}))
        return len(items)
