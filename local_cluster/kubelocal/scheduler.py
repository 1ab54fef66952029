"""Scheduler stand-in: binds ungated pods to a node that fits, as kube-scheduler's default filters would.

Filters, in kube-scheduler's order: NodeUnschedulable, TaintToleration (a NotReady node counts as
tainted not-ready/unreachable), NodeAffinity (nodeSelector + required affinity), NodeResourcesFit
(pod count, then each requested resource). Among fitting nodes it picks the least allocated (mean free
fraction of cpu, memory and, on GPU nodes, nvidia.com/gpu after placement, counting a missing cpu/memory
request as 100m/200Mi as kube-scheduler does), ties broken by node name, so a placement is deterministic.
Pods with scheduling gates, a nodeName, or another schedulerName are never touched. Unschedulable pods
get `PodScheduled=False, reason Unschedulable` with kube-scheduler's message and wait in the unschedulable
queue until an event could make them fit (see scheduling_queue and scheduler_cache: only queued pods
are looked at, and per-node usage is kept current by watch events, so a pass costs O(queued pods)).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubelocal.kubeclient import (
    STRATEGIC_MERGE_PATCH,
    ApiError,
    EventRecorder,
    Informer,
    KubeClient,
    now_rfc3339,
    wait_event,
)
from kubelocal.resources import (
    GPU,
    Resources,
    is_terminal,
    matches_node_selector,
    node_allocatable,
    pod_requests,
    untolerated_taint,
)
from kubelocal.scheduler_cache import NodeUsage, SchedulerCache, scoring_requests
from kubelocal.scheduling_queue import SchedulingQueue, queue_order

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
USER_AGENT = "tfjob-local-scheduler"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
#: kube-scheduler's message when the cluster has no node at all.
NO_NODES_MESSAGE = "no nodes available to schedule pods"


@dataclass(frozen=True)
class Bind:
    node: str


@dataclass(frozen=True)
class Unschedulable:
    message: str


Decision = Bind | Unschedulable


def wants_scheduling(pod: Mapping[str, Any], scheduler_name: str = SCHEDULER_NAME) -> bool:
    """A pod this scheduler should place: unbound, ungated, alive, and addressed to it."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulingGates"):
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp") or is_terminal(pod):
        return False
    return (spec.get("schedulerName") or SCHEDULER_NAME) == scheduler_name


def usage_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, NodeUsage]:
    """Requests and pod count of bound, non-terminal pods, per node name."""
    usage: dict[str, NodeUsage] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or is_terminal(pod):
            continue
        usage.setdefault(node, NodeUsage()).place(pod)
    return usage


def _readiness_taint(node: Mapping[str, Any]) -> dict[str, str] | None:
    """The taint the node lifecycle controller puts on a node that is not Ready."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            key = TAINT_UNREACHABLE if cond.get("status") == "Unknown" else TAINT_NOT_READY
            return {"key": key, "effect": "NoSchedule"}
    return None


def filter_reasons(pod: Mapping[str, Any], requests: Resources, node: Mapping[str, Any],
                   usage: NodeUsage) -> list[str]:
    """Why the node cannot take the pod, in kube-scheduler's words; empty when it fits."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and untolerated_taint(
        pod, [{"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}]
    ):
        return ["node(s) were unschedulable"]
    taints = list(spec.get("taints") or [])
    readiness = _readiness_taint(node)
    if readiness and not any(t.get("key") == readiness["key"] for t in taints):
        taints.append(readiness)
    taint = untolerated_taint(pod, taints)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"]
    if not matches_node_selector(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    allocatable = node_allocatable(node)
    reasons = []
    max_pods = allocatable.get("pods")
    if max_pods is not None and usage.pods + 1 > max_pods:
        reasons.append("Too many pods")
    for name in sorted(requests):
        wanted = requests[name]
        if wanted > 0 and wanted > allocatable.get(name, Decimal(0)) - usage.requests.get(name, Decimal(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def free_fraction(requests: Resources, node: Mapping[str, Any], usage: NodeUsage) -> float:
    """Mean fraction of cpu, memory (and GPU on GPU nodes) left free after placing the pod.

    `requests` and `usage.scoring` use the non-zero scoring defaults, as kube-scheduler's LeastAllocated.
    """
    allocatable = node_allocatable(node)
    fractions = []
    for name in ("cpu", "memory", GPU):
        total = allocatable.get(name, Decimal(0))
        if total <= 0:
            continue
        left = total - usage.scoring.get(name, Decimal(0)) - requests.get(name, Decimal(0))
        fractions.append(float(left / total))
    return sum(fractions) / len(fractions) if fractions else 0.0


def unschedulable_message(node_count: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's FitError text: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."."""
    if node_count == 0:
        return NO_NODES_MESSAGE
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{node_count} nodes are available: {', '.join(histogram)}."


def schedule_pod(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
                 usage: Mapping[str, NodeUsage]) -> Decision:
    """Where one pod goes given current usage: the least-allocated fitting node, or why none fits."""
    requests = pod_requests(pod)
    for_scoring = scoring_requests(pod)
    reasons: dict[str, int] = {}
    best: tuple[float, str] | None = None
    for node in nodes:
        name = node["metadata"]["name"]
        node_usage = usage.get(name) or NodeUsage()
        failed = filter_reasons(pod, requests, node, node_usage)
        if failed:
            for reason in failed:
                reasons[reason] = reasons.get(reason, 0) + 1
            continue
        candidate = (-free_fraction(for_scoring, node, node_usage), name)
        if best is None or candidate < best:
            best = candidate
    if best is None:
        return Unschedulable(unschedulable_message(len(nodes), reasons))
    return Bind(best[1])


def schedule_pending(pods: Iterable[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                     scheduler_name: str = SCHEDULER_NAME) -> list[tuple[Mapping[str, Any], Decision]]:
    """Decisions for every pod waiting for this scheduler, highest priority then oldest first.

    Each binding counts against its node before the next pod is placed, as the scheduler's cache does.
    """
    pods = list(pods)
    usage = usage_by_node(pods)
    ordered_nodes = sorted(nodes, key=lambda n: n["metadata"]["name"])
    decisions: list[tuple[Mapping[str, Any], Decision]] = []
    for pod in sorted((p for p in pods if wants_scheduling(p, scheduler_name)), key=queue_order):
        decision = schedule_pod(pod, ordered_nodes, usage)
        if isinstance(decision, Bind):
            usage.setdefault(decision.node, NodeUsage()).place(pod)
        decisions.append((pod, decision))
    return decisions


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return dict(cond)
    return None


class Scheduler:
    """The shell: watches pods and nodes over HTTP, binds via `pods/binding`, reports via `pods/status`.

    Watch events feed the cache and the queue (constant work each); a pass pops queued pods in slices of
    `slice_size`, yielding between slices. As kube-scheduler's binding cycle, a bind runs in the background
    (at most `concurrency` API calls at once) while the next pods are decided against the assumed placement;
    its Event is recorded in the background (an EventRecorder), so the next bind never waits for one.
    """

    def __init__(self, url: str, *, name: str = SCHEDULER_NAME, resync_seconds: float = 10.0,
                 concurrency: int = 16, max_unschedulable_seconds: float = 300.0, slice_size: int = 64) -> None:
        self.url = url
        self.name = name
        self.resync_seconds = resync_seconds
        self.slice_size = slice_size
        self.client = KubeClient(url, USER_AGENT)
        self._wake = asyncio.Event()
        self._pods = Informer(self.client, "/api/v1/pods", self._on_pod)
        self._nodes = Informer(self.client, "/api/v1/nodes", self._on_node)
        self.cache = SchedulerCache()
        self.queue = SchedulingQueue(max_unschedulable_seconds)
        self._limit = asyncio.Semaphore(concurrency)
        self._tasks: list[asyncio.Task[None]] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self.events = EventRecorder(self.client, name)
        self.binds = 0  # for benchmarks and tests
        #: Scheduling attempts by result ("scheduled", "unschedulable"), as kube-scheduler's
        #: scheduler_schedule_attempts_total; the queue's `moves` say which events retried parked pods.
        self.attempts: Counter[str] = Counter()

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._nodes.run(), name="scheduler-nodes"),
                       asyncio.create_task(self._pods.run(), name="scheduler-pods")]
        await asyncio.gather(self._pods.synced.wait(), self._nodes.synced.wait())
        self._tasks.append(asyncio.create_task(self._loop(), name="scheduler-loop"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for task in list(self._in_flight):
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        await self.events.close()
        await self.client.close()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"].get("uid", "")
        if kind == "DELETED":
            self.queue.discard(uid)
            if self.cache.remove_pod(uid):
                self.queue.move_all_to_active("AssignedPodDelete")
        else:
            if self.cache.set_pod(pod):  # a pod on a node finished: its room is free
                self.queue.move_all_to_active("AssignedPodUpdate")
            if wants_scheduling(pod, self.name) and not self.cache.is_assumed(uid):
                self.queue.upsert(pod)
            else:
                self.queue.discard(uid)
        if self.queue.active:
            self._wake.set()

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.cache.remove_node(node["metadata"]["name"])
        elif self.cache.set_node(node):
            self.queue.move_all_to_active("NodeAdd" if kind == "ADDED" else "NodeUpdate")
        if self.queue.active:
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await wait_event(self._wake, self.resync_seconds)
            self._wake.clear()
            self.queue.flush_stale(time.monotonic())
            try:
                await self.schedule_once()
            except Exception:  # one bad pass must not stop scheduling for the cluster's lifetime
                log.exception("scheduling pass failed")

    async def schedule_once(self) -> None:
        """Decide for every active pod, highest priority then oldest first, a slice at a time; the API calls
        the decisions need run in the background."""
        while self.queue.active:
            for _ in range(self.slice_size):
                pod = self.queue.pop()
                if pod is None:
                    break
                for job in self._decide(pod):
                    task = asyncio.ensure_future(job)
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
            # The slice boundary: the kubelet and the controllers on this loop (and watch delivery) run meanwhile.
            await asyncio.sleep(0)

    def _decide(self, pod: Mapping[str, Any]) -> list[Awaitable[None]]:
        decision = schedule_pod(pod, self.cache.sorted_nodes(), self.cache.usage)
        if isinstance(decision, Bind):
            self.attempts["scheduled"] += 1
            self.cache.assume(pod, decision.node)
            return [self._bind(pod, decision.node)]
        self.attempts["unschedulable"] += 1
        self.queue.park(pod, time.monotonic())
        cond = scheduled_condition(pod) or {}
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == ("False", "Unschedulable",
                                                                            decision.message):
            return []
        return [self._mark_unschedulable(pod, decision.message)]

    async def _bind(self, pod: Mapping[str, Any], node: str) -> None:
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        binding = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self._limit:
            try:
                await self.client.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
            except (TimeoutError, ApiError, OSError) as exc:
                # Gone, already bound or a transient error: forget the assumption and look again.
                log.debug("binding %s/%s to %s failed: %s", ns, name, node, exc)
                if self.cache.forget(uid):
                    self.queue.move_all_to_active("AssumedPodForget")
                latest = self._pods.cache.get((ns, name))
                if latest is not None and latest["metadata"].get("uid") == uid and wants_scheduling(latest, self.name):
                    self.queue.upsert(latest)
                    self._wake.set()
                return
            self.binds += 1  # the binding itself sets PodScheduled=True, as kube-apiserver does
        self.events.record(pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}")

    async def _mark_unschedulable(self, pod: Mapping[str, Any], message: str) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        status = {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
             "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}]}}
        async with self._limit:
            try:
                await self.client.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", status,
                                        STRATEGIC_MERGE_PATCH)
            except (TimeoutError, ApiError, OSError) as exc:
                log.debug("marking %s/%s unschedulable failed: %s", ns, name, exc)
                return
        self.events.record(pod, "Warning", "FailedScheduling", message)
