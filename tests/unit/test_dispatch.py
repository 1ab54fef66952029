"""The order of the operator's queued work in a burst (`tfjob_operator.dispatch`): earliest deadline first, where
a reconcile's CPU steps and creates keep the reconcile's start, and other calls and Events may be
overtaken only by work queued within their slack."""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
from collections.abc import Iterator

import pytest

from tfjob_operator.dispatch import (
    EVENT_SLACK_SECONDS,
    OTHER_SLACK_SECONDS,
    PriorityThreadPool,
    RequestClass,
    deadline,
    reconcile_started,
    request_class,
)


@pytest.mark.parametrize(("method", "path", "klass"), [
    ("POST", "/api/v1/namespaces/default/pods", RequestClass.START),
    ("POST", "/api/v1/namespaces/default/services", RequestClass.START),
    ("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups", RequestClass.START),
    ("POST", "/api/v1/namespaces/default/events", RequestClass.EVENT),
    ("PATCH", "/api/v1/namespaces/default/pods/j-worker-0", RequestClass.OTHER),  # a gang release
    ("PATCH", "/api/v1/namespaces/default/pods/j-worker-0/status", RequestClass.OTHER),
    ("PATCH", "/apis/tfjob.dev/v1/namespaces/default/tfjobs/j/status", RequestClass.OTHER),
    ("PATCH", "/apis/tfjob.dev/v1/namespaces/default/tfjobs/j", RequestClass.OTHER),
    ("DELETE", "/api/v1/namespaces/default/pods/j-worker-0", RequestClass.OTHER),
    ("GET", "/api/v1/pods", RequestClass.OTHER),
])
def test_each_call_has_its_class(method: str, path: str, klass: RequestClass) -> None:
    assert request_class(method, path) == klass


@pytest.mark.parametrize(("klass", "queued", "started", "key"), [
    (RequestClass.START, 10.0, 8.0, 8.0),  # a reconcile's creates keep its start: ahead of what came since
    (RequestClass.START, 10.0, None, 10.0),  # a create of no reconcile: when queued
    (RequestClass.OTHER, 10.0, 8.0, 10.0 + OTHER_SLACK_SECONDS),  # a status write: overtaken within its slack
    (RequestClass.EVENT, 10.0, 8.0, 10.0 + EVENT_SLACK_SECONDS),
])
def test_the_deadline_of_queued_work(klass: RequestClass, queued: float, started: float | None, key: float) -> None:
    assert deadline(klass, queued, started) == key


def test_a_status_write_is_overtaken_only_by_work_queued_within_its_slack() -> None:
    write = deadline(RequestClass.OTHER, 10.0, None)
    assert deadline(RequestClass.START, 10.0 + OTHER_SLACK_SECONDS / 2, None) < write
    assert deadline(RequestClass.START, 10.0 + OTHER_SLACK_SECONDS * 2, None) > write


def in_reconcile(started: float | None, fn: object, *args: object) -> object:
    """Call fn(*args) as the work of the reconcile started at `started` (None: of no reconcile)."""
    context = contextvars.copy_context()
    context.run(reconcile_started.set, started)
    return context.run(fn, *args)  # type: ignore[operator]


@pytest.fixture
def pool() -> Iterator[PriorityThreadPool]:
    threads = PriorityThreadPool(1, "test")
    yield threads
    threads.shutdown()


def blocked(pool: PriorityThreadPool) -> threading.Event:
    """Occupy the pool's one thread until the returned event is set."""
    go, running = threading.Event(), threading.Event()
    pool.submit_ordered((-1.0,), lambda: (running.set(), go.wait()))
    assert running.wait(10)
    return go


def test_queued_work_runs_smallest_key_first_and_equal_keys_in_arrival_order(pool: PriorityThreadPool) -> None:
    go = blocked(pool)
    ran: list[str] = []
    futures = [pool.submit_ordered(key, ran.append, name) for key, name in [
        ((9.0,), "event"), ((5.0,), "release a"), ((2.0,), "later reconcile's pod"), ((5.0,), "release b"),
        ((1.0,), "earlier reconcile's service"), ((1.0,), "earlier reconcile's pod")]]
    assert pool.pending() == [(1.0,), (1.0,), (2.0,), (5.0,), (5.0,), (9.0,)]
    go.set()
    concurrent.futures.wait(futures, 10)
    assert ran == ["earlier reconcile's service", "earlier reconcile's pod", "later reconcile's pod", "release a",
                   "release b", "event"]


def test_submit_takes_the_key_from_the_submitters_context(pool: PriorityThreadPool) -> None:
    go = blocked(pool)
    ran: list[float] = []
    futures = [in_reconcile(started, pool.submit, ran.append, started) for started in (4.0, 2.0, 3.0)]
    go.set()
    concurrent.futures.wait(futures, 10)  # type: ignore[arg-type]
    assert ran == [2.0, 3.0, 4.0]


def test_work_cancelled_while_queued_never_runs_and_errors_reach_the_caller(pool: PriorityThreadPool) -> None:
    go = blocked(pool)
    ran: list[str] = []
    cancelled = pool.submit_ordered((0.0,), ran.append, "cancelled")
    failing = pool.submit_ordered((1.0,), lambda: 1 / 0)
    assert cancelled.cancel()
    go.set()
    with pytest.raises(ZeroDivisionError):
        failing.result(10)
    assert ran == []


def test_threads_start_on_demand_up_to_the_size() -> None:
    pool = PriorityThreadPool(3, "test")
    try:
        go = threading.Event()
        started = threading.Semaphore(0)
        futures = [pool.submit_ordered((0.0,), lambda: (started.release(), go.wait())) for _ in range(5)]
        for _ in range(3):
            assert started.acquire(timeout=10)  # three run at once ...
        assert len(pool.pending()) == 2  # ... the other two wait for a thread
        go.set()
        concurrent.futures.wait(futures, 10)
        assert all(f.done() for f in futures)
    finally:
        pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print)
