"""The order in which the operator's queued work runs: what a submitted job waits for first, oldest job first.

In a burst (hundreds of jobs submitted at once) every API call and every piece of CPU work waits its turn for a
thread. In plain arrival order a job's pod creates queued behind every younger job's Service create, its
reconcile's second CPU step behind every younger job's first, and all of them behind the gang releases and
Events of the jobs before: each job's work was spread over the whole burst, so every job finished late. Here a
queue is ordered by (class, job order, arrival):

- class: creates (Service, gang objects, pods) before every other call, Events (a courtesy) last;
- job order: the order in which the controller first saw the job (a context variable its reconcile sets, which
  the tasks and threads it starts inherit); work of no job (the admission loop, watches) comes first;
- arrival: first come, first served among equals.

Nothing waits on a lower class for ever in practice: the burst that fills the queue with creates ends, and the
pool serves the rest at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import heapq
import itertools
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import Any, TypeVar

T = TypeVar("T")

#: The order in which the controller first saw the job whose work this is (smaller: older); None: no job's.
job_order: contextvars.ContextVar[int | None] = contextvars.ContextVar("job_order", default=None)


class RequestClass(IntEnum):
    """An API call's class: smaller runs first."""

    CREATE = 0
    OTHER = 1
    EVENT = 2


#: Collections whose POSTs are creates a job waits for (everything a reconcile creates but Events).
_EVENTS_SUFFIX = "/events"


def request_class(method: str, path: str) -> RequestClass:
    """The class of a call: POST to a collection is a create (an Event, a courtesy, runs last); any other call
    (status writes, gang releases, deletes, reads) is in between."""
    if method != "POST":
        return RequestClass.OTHER
    return RequestClass.EVENT if path.rstrip("/").endswith(_EVENTS_SUFFIX) else RequestClass.CREATE


def request_key(method: str, path: str) -> tuple[int, int]:
    """The queue key of an API call made now: creates by job order, every other class first come, first served
    (a release or a status write is as urgent for a young job as for an old one)."""
    klass = request_class(method, path)
    return order_key(klass) if klass == RequestClass.CREATE else (klass, 0)


def order_key(klass: int = 0) -> tuple[int, int]:
    """The key of work submitted now in the current context: (class, job order); no job's work sorts first."""
    order = job_order.get()
    return klass, -1 if order is None else order


#: A queued call: its key, its arrival, its future, the call.
_Entry = tuple[tuple[int, ...], int, concurrent.futures.Future[Any], Callable[[], Any]]


class PriorityThreadPool(concurrent.futures.Executor):
    """A thread pool whose queue is ordered by a key (smaller first; equal keys first come, first served) rather
    than by arrival alone. The key of a submission is `key()` read in the submitter's context (asyncio's
    run_in_executor and to_thread submit from the calling task, so its context variables count), or the one given
    to :meth:`submit_ordered`. Threads start on demand up to `size` and stay."""

    def __init__(self, size: int, name: str, key: Callable[[], tuple[int, ...]] = order_key) -> None:
        self._size = size
        self._name = name
        self._key = key
        self._queue: list[_Entry] = []
        self._arrivals = itertools.count()
        self._ready = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        return self.submit_ordered(self._key(), fn, *args, **kwargs)

    def submit_ordered(self, key: tuple[int, ...], fn: Callable[..., T], /, *args: Any,
                       **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._ready:
            if self._shutdown:
                raise RuntimeError(f"{self._name}: cannot schedule new work after shutdown")
            entry: _Entry = (key, next(self._arrivals), future, functools.partial(fn, *args, **kwargs))
            heapq.heappush(self._queue, entry)
            if self._idle:
                self._idle -= 1  # claimed: a second submission before it wakes must not count on it too
                self._ready.notify()
            elif len(self._threads) < self._size:
                thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        return future

    def pending(self) -> list[tuple[int, ...]]:
        """The keys of the work waiting for a thread, in the order it will run (for tests and diagnosis)."""
        with self._ready:
            return [key for key, *_ in sorted(self._queue, key=lambda item: item[:2])]

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._shutdown:
                    self._idle += 1  # the submission that wakes it takes it off again
                    self._ready.wait()
                if not self._queue:
                    return  # shut down and drained
                _, _, future, call = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as exc:  # handed to whoever awaits the future, as ThreadPoolExecutor does
                future.set_exception(exc)
            else:
                future.set_result(result)
            del future, call  # do not hold the last result while waiting for the next

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._shutdown = True
            if cancel_futures:
                for _, _, future, _ in self._queue:
                    future.cancel()
                self._queue.clear()
            self._ready.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()


async def run_in(pool: PriorityThreadPool, fn: Callable[..., T], /, *args: Any) -> T:
    """`fn(*args)` on one of the pool's threads, queued by the caller's key (asyncio.to_thread, in order).
    Cancelled while queued, it never runs."""
    return await asyncio.wrap_future(pool.submit(fn, *args))
