"""Node status and heartbeats (kubelet's nodestatus and nodelease): registering a node Ready, renewing its
Lease in `kube-node-lease`, and posting Ready again when the node lifecycle controller marked a node that
is in fact alive.

Renewals go out on the kubelet's heartbeat client, whose connections pod status writes never use, so a
backlog of those never delays a renewal until the node looks unreachable. The nodes of one heartbeat loop
are spread evenly over its interval, as a real cluster's kubelets are, so many nodes make a steady trickle
of renewals rather than a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubelocal import times
from kubelocal.controllers.node_lifecycle import ready_status
from kubelocal.kubeclient import MERGE_PATCH, ApiError, KubeClient, now_rfc3339
from kubelocal.nodes import split_labels

LEASE_NAMESPACE = "kube-node-lease"
#: The Lease's leaseDurationSeconds, as kubelet's default (--node-lease-duration-seconds).
LEASE_DURATION_SECONDS = 40
_TRANSIENT = (ApiError, OSError, asyncio.TimeoutError)


def ready_conditions(ready: bool | None) -> list[dict[str, Any]]:
    """Node conditions: Ready (True/False, or Unknown when None: lost) and the pressure conditions."""
    now = now_rfc3339()
    if ready is None:
        def unknown(ctype: str) -> dict[str, Any]:
            return {"type": ctype, "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now,
                    "lastTransitionTime": now}
        return [unknown(t) for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    return [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
         "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
         "message": "kubelet has no disk pressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
         "message": "kubelet has sufficient PID available", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "Ready", "status": "True" if ready else "False",
         "reason": "KubeletReady" if ready else "KubeletNotReady",
         "message": "kubelet is posting ready status" if ready else "kubelet is not ready",
         "lastHeartbeatTime": now, "lastTransitionTime": now},
    ]


class NodeStatus:
    """Registers nodes and keeps their Leases and Ready condition current."""

    def __init__(self, client: KubeClient, heartbeat_client: KubeClient,
                 cached: Callable[[str], Mapping[str, Any] | None], lost: set[str],
                 admin: KubeClient | None = None) -> None:
        self.client = client
        self.heartbeat_client = heartbeat_client
        #: Sets what a node may not set on itself under NodeRestriction (labels outside the kubelet's namespaces,
        #: the taints of a Node that exists already), as kubeadm labels a node after it joins; None: `client`.
        self.admin = admin or client
        #: The node as the kubelet's informer last saw it (None: not seen).
        self.cached = cached
        #: Nodes whose kubelet is silent (a simulated node loss): never renewed.
        self.lost = lost

    async def ensure_lease_namespace(self) -> None:
        with contextlib.suppress(ApiError):  # kube-apiserver makes this system namespace; 409 if it exists
            await self.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": LEASE_NAMESPACE}})

    async def register(self, node: Mapping[str, Any]) -> None:
        """Create the Node with the labels a kubelet may set itself and its taints (or, when it exists, set those
        labels), have the administrator set the other labels (and the taints of an existing Node), post it Ready,
        take its Lease."""
        name = node["metadata"]["name"]
        own, administered = split_labels(node["metadata"].get("labels") or {})
        try:
            created = await self.client.post("/api/v1/nodes", {**node, "metadata": {**node["metadata"],
                                                                                     "labels": own}})
        except ApiError as exc:
            if exc.status != 409:
                raise
            created = await self.client.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": own}}, MERGE_PATCH)
            administered_patch: dict[str, Any] = {"spec": node.get("spec") or {}}
            if administered:
                administered_patch["metadata"] = {"labels": administered}
            await self.admin.patch(f"/api/v1/nodes/{name}", administered_patch, MERGE_PATCH)
        else:
            if administered:
                await self.admin.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": administered}}, MERGE_PATCH)
        status = dict(node.get("status") or {})
        status["conditions"] = ready_conditions(True)
        await self.client.patch(f"/api/v1/nodes/{name}/status", {"status": status}, MERGE_PATCH)
        await self.renew_lease(name, create=True, owner=created)

    async def register_all(self, nodes: Sequence[Mapping[str, Any]], concurrency: int = 8) -> None:
        """Register many nodes, a few at a time (a thousand simulated nodes must not take a request each in turn)."""
        for i in range(0, len(nodes), concurrency):
            await asyncio.gather(*(self.register(node) for node in nodes[i:i + concurrency]))

    async def renew_lease(self, node: str, *, create: bool = False, owner: Mapping[str, Any] | None = None) -> None:
        """Renew the node's Lease, creating it when missing (`create`: expect it missing, as at registration), owned
        by the Node (`owner`, else the cached one) as kubelet's is, so the garbage collector removes it with it."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        stamp = times.format_micro_time()
        spec = {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": stamp}
        meta: dict[str, Any] = {"name": node}
        uid = ((owner or self.cached(node) or {}).get("metadata") or {}).get("uid")
        if uid:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                 "spec": {**spec, "acquireTime": stamp}}
        if create:
            try:
                await self.heartbeat_client.post(path, lease)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
        try:
            await self.heartbeat_client.patch(f"{path}/{node}", {"spec": spec}, MERGE_PATCH)
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.heartbeat_client.post(path, lease)

    async def post_ready(self, node: str, client: KubeClient | None = None) -> None:
        await (client or self.client).patch(f"/api/v1/nodes/{node}/status",
                                            {"status": {"conditions": ready_conditions(True)}}, MERGE_PATCH)

    async def heartbeat_once(self, node: str) -> None:
        """Renew the node's Lease; post it Ready again if it was marked otherwise while its kubelet lived."""
        if node in self.lost:
            return
        with contextlib.suppress(*_TRANSIENT):
            await self.renew_lease(node)
            cached = self.cached(node)
            if cached is not None and ready_status(cached) != "True":
                await self.post_ready(node, self.heartbeat_client)

    async def heartbeat(self, nodes: Sequence[str], interval: float) -> None:
        """Renew each node every `interval` seconds, the nodes spread evenly over it; runs until cancelled.

        Each node's renewal goes out at its slot without waiting for the others', as every node has a kubelet
        of its own: a slow API server delays each renewal by its own latency, not by the sum of all of them.
        A node whose last renewal is still in flight skips its turn; a lost node's turn passes without a write
        (its kubelet is silent)."""
        if not nodes:
            return
        step = interval / len(nodes)
        due = time.monotonic()
        in_flight: dict[str, asyncio.Task[None]] = {}
        try:
            while True:
                for node in nodes:
                    due += step
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    previous = in_flight.get(node)
                    if previous is None or previous.done():
                        in_flight[node] = asyncio.create_task(self.heartbeat_once(node), name=f"heartbeat-{node}")
        finally:
            for task in in_flight.values():
                task.cancel()
            await asyncio.gather(*in_flight.values(), return_exceptions=True)
