"""The scheduler's cache: nodes and what bound pods take from each, kept current by watch events.

As kube-scheduler's cache: pod add/update/delete events adjust one node's usage, so a scheduling pass
never recounts the cluster. A pod the scheduler has decided to bind is "assumed" on its node until the
binding shows up in a watch event (or fails), so the next decision already counts it.
Each update says whether it could make a waiting pod fit (room freed, a node added or changed): that is
what moves pods out of the unschedulable queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubelocal.resources import Resources, add, is_terminal, pod_requests

#: kube-scheduler scores a container that requests no cpu/memory as if it asked for these, so such pods spread.
DEFAULT_SCORING_REQUESTS: dict[str, Decimal] = {"cpu": Decimal("0.1"), "memory": Decimal(200 * 2**20)}


def subtract(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    left = dict(a)
    for name, value in b.items():
        left[name] = left.get(name, Decimal(0)) - value
    return left


def scoring_requests(pod: Mapping[str, Any]) -> Resources:
    """Requests for scoring only: each app container's missing cpu/memory request counts as the default."""
    total: Resources = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = pod_requests({"spec": {"containers": [container]}})
        for name, default in DEFAULT_SCORING_REQUESTS.items():
            if not requests.get(name):
                requests[name] = default
        total = add(total, requests)
    return total


@dataclass
class NodeUsage:
    """What bound, non-terminal pods take from a node (`scoring`: with kube-scheduler's non-zero defaults)."""

    requests: Resources = field(default_factory=dict)
    scoring: Resources = field(default_factory=dict)
    pods: int = 0

    def place(self, pod: Mapping[str, Any]) -> None:
        self.requests = add(self.requests, pod_requests(pod))
        self.scoring = add(self.scoring, scoring_requests(pod))
        self.pods += 1


@dataclass(frozen=True)
class _Counted:
    """One pod's share of its node, remembered so that removing it subtracts exactly what was added."""

    node: str
    requests: Resources
    scoring: Resources


def counts_on_node(pod: Mapping[str, Any]) -> str | None:
    """The node whose resources the pod takes: bound and not finished (a terminating pod still counts)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return node if node and not is_terminal(pod) else None


def node_signature(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the filters read from a node: a change elsewhere (a heartbeat, an annotation) can make nothing fit."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return (repr(meta.get("labels")), repr(node.get("spec")), repr(status.get("allocatable") or status.get("capacity")),
            tuple(ready))


class SchedulerCache:
    """Nodes by name, per-node usage of bound pods, and the pods assumed by in-flight bindings."""

    def __init__(self) -> None:
        self.nodes: dict[str, Mapping[str, Any]] = {}
        self.usage: dict[str, NodeUsage] = {}
        self._signatures: dict[str, tuple[Any, ...]] = {}
        self._sorted: list[Mapping[str, Any]] | None = None
        self._pods: dict[str, _Counted] = {}
        self._assumed: set[str] = set()

    # -- nodes ------------------------------------------------------------------------------------------------

    def sorted_nodes(self) -> list[Mapping[str, Any]]:
        """Nodes by name, so that ties between equally free nodes are broken the same way every time."""
        if self._sorted is None:
            self._sorted = [self.nodes[name] for name in sorted(self.nodes)]
        return self._sorted

    def set_node(self, node: Mapping[str, Any]) -> bool:
        """Add or update a node; True when it is new or changed in a way a filter could see."""
        name = node["metadata"]["name"]
        signature = node_signature(node)
        changed = self._signatures.get(name) != signature
        self.nodes[name] = node
        self._signatures[name] = signature
        self._sorted = None
        return changed

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self._signatures.pop(name, None)
        self._sorted = None

    # -- pods -------------------------------------------------------------------------------------------------

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def assume(self, pod: Mapping[str, Any], node: str) -> None:
        """Count a pod on the node we are binding it to, before the binding is seen."""
        uid = pod["metadata"]["uid"]
        self._uncount(uid)
        self._count(uid, node, pod)
        self._assumed.add(uid)

    def forget(self, uid: str) -> bool:
        """A binding failed: the assumed pod no longer takes room. True when room was freed."""
        if uid not in self._assumed:
            return False
        self._assumed.discard(uid)
        return self._uncount(uid)

    def set_pod(self, pod: Mapping[str, Any]) -> bool:
        """Count or uncount a pod as its latest version says; True when room was freed on a node."""
        uid = pod["metadata"]["uid"]
        node = counts_on_node(pod)
        previous = self._pods.get(uid)
        if node is None:
            if uid in self._assumed and not (pod.get("spec") or {}).get("nodeName") and not is_terminal(pod):
                return False  # our binding is still in flight: keep counting it
            self._assumed.discard(uid)
            return self._uncount(uid)
        if previous is not None and previous.node == node and uid not in self._assumed:
            return False  # already counted there; a pod's requests do not change once bound
        self._assumed.discard(uid)
        freed = self._uncount(uid) and previous is not None and previous.node != node
        self._count(uid, node, pod)
        return freed

    def remove_pod(self, uid: str) -> bool:
        """The pod is gone; True when it took room on a node."""
        self._assumed.discard(uid)
        return self._uncount(uid)

    def _count(self, uid: str, node: str, pod: Mapping[str, Any]) -> None:
        counted = _Counted(node, pod_requests(pod), scoring_requests(pod))
        self._pods[uid] = counted
        usage = self.usage.setdefault(node, NodeUsage())
        usage.requests = add(usage.requests, counted.requests)
        usage.scoring = add(usage.scoring, counted.scoring)
        usage.pods += 1

    def _uncount(self, uid: str) -> bool:
        counted = self._pods.pop(uid, None)
        if counted is None:
            return False
        usage = self.usage[counted.node]
        usage.requests = subtract(usage.requests, counted.requests)
        usage.scoring = subtract(usage.scoring, counted.scoring)
        usage.pods -= 1
        return True
