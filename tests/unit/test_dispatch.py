"""The order of the operator's queued work (`tfjob_operator.dispatch`): creates before other calls, Events last,
a job's work ahead of younger jobs', first come first served among equals."""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
from collections.abc import Iterator

import pytest

from tfjob_operator.dispatch import PriorityThreadPool, RequestClass, job_order, request_class, request_key


@pytest.mark.parametrize(("method", "path", "klass"), [
    ("POST", "/api/v1/namespaces/default/pods", RequestClass.CREATE),
    ("POST", "/api/v1/namespaces/default/services", RequestClass.CREATE),
    ("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups", RequestClass.CREATE),
    ("POST", "/api/v1/namespaces/default/events", RequestClass.EVENT),
    ("PATCH", "/api/v1/namespaces/default/pods/j-worker-0", RequestClass.OTHER),  # a gang release
    ("PATCH", "/apis/tfjob.dev/v1/namespaces/default/tfjobs/j/status", RequestClass.OTHER),
    ("DELETE", "/api/v1/namespaces/default/pods/j-worker-0", RequestClass.OTHER),
    ("GET", "/api/v1/pods", RequestClass.OTHER),
])
def test_each_call_has_its_class(method: str, path: str, klass: RequestClass) -> None:
    assert request_class(method, path) == klass


def in_job(order: int | None, fn: object, *args: object) -> object:
    """Call fn(*args) as the work of the job first seen `order`-th (None: of no job)."""
    context = contextvars.copy_context()
    context.run(job_order.set, order)
    return context.run(fn, *args)  # type: ignore[operator]


def test_creates_go_by_job_age_every_other_call_first_come_first_served() -> None:
    assert in_job(7, request_key, "POST", "/api/v1/namespaces/d/pods") < in_job(
        8, request_key, "POST", "/api/v1/namespaces/d/services")
    # A release of the youngest job is not held behind an older job's status write: same key, arrival decides.
    assert in_job(1, request_key, "PATCH", "/api/v1/namespaces/d/pods/p") == in_job(
        9, request_key, "PATCH", "/apis/tfjob.dev/v1/namespaces/d/tfjobs/j/status")
    assert in_job(None, request_key, "POST", "/api/v1/namespaces/d/pods") < in_job(
        0, request_key, "POST", "/api/v1/namespaces/d/pods")


@pytest.fixture
def pool() -> Iterator[PriorityThreadPool]:
    threads = PriorityThreadPool(1, "test")
    yield threads
    threads.shutdown()


def blocked(pool: PriorityThreadPool) -> threading.Event:
    """Occupy the pool's one thread until the returned event is set."""
    go, running = threading.Event(), threading.Event()
    pool.submit_ordered((-1,), lambda: (running.set(), go.wait()))
    assert running.wait(10)
    return go


def test_queued_work_runs_smallest_key_first_and_equal_keys_in_arrival_order(pool: PriorityThreadPool) -> None:
    go = blocked(pool)
    ran: list[str] = []
    futures = [pool.submit_ordered(key, ran.append, name) for key, name in [
        ((2, 0), "event"), ((1, 0), "release a"), ((0, 5), "younger job's pod"), ((1, 0), "release b"),
        ((0, 3), "older job's service"), ((0, 3), "older job's pod")]]
    assert pool.pending() == [(0, 3), (0, 3), (0, 5), (1, 0), (1, 0), (2, 0)]
    go.set()
    concurrent.futures.wait(futures, 10)
    assert ran == ["older job's service", "older job's pod", "younger job's pod", "release a", "release b", "event"]


def test_submit_takes_the_key_from_the_submitters_context(pool: PriorityThreadPool) -> None:
    go = blocked(pool)
    ran: list[int] = []
    futures = [in_job(order, pool.submit, ran.append, order) for order in (4, 2, 3)]
    go.set()
    concurrent.futures.wait(futures, 10)  # type: ignore[arg-type]
    assert ran == [2, 3, 4]


def test_work_cancelled_while_queued_never_runs_and_errors_reach_the_caller(pool: PriorityThreadPool) -> None:
    go = blocked(pool)
    ran: list[str] = []
    cancelled = pool.submit_ordered((0,), ran.append, "cancelled")
    failing = pool.submit_ordered((1,), lambda: 1 / 0)
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
        futures = [pool.submit_ordered((0,), lambda: (started.release(), go.wait())) for _ in range(5)]
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
