"""What the workload controllers (ReplicaSet, Job) share about the pods they own: making a pod from a
template, reading readiness, and remembering their own writes until the watch shows them."""

from __future__ import annotations

import copy
import datetime as dt
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kubelocal import times

from .runtime import controller_of, owner_reference


def pod_from_template(template: Mapping[str, Any], owner: Mapping[str, Any], *,
                      labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod for `owner` from its pod template: generateName `<owner>-`, the template's labels and
    annotations (plus `labels`), and a controller ownerReference so deletion propagates."""
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": f"{owner['metadata']['name']}-",
            "labels": {**(meta.get("labels") or {}), **(labels or {})},
            **({"annotations": dict(meta["annotations"])} if meta.get("annotations") else {}),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def owned_pods(pods: Iterable[dict[str, Any]], owner_uid: str) -> list[dict[str, Any]]:
    return [p for p in pods if (controller_of(p) or {}).get("uid") == owner_uid]


def is_active(pod: Mapping[str, Any]) -> bool:
    """Counts toward the wanted replicas: neither finished nor being deleted."""
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


def ready_since(pod: Mapping[str, Any]) -> dt.datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            stamp = cond.get("lastTransitionTime")
            return times.parse_time(stamp) if stamp else times.now()
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    return is_active(pod) and ready_since(pod) is not None


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: dt.datetime) -> bool:
    """Ready for at least `minReadySeconds` (what Deployments and `kubectl rollout status` count)."""
    since = ready_since(pod)
    if not is_active(pod) or since is None:
        return False
    return min_ready_seconds <= 0 or (now - since).total_seconds() >= min_ready_seconds


class Expectations:
    """A controller's own creates and deletes that its watch has not shown yet, per owner
    (kube-controller-manager's "expectations"): without them a sync racing the watch creates twice.
    An expectation lapses after `ttl` seconds, as the real ones do, so a lost event cannot wedge an owner."""

    def __init__(self, ttl: float = 10.0) -> None:
        self.ttl = ttl
        self.creating: dict[Any, dict[str, float]] = {}
        self.deleting: dict[Any, dict[str, float]] = {}

    def created(self, owner: Any, name: str) -> None:
        self.creating.setdefault(owner, {})[name] = time.monotonic()

    def deleted(self, owner: Any, name: str) -> None:
        self.deleting.setdefault(owner, {})[name] = time.monotonic()

    def settle(self, owner: Any, pods: Iterable[Mapping[str, Any]]) -> tuple[int, set[str]]:
        """Forget what the cache now shows; (creates still unseen, names whose deletion is unseen)."""
        by_name = {p["metadata"]["name"]: p for p in pods}
        fresh = time.monotonic() - self.ttl
        creating = {n: t for n, t in self.creating.get(owner, {}).items() if n not in by_name and t > fresh}
        deleting = {n: t for n, t in self.deleting.get(owner, {}).items()
                    if n in by_name and not by_name[n]["metadata"].get("deletionTimestamp") and t > fresh}
        self.creating[owner], self.deleting[owner] = creating, deleting
        return len(creating), set(deleting)

    def forget(self, owner: Any) -> None:
        self.creating.pop(owner, None)
        self.deleting.pop(owner, None)
