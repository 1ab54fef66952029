"""The scheduler's queue and cache as plain data: which events retry a parked pod, and what a node has left."""

from decimal import Decimal
from typing import Any

import pytest

from kubelocal.nodes import make_node
from kubelocal.scheduler_cache import SchedulerCache
from kubelocal.scheduling_queue import SchedulingQueue


def pod(name: str, *, gpu: int = 1, node: str | None = None, phase: str = "Pending", priority: int = 0,
        created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {"priority": priority,
                 "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpu)}}}]},
        "status": {"phase": phase},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def drain(queue: SchedulingQueue) -> list[str]:
    names = []
    while (p := queue.pop()) is not None:
        names.append(p["metadata"]["name"])
    return names


def test_active_pods_pop_highest_priority_then_oldest() -> None:
    queue = SchedulingQueue()
    queue.upsert(pod("late", created="2026-01-03T00:00:00Z"))
    queue.upsert(pod("early", created="2026-01-01T00:00:00Z"))
    queue.upsert(pod("urgent", created="2026-01-05T00:00:00Z", priority=10))
    assert drain(queue) == ["urgent", "early", "late"]


def test_a_pod_queued_twice_pops_once_and_a_discarded_pod_never() -> None:
    queue = SchedulingQueue()
    queue.upsert(pod("a"))
    queue.upsert(pod("a", priority=5))  # its priority changed while queued
    queue.upsert(pod("b"))
    queue.discard("uid-b")
    assert drain(queue) == ["a"]


@pytest.mark.parametrize(
    ("change", "retried"),
    [
        ({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}}, False),
        ({"metadata": {"name": "p", "namespace": "default", "uid": "uid-p", "labels": {"a": "b"}}}, False),
        ({"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}, True),
    ],
    ids=["status-only", "labels-only", "spec-changed"],
)
def test_a_parked_pod_returns_to_active_only_when_its_spec_changes(change: dict[str, Any], retried: bool) -> None:
    queue = SchedulingQueue()
    queue.upsert(pod("p"))
    parked = queue.pop()
    assert parked is not None
    queue.park(parked, now=0.0)
    queue.upsert({**parked, **change})
    assert (queue.active, queue.unschedulable) == ((1, 0) if retried else (0, 1))
    assert queue.moves["PodUpdate"] == int(retried)


def test_an_event_that_could_make_pods_fit_moves_every_parked_pod_and_is_counted() -> None:
    queue = SchedulingQueue()
    for name in ("a", "b"):
        queue.upsert(pod(name))
        parked = queue.pop()
        assert parked is not None
        queue.park(parked, now=0.0)
    assert queue.move_all_to_active("NodeAdd") == 2
    assert queue.moves["NodeAdd"] == 2 and sorted(drain(queue)) == ["a", "b"]


def test_pods_parked_longer_than_the_limit_are_retried_anyway() -> None:
    queue = SchedulingQueue(max_unschedulable_seconds=300)
    queue.upsert(pod("old", created="2026-01-01T00:00:00Z"))
    queue.upsert(pod("new", created="2026-01-02T00:00:00Z"))
    old, new = queue.pop(), queue.pop()
    assert old is not None and new is not None
    queue.park(old, now=0.0)
    queue.park(new, now=200.0)
    assert queue.flush_stale(now=301.0) == 1
    assert drain(queue) == ["old"] and queue.unschedulable == 1


def test_the_cache_counts_bound_pods_until_they_finish_or_go() -> None:
    cache = SchedulerCache()
    assert cache.set_pod(pod("a", gpu=2, node="n")) is False  # counting more frees nothing
    assert cache.set_pod(pod("b", gpu=1, node="n")) is False
    assert (cache.usage["n"].pods, cache.usage["n"].requests["nvidia.com/gpu"]) == (2, Decimal(3))
    assert cache.set_pod(pod("a", gpu=2, node="n", phase="Running")) is False  # a status write
    assert cache.set_pod(pod("a", gpu=2, node="n", phase="Succeeded")) is True  # finished: room freed
    assert cache.remove_pod("uid-b") is True
    assert cache.remove_pod("uid-unbound") is False
    assert (cache.usage["n"].pods, cache.usage["n"].requests["nvidia.com/gpu"]) == (0, Decimal(0))


def test_an_assumed_pod_counts_until_its_binding_is_seen_or_forgotten() -> None:
    cache = SchedulerCache()
    waiting = pod("p", gpu=2)
    cache.assume(waiting, "n")
    assert cache.set_pod(waiting) is False and cache.usage["n"].pods == 1  # an event from before the binding
    assert cache.set_pod(pod("p", gpu=2, node="n")) is False and not cache.is_assumed("uid-p")
    assert cache.usage["n"].pods == 1  # confirmed, not counted twice
    cache.assume(pod("q", gpu=1), "n")
    assert cache.forget("uid-q") is True and cache.usage["n"].pods == 1


@pytest.mark.parametrize(
    ("update", "could_fit"),
    [
        ({}, False),
        ({"metadata": {"name": "n", "annotations": {"heartbeat": "2"}}}, False),
        ({"metadata": {"name": "n", "labels": {"zone": "b"}}}, True),
        ({"spec": {"unschedulable": True}}, True),
    ],
    ids=["same", "annotation", "label", "cordon"],
)
def test_a_node_update_counts_only_when_a_filter_could_see_it(update: dict[str, Any], could_fit: bool) -> None:
    cache = SchedulerCache()
    node = make_node("n", gpu=2)
    assert cache.set_node(node) is True  # a new node
    changed = {**node, **update, "metadata": {**node["metadata"], **update.get("metadata", {})}}
    assert cache.set_node(changed) is could_fit
    assert [n["metadata"]["name"] for n in cache.sorted_nodes()] == ["n"]
