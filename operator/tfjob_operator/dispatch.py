"""The order in which the operator's queued work runs in a burst: a reconcile's steps ahead of later
reconciles', what a job waits for to start ahead of what can wait a moment, and nothing overtaken for long.

In a burst (hundreds of jobs submitted at once) every API call and every piece of CPU work waits its turn for a
thread. In plain arrival order a job's pod creates queued behind every Service create sent after its own, its
reconcile's second CPU step behind every later reconcile's first, and all of them behind the status writes and
Events of the jobs before: each job's work was spread over the whole burst, so every job finished late. Here
each queued piece of work carries a deadline, and the queue runs the earliest deadline first (arrival among
equals):

- CPU work (parse, render, decide) and the creates a job waits for (every POST but an Event's): the time the
  reconcile they belong to started (a context variable its task sets; the tasks and threads it starts inherit
  it), else the time they were queued;
- every other call (gang releases, status writes, deletes, reads): queued time + OTHER_SLACK_SECONDS;
- Events, a courtesy: queued time + EVENT_SLACK_SECONDS.

A deadline rather than a strict class order, so nothing starves: a release or a status write is overtaken only by
work that is at most its slack younger (releases held back behind a whole burst of creates kept the admission
loop's pass waiting on them, and their jobs reported Queued meanwhile: an Event and a status write more per job,
and Succeeded later).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import heapq
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from enum import IntEnum
from typing import Any, TypeVar

T = TypeVar("T")

#: When the reconcile whose work this is started (time.monotonic()); None: no reconcile's.
reconcile_started: contextvars.ContextVar[float | None] = contextvars.ContextVar("reconcile_started", default=None)

#: Seconds a gang release, status write, delete or read may be overtaken by work queued after it.
OTHER_SLACK_SECONDS = 0.5
#: Seconds an Event may be overtaken by work queued after it (with 5 s, a burst's Events piled up at its end,
#: among the Succeeded status writes).
EVENT_SLACK_SECONDS = 1.0


class RequestClass(IntEnum):
    """What an API call is for, which sets its slack."""

    START = 0
    OTHER = 1
    EVENT = 2


SLACK_SECONDS = {RequestClass.START: 0.0, RequestClass.OTHER: OTHER_SLACK_SECONDS,
                 RequestClass.EVENT: EVENT_SLACK_SECONDS}

def request_class(method: str, path: str) -> RequestClass:
    """A POST is a create a job waits for to start, but an Event's; any other call (gang releases, status writes,
    deletes, reads) is OTHER."""
    if method != "POST":
        return RequestClass.OTHER
    return RequestClass.EVENT if path.split("?")[0].rstrip("/").endswith("/events") else RequestClass.START


def deadline(klass: RequestClass, queued: float, started: float | None) -> float:
    """The queue key of work of this class queued at `queued` by the reconcile started at `started` (None: no
    reconcile's): START work keeps its reconcile's start, the rest its queued time plus the class's slack."""
    if klass == RequestClass.START and started is not None:
        return started
    return queued + SLACK_SECONDS[klass]


def key_now(klass: RequestClass = RequestClass.START) -> tuple[float]:
    """The queue key of work of this class queued now, in the current context (CPU work: START, a reconcile's
    steps keep its start)."""
    return (deadline(klass, time.monotonic(), reconcile_started.get()),)


def request_key(method: str, path: str) -> tuple[float]:
    """The queue key of an API call queued now, in the current context."""
    return key_now(request_class(method, path))


#: A queued call: its key, its arrival, its future, the call.
_Entry = tuple[tuple[float, ...], int, concurrent.futures.Future[Any], Callable[[], Any]]


class PriorityThreadPool(concurrent.futures.Executor):
    """A thread pool whose queue is ordered by a key (smaller first; equal keys first come, first served), where
    concurrent.futures' pools serve by arrival alone. The key of a submission is `key()` read in the submitter's
    context (a task's context variables count), or the one given to :meth:`submit_ordered`. Threads start on
    demand up to `size` and stay."""

    def __init__(self, size: int, name: str, key: Callable[[], tuple[float, ...]] = key_now) -> None:
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

    def submit_ordered(self, key: tuple[float, ...], fn: Callable[..., T], /, *args: Any,
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

    def pending(self) -> list[tuple[float, ...]]:
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


async def paced(items: Sequence[T], rate: float, window: float) -> AsyncIterator[T]:
    """Each of `items` at once when they fit in `rate` a second over `window` seconds, else one every 1/rate s:
    thousands of jobs' periodic work (a resync, a progress pass) spread over the period, not a burst of thousands
    and then nothing."""
    spread = len(items) > rate * window
    for i, item in enumerate(items):
        if spread and i:
            await asyncio.sleep(1 / rate)
        yield item
