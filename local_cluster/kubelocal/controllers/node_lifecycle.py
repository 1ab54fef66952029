"""The node lifecycle controller and its taint manager (kube-controller-manager's `nodelifecycle`).

- A node whose kubelet stops renewing its Lease (`kube-node-lease/<node>`) for longer than `grace`
  seconds turns `Ready=Unknown`, gets the `node.kubernetes.io/unreachable` NoSchedule and NoExecute
  taints, and its pods are marked not Ready. When the kubelet posts `Ready=True` again and renews its
  Lease, the taints come off.
- The taint manager deletes pods on a node with a NoExecute taint they do not tolerate at once, and
  those tolerating it for N seconds after N seconds (marking them `DisruptionTarget`). Pods normally
  tolerate `unreachable` for 300 s (DefaultTolerationSeconds admission); `toleration_cap` shortens that
  wait so a local run or a test need not sit five minutes.

The taint manager works per node and per event, as kube's does, so that its cost does not grow with the
pods elsewhere: a node whose NoExecute taints change queues only its own pods (from the pod informer's
`spec.nodeName` index), a pod changing on such a node queues itself, and a pod that may stay a while longer
is queued again when its time is due (a timer), not found by a periodic scan.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from kubelocal import times
from kubelocal.kubeclient import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient

from .runtime import TRANSIENT, Controller, ignore_missing

UNREACHABLE = "node.kubernetes.io/unreachable"
LEASE_NAMESPACE = "kube-node-lease"
NODE_NAME = "spec.nodeName"

#: When each of a node's NoExecute taints, by (key, value), began: everything a pod's eviction time reads from its node.
TaintsSince = dict[tuple[str, str], str]


def no_execute_since(node: Mapping[str, Any] | None, before: Mapping[tuple[str, str], str], now: str) -> TaintsSince:
    """The node's NoExecute taints (none for no node) and since when: their timeAdded, else when this controller
    first saw them (`before`, or `now`), as kube's taint manager counts from when it first scheduled an eviction.
    When this changes, the eviction times of the node's pods may change."""
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    since: TaintsSince = {}
    for taint in taints:
        if taint.get("effect") == "NoExecute":
            key = (str(taint.get("key") or ""), str(taint.get("value") or ""))
            since[key] = str(taint.get("timeAdded") or before.get(key) or now)
    return dict(sorted(since.items()))


def eviction_delay(pod: Mapping[str, Any], taints: Sequence[Mapping[str, Any]], now: dt.datetime,
                   cap: float | None) -> float | None:
    """Seconds until the taint manager deletes the pod (0: now), or None when it may stay.

    Each NoExecute taint must be tolerated; the shortest tolerationSeconds counts from the taint's
    timeAdded, and `cap` (if set) bounds it."""
    delay: float | None = None
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        seconds = _tolerated_for(pod, taint)
        if seconds is None:
            return 0.0
        if seconds == float("inf"):
            continue
        if cap is not None:
            seconds = min(seconds, cap)
        added = times.parse_time(taint.get("timeAdded")) or now
        left = max((added - now).total_seconds() + seconds, 0.0)
        delay = left if delay is None else min(delay, left)
    return delay


def _tolerated_for(pod: Mapping[str, Any], taint: Mapping[str, Any]) -> float | None:
    """How long the pod tolerates the taint: None (not at all), inf (forever) or seconds."""
    best: float | None = None
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") not in (None, "", taint.get("effect")):
            continue
        if tol.get("operator") == "Exists":
            key_ok = not tol.get("key") or tol.get("key") == taint.get("key")
        else:
            key_ok = tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or "")
        if not key_ok:
            continue
        seconds = tol.get("tolerationSeconds")
        value = float("inf") if seconds is None else max(0.0, float(seconds))
        best = value if best is None else max(best, value)
    return best


def ready_status(node: Mapping[str, Any]) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


class NodeLifecycleController(Controller):
    name = "node-lifecycle-controller"

    def __init__(self, client: KubeClient, *, grace: float = 4.0, monitor_period: float = 0.5,
                 toleration_cap: float | None = 0.0) -> None:
        super().__init__(client)
        self.grace = grace
        self.monitor_period = monitor_period
        self.toleration_cap = toleration_cap
        self.nodes = self.watch("/api/v1/nodes", self._on_node)
        self.leases = self.watch(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                                 lambda _k, _o: None)
        self.pods = self.watch("/api/v1/pods", self._on_pod, index_fields=(NODE_NAME,))
        #: The NoExecute taints of each node that has any, and since when.
        self._no_execute: dict[str, TaintsSince] = {}

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.queue.add(("node", name))
        before = self._no_execute.get(name, {})
        taints = {} if kind == "DELETED" else no_execute_since(node, before, times.format_micro_time())
        if taints == before:
            return
        if not taints:
            # Pods already timed keep their timers; each finds, when due, that it may stay.
            del self._no_execute[name]
            return
        self._no_execute[name] = taints
        for pod in self.pods.by_field(NODE_NAME, name):
            self._queue_pod(pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED" and (pod.get("spec") or {}).get("nodeName") in self._no_execute:
            self._queue_pod(pod)

    def _queue_pod(self, pod: Mapping[str, Any]) -> None:
        self.queue.add(("pod", pod["metadata"]["namespace"], pod["metadata"]["name"]))

    async def started(self) -> None:
        self.spawn(self._monitor(), "monitor")

    async def _monitor(self) -> None:
        while True:
            for key in list(self.nodes.cache):
                self.queue.add(("node", key[1]))
            await asyncio.sleep(self.monitor_period)

    def _last_heartbeat(self, node: Mapping[str, Any]) -> dt.datetime:
        lease = self.leases.cache.get((LEASE_NAMESPACE, node["metadata"]["name"]))
        renewed = times.parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
        return renewed or times.parse_time(node["metadata"].get("creationTimestamp")) or times.now()

    async def sync(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        if key[0] == "node":
            await self._sync_node(key[1])
        else:
            await self._sync_pod(key[1], key[2])

    async def _sync_node(self, name: str) -> None:
        node = self.nodes.cache.get(("", name))
        if node is None:
            return
        now = times.now()
        stale = (now - self._last_heartbeat(node)).total_seconds() > self.grace
        taints = list((node.get("spec") or {}).get("taints") or [])
        tainted = any(t.get("key") == UNREACHABLE for t in taints)
        if stale and ready_status(node) != "Unknown":
            await self._mark_unreachable(node, taints)
        elif not stale and ready_status(node) == "True" and tainted:
            kept = [t for t in taints if t.get("key") != UNREACHABLE]
            await ignore_missing(self.client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}},
                                                   MERGE_PATCH))

    async def _mark_unreachable(self, node: dict[str, Any], taints: list[dict[str, Any]]) -> None:
        name = node["metadata"]["name"]
        stamp = times.format_time()
        conditions = [{**c, "status": "Unknown", "reason": "NodeStatusUnknown",
                       "message": "Kubelet stopped posting node status.", "lastTransitionTime": stamp}
                      for c in (node.get("status") or {}).get("conditions") or []]
        await ignore_missing(self.client.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}},
                                               STRATEGIC_MERGE_PATCH))
        kept = [t for t in taints if t.get("key") != UNREACHABLE]
        kept += [{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": stamp},
                 {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": stamp}]
        await ignore_missing(self.client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": kept}}, MERGE_PATCH))
        not_ready = {"status": {"conditions": [
            {"type": "Ready", "status": "False", "lastProbeTime": None, "lastTransitionTime": stamp}]}}
        for pod in self.pods.by_field(NODE_NAME, name):
            meta = pod["metadata"]
            try:
                await self.client.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                                        not_ready, STRATEGIC_MERGE_PATCH)
            except TRANSIENT:
                pass

    async def _sync_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.cache.get((namespace, name))
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        since = self._no_execute.get((pod.get("spec") or {}).get("nodeName") or "", {})
        taints = [{"key": key, "value": value, "effect": "NoExecute", "timeAdded": added}
                  for (key, value), added in since.items()]
        delay = eviction_delay(pod, taints, times.now(), self.toleration_cap)
        if delay is None:
            return
        if delay > 0:  # tolerated for a while: look again when that is over (no other event need come)
            self.queue.add_after(("pod", namespace, name), delay)
            return
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        stamp = times.format_time()
        conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                       "message": "Taint manager: deleting due to NoExecute taint", "lastProbeTime": None,
                       "lastTransitionTime": stamp}]
        await ignore_missing(self.client.patch(path + "/status", {"status": {"conditions": conditions}},
                                               STRATEGIC_MERGE_PATCH))
        await ignore_missing(self.client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                                       "preconditions": {"uid": pod["metadata"]["uid"]}}))
