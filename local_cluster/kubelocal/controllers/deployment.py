"""The Deployment controller: one ReplicaSet per pod template (named `<deployment>-<pod-template-hash>`),
rolled over per the strategy (rollout.py decides how far), old sets pruned to `revisionHistoryLimit`, and
the status fields `kubectl rollout status` and `helm --wait` read."""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import Any

from kubelocal import times
from kubelocal.kubeclient import KubeClient

from . import rollout
from .runtime import Controller, controller_of, create_or_exists, ignore_missing, owner_reference

DEPLOY_PATH = "/apis/apps/v1/deployments"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"


def revision(obj: dict[str, Any]) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION) or 0)
    except ValueError:
        return 0


class DeploymentController(Controller):
    name = "deployment-controller"

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.deployments = self.watch(DEPLOY_PATH, self._on_deployment)
        self.sets = self.watch("/apis/apps/v1/replicasets", self.enqueue_controller("Deployment"))

    def _on_deployment(self, _kind: str, d: dict[str, Any]) -> None:
        self.queue.add((d["metadata"]["namespace"], d["metadata"]["name"]))

    async def started(self) -> None:
        self.enqueue_all(self.deployments)

    async def sync(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        ns, name = key
        d = self.deployments.cache.get((ns, name))
        if d is None or d["metadata"].get("deletionTimestamp"):
            return
        spec = d.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        strategy = spec.get("strategy") or {}
        template = spec.get("template") or {}
        digest = rollout.template_hash(template, int((d.get("status") or {}).get("collisionCount") or 0))
        owned = sorted((rs for rs in self.sets.cache.values()
                        if (controller_of(rs) or {}).get("uid") == d["metadata"]["uid"]), key=revision)
        new = next((rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == digest), None)
        old = [rs for rs in owned if rs is not new]
        base = f"/apis/apps/v1/namespaces/{ns}/replicasets"
        if new is None and not spec.get("paused"):
            new = await self._create_set(d, digest, max((revision(rs) for rs in owned), default=0) + 1, base)
            if new is None:
                return
        if new is None:
            return
        if revision(new) <= max((revision(rs) for rs in old), default=0):
            # rolled back to an older template: it becomes the newest revision again
            await self._annotate(f"{base}/{new['metadata']['name']}", max(revision(rs) for rs in old) + 1, replicas)
        if not spec.get("paused"):
            state = rollout.SetState(new["metadata"]["name"], int(new["spec"].get("replicas") or 0),
                                     int((new.get("status") or {}).get("availableReplicas") or 0),
                                     int((new.get("status") or {}).get("replicas") or 0))
            olds = [rollout.SetState(rs["metadata"]["name"], int(rs["spec"].get("replicas") or 0),
                                     int((rs.get("status") or {}).get("availableReplicas") or 0),
                                     int((rs.get("status") or {}).get("replicas") or 0)) for rs in old]
            for set_name, count in rollout.plan(replicas, strategy, state, olds).items():
                await ignore_missing(self.client.patch(f"{base}/{set_name}", {
                    "metadata": {"annotations": {DESIRED: str(replicas)}}, "spec": {"replicas": count}}))
            await self._prune(d, old, base)
        if revision(d) != revision(new):
            await ignore_missing(self.client.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
                                                   {"metadata": {"annotations": {REVISION: str(revision(new))}}}))
        await self._write_status(d, new, old, replicas, strategy)

    async def _create_set(self, d: dict[str, Any], digest: str, rev: int, base: str) -> dict[str, Any] | None:
        spec = d["spec"]
        template = copy.deepcopy(spec.get("template") or {})
        labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: digest}
        template.setdefault("metadata", {})["labels"] = labels
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = digest
        replicas = int(spec.get("replicas", 1))
        first = (spec.get("strategy") or {}).get("type") == "Recreate" or not any(
            (controller_of(rs) or {}).get("uid") == d["metadata"]["uid"] for rs in self.sets.cache.values())
        body = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{d['metadata']['name']}-{digest}", "labels": labels,
                         "annotations": {REVISION: str(rev), DESIRED: str(replicas),
                                         MAX_REPLICAS: str(replicas + rollout.surge_and_unavailable(
                                             spec.get("strategy") or {}, replicas)[0])},
                         "ownerReferences": [owner_reference(d)]},
            "spec": {"replicas": replicas if first and (spec.get("strategy") or {}).get("type") != "Recreate" else 0,
                     "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                     "selector": selector, "template": template},
        }
        created = await create_or_exists(self.client.post(base, body))
        return created if isinstance(created, dict) else None

    async def _annotate(self, path: str, rev: int, replicas: int) -> None:
        await ignore_missing(self.client.patch(path, {"metadata": {"annotations": {
            REVISION: str(rev), DESIRED: str(replicas)}}}))

    async def _prune(self, d: dict[str, Any], old: list[dict[str, Any]], base: str) -> None:
        """Delete the oldest scaled-down sets beyond `revisionHistoryLimit` (10 unless set)."""
        limit = int((d.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [rs for rs in old if not rs["spec"].get("replicas") and not (rs.get("status") or {}).get("replicas")]
        for rs in idle[: max(len(idle) - limit, 0)]:
            await ignore_missing(self.client.delete(f"{base}/{rs['metadata']['name']}"))

    async def _write_status(self, d: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]],
                            replicas: int, strategy: dict[str, Any]) -> None:
        def total(field: str, sets: list[dict[str, Any]]) -> int:
            return sum(int((rs.get("status") or {}).get(field) or 0) for rs in sets)

        every = [new, *old]
        available = total("availableReplicas", every)
        status: dict[str, Any] = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": total("replicas", every),
            "updatedReplicas": total("replicas", [new]),
            "readyReplicas": total("readyReplicas", every),
            "availableReplicas": available,
            "unavailableReplicas": max(replicas - available, 0),
        }
        if (d.get("status") or {}).get("collisionCount"):
            status["collisionCount"] = d["status"]["collisionCount"]
        now = times.format_time()
        previous = {c.get("type"): c for c in (d.get("status") or {}).get("conditions") or []}
        conds = []
        for ctype, cstatus, reason, message in rollout.conditions(
                replicas, strategy, new["metadata"]["name"], updated=status["updatedReplicas"],
                total=status["replicas"], available=available):
            before = previous.get(ctype) or {}
            same = before.get("status") == cstatus and before.get("reason") == reason
            conds.append({"type": ctype, "status": cstatus, "reason": reason, "message": message,
                          "lastUpdateTime": before.get("lastUpdateTime", now) if same else now,
                          "lastTransitionTime": before.get("lastTransitionTime", now)
                          if before.get("status") == cstatus else now})
        status["conditions"] = conds
        old_status = d.get("status") or {}
        if all(old_status.get(k) == v for k, v in status.items() if k != "conditions") and [
                (c.get("type"), c.get("status"), c.get("reason")) for c in old_status.get("conditions") or []] == [
                (c["type"], c["status"], c["reason"]) for c in conds]:
            return
        meta = d["metadata"]
        await ignore_missing(self.client.patch(
            f"/apis/apps/v1/namespaces/{meta['namespace']}/deployments/{meta['name']}/status", {"status": status}))
