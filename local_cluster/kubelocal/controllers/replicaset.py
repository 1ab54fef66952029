"""The ReplicaSet controller: keeps `spec.replicas` pods from the template running and reports
replicas/ready/available in the status (what Deployments build their rollouts on)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from kubelocal import times
from kubelocal.kubeclient import ApiError, KubeClient

from .pods import Expectations, is_active, is_available, is_ready, owned_pods, pod_from_template
from .runtime import Controller, ignore_missing

RS_PATH = "/apis/apps/v1/replicasets"


def deletion_order(pod: Mapping[str, Any]) -> tuple[int, int, str]:
    """Which pods go first when scaling down: unscheduled, then not ready, then the newest."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return (0 if not spec.get("nodeName") else 1, 1 if ready else 0,
            _negated(pod["metadata"].get("creationTimestamp") or ""))


def _negated(stamp: str) -> str:
    # newest first within a rank: invert the characters of the (sortable) RFC 3339 time stamp
    return "".join(chr(0x10FFFF - ord(c)) for c in stamp)


class ReplicaSetController(Controller):
    name = "replicaset-controller"

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.sets = self.watch(RS_PATH, self._on_set)
        self.pods = self.watch("/api/v1/pods", self.enqueue_controller("ReplicaSet"))
        self.expectations = Expectations()

    def _on_set(self, kind: str, rs: dict[str, Any]) -> None:
        meta = rs["metadata"]
        if kind == "DELETED":
            self.expectations.forget((meta["namespace"], meta["name"]))
        self.queue.add((meta["namespace"], meta["name"]))

    async def started(self) -> None:
        self.enqueue_all(self.sets)

    async def sync(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        ns, name = key
        rs = self.sets.cache.get((ns, name))
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return
        pods = owned_pods(self.pods.cache.values(), rs["metadata"]["uid"])
        unseen, deleting = self.expectations.settle(key, pods)
        active = [p for p in pods if is_active(p) and p["metadata"]["name"] not in deleting]
        wanted = int((rs.get("spec") or {}).get("replicas", 1))
        diff = wanted - len(active) - unseen
        base = f"/api/v1/namespaces/{ns}/pods"
        if diff > 0:
            labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            for _ in range(diff):
                created = await self.client.post(base, pod_from_template(rs["spec"]["template"], rs, labels=labels))
                self.expectations.created(key, created["metadata"]["name"])
        elif diff < 0 and not unseen:
            for pod in sorted(active, key=deletion_order)[:-diff]:
                self.expectations.deleted(key, pod["metadata"]["name"])
                await ignore_missing(self.client.delete(f"{base}/{pod['metadata']['name']}"))
        await self._write_status(rs, [p for p in pods if is_active(p)])

    async def _write_status(self, rs: dict[str, Any], active: list[dict[str, Any]]) -> None:
        labels = (rs["spec"].get("selector") or {}).get("matchLabels") or {}
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        now = times.now()
        status = {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(1 for p in active
                                        if labels.items() <= (p["metadata"].get("labels") or {}).items()),
            "readyReplicas": sum(1 for p in active if is_ready(p)),
            "availableReplicas": sum(1 for p in active if is_available(p, min_ready, now)),
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        old = rs.get("status") or {}
        if all(old.get(k, 0) == v for k, v in status.items()):
            return
        meta = rs["metadata"]
        try:
            await self.client.patch(f"/apis/apps/v1/namespaces/{meta['namespace']}/replicasets/{meta['name']}/status",
                                    {"status": status})
        except ApiError as exc:
            if exc.status != 404:
                raise
        if min_ready and status["readyReplicas"] > status["availableReplicas"]:
            self.queue.add_after((meta["namespace"], meta["name"]), float(min_ready))
