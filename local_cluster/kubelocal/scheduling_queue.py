"""The scheduler's queue: pods that want a node, in an active heap or parked as unschedulable.

As kube-scheduler's PriorityQueue: only pods that want scheduling are queued (a bound, gated or finished
pod costs nothing per pass); a pass pops active pods highest priority then oldest first; a pod that did
not fit is parked and comes back only when an event could make it fit (`move_all_to_active`, called for
a node added or changed, or room freed on a node), when the pod itself changes, or after
`max_unschedulable_seconds` as a safety net (kube-scheduler's podMaxInUnschedulablePodsDuration, 5 min).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from typing import Any

Order = tuple[int, str, str, str]


def queue_order(pod: Mapping[str, Any]) -> Order:
    """Highest priority first, then oldest, then by namespace and name."""
    meta = pod.get("metadata") or {}
    priority = int((pod.get("spec") or {}).get("priority") or 0)
    return (-priority, meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or "")


class SchedulingQueue:
    """Active and unschedulable pods by uid; `moves` counts pods moved back per event (a metric)."""

    def __init__(self, max_unschedulable_seconds: float = 300.0) -> None:
        self.max_unschedulable_seconds = max_unschedulable_seconds
        self._heap: list[tuple[Order, int, str]] = []
        self._active: dict[str, tuple[int, Mapping[str, Any]]] = {}  # uid -> (heap entry id, latest pod)
        self._unschedulable: dict[str, tuple[float, Mapping[str, Any]]] = {}  # uid -> (parked at, latest pod)
        self._seq = 0
        self.moves: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._active) + len(self._unschedulable)

    @property
    def active(self) -> int:
        return len(self._active)

    @property
    def unschedulable(self) -> int:
        return len(self._unschedulable)

    def __contains__(self, uid: str) -> bool:
        return uid in self._active or uid in self._unschedulable

    def upsert(self, pod: Mapping[str, Any]) -> None:
        """A pod that wants scheduling was added or changed. A parked pod goes back to active only when its
        spec changed (not for a status write, such as our own Unschedulable condition)."""
        uid = pod["metadata"]["uid"]
        parked = self._unschedulable.get(uid)
        if parked is not None:
            if parked[1].get("spec") == pod.get("spec"):
                self._unschedulable[uid] = (parked[0], pod)
                return
            del self._unschedulable[uid]
            self.moves["PodUpdate"] += 1
        current = self._active.get(uid)
        if current is not None and queue_order(current[1]) == queue_order(pod):
            self._active[uid] = (current[0], pod)
            return
        self._push(pod)

    def discard(self, uid: str) -> None:
        """The pod no longer wants scheduling (bound, gated, finished, deleted)."""
        self._active.pop(uid, None)
        self._unschedulable.pop(uid, None)

    def pop(self) -> Mapping[str, Any] | None:
        """The next active pod, or None."""
        while self._heap:
            _, seq, uid = heapq.heappop(self._heap)
            current = self._active.get(uid)
            if current is not None and current[0] == seq:
                del self._active[uid]
                return current[1]
        return None

    def park(self, pod: Mapping[str, Any], now: float) -> None:
        """The pod did not fit: wait for an event that could change that."""
        self._unschedulable[pod["metadata"]["uid"]] = (now, pod)

    def move_all_to_active(self, event: str) -> int:
        """An event that could make parked pods fit: all of them go back to active."""
        moved = list(self._unschedulable.values())
        self._unschedulable.clear()
        for _, pod in moved:
            self._push(pod)
        self.moves[event] += len(moved)
        return len(moved)

    def flush_stale(self, now: float) -> int:
        """Pods parked longer than max_unschedulable_seconds go back to active."""
        stale = [uid for uid, (at, _) in self._unschedulable.items() if now - at >= self.max_unschedulable_seconds]
        for uid in stale:
            self._push(self._unschedulable.pop(uid)[1])
        self.moves["UnschedulableTimeout"] += len(stale)
        return len(stale)

    def _push(self, pod: Mapping[str, Any]) -> None:
        self._seq += 1
        uid = pod["metadata"]["uid"]
        self._active[uid] = (self._seq, pod)
        heapq.heappush(self._heap, (queue_order(pod), self._seq, uid))
        if len(self._heap) > 2 * len(self._active) + 64:  # drop entries of pods that left or were re-pushed
            self._heap = [e for e in self._heap if (c := self._active.get(e[2])) is not None and c[0] == e[1]]
            heapq.heapify(self._heap)
