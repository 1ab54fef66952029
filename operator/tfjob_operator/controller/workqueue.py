"""A work queue keyed by job, like client-go's workqueue: triggers for one key are coalesced, one run per key at
a time, errors back off exponentially, and the run's answer ("look again in N s") becomes the key's one timer.

Our own queue rather than kopf's per-object handlers: TFJob events and pod events (from the operator's own pod
watch) must land in one queue per job, and a reconcile's answer is a single next look, not a handler retry.
Nothing here knows what a job is: `process(key)` does the work; the queue decides when.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

#: The work for one key: returns in how many seconds to run it again (None: only when triggered).
Process = Callable[[K], Awaitable[float | None]]
#: Called when `process` raised: (key, error, errors in a row, the back-off delay) → the delay to use instead.
OnError = Callable[[K, Exception, int, float], Awaitable[float | None]]


@dataclass
class _Entry:
    """One key's place in the queue (dropped by `forget`; a run in flight finishes on its own copy)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dirty: bool = False
    task: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    failures: int = 0
    #: A run has started since the key was first added (later runs are debounced).
    started: bool = False


@dataclass(frozen=True)
class Backoff:
    """Seconds before retrying after the n-th error in a row: `base * 2**n`, at most `most`."""

    base: float
    most: float

    def delay(self, failures: int) -> float:
        return min(self.base * 2 ** failures, self.most)


class WorkQueue(Generic[K]):
    """Runs `process(key)` for every key added: coalesced, one at a time per key, retried with back-off."""

    def __init__(self, process: Process[K], *, backoff: Backoff, on_error: OnError[K] | None = None,
                 debounce: float = 0.0, timer_slack: float = 0.0,
                 observe: Callable[[float], None] | None = None) -> None:
        self._process = process
        self._on_error = on_error
        self.backoff = backoff
        #: Adds within this many seconds of a key's run starting are served by that run (but the key's first).
        self.debounce = debounce
        #: Added to every timer: a deadline computed at second precision has surely passed when it fires.
        self.timer_slack = timer_slack
        self._observe = observe
        self._entries: dict[K, _Entry] = {}
        #: While paused (a standby replica), keys added are kept, and run once `resume` is called.
        self.paused = False

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def add(self, key: K) -> None:
        """Run `process(key)` soon; adds while it runs cause one more run."""
        entry = self._entry(key)
        entry.dirty = True
        if not self.paused:
            self._run(key, entry)

    def depth(self) -> int:
        """Keys added and not yet run (client-go's workqueue_depth)."""
        return sum(1 for entry in self._entries.values() if entry.dirty)

    def resume(self) -> None:
        """Run every key added while paused (and from now on, every key added)."""
        self.paused = False
        for key, entry in list(self._entries.items()):
            if entry.dirty:
                self._run(key, entry)

    def _run(self, key: K, entry: _Entry) -> None:
        if entry.task is None or entry.task.done():
            entry.task = asyncio.create_task(self._drain(key, entry), name=f"work {key}")

    def lock(self, key: K) -> asyncio.Lock:
        """The lock each run of `key` holds: other work on the key (a partial status write) takes it too."""
        return self._entry(key).lock

    def failures(self, key: K) -> int:
        """Errors in a row of `key`'s runs (0 after a run that returned)."""
        entry = self._entries.get(key)
        return entry.failures if entry is not None else 0

    def forget(self, key: K) -> None:
        """Drop the key: its timer is cancelled; a run in flight finishes but schedules nothing."""
        entry = self._entries.pop(key, None)
        if entry is not None and entry.timer is not None:
            entry.timer.cancel()

    async def stop(self) -> None:
        """Cancel every run and timer."""
        for key in list(self._entries):
            entry = self._entries[key]
            if entry.task is not None:
                entry.task.cancel()
            self.forget(key)

    def _entry(self, key: K) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        return entry

    async def _drain(self, key: K, entry: _Entry) -> None:
        while entry.dirty:
            # Triggers come in bursts (a gang's pods start together): one run for the burst. A key's first run
            # does not wait: nothing of it is bursting yet.
            await asyncio.sleep(self.debounce if entry.started else 0)
            entry.started = True
            entry.dirty = False
            async with entry.lock:
                started = time.perf_counter()
                try:
                    delay = await self._process(key)
                    entry.failures = 0
                except Exception as exc:  # an outage must not end the queue: retry with back-off
                    entry.failures += 1
                    delay = self.backoff.delay(entry.failures)
                    if self._on_error is not None:
                        delay = await self._on_error(key, exc, entry.failures, delay)
                finally:
                    if self._observe is not None:
                        self._observe(time.perf_counter() - started)
                if self._entries.get(key) is entry:
                    self._schedule(key, entry, delay)

    def _schedule(self, key: K, entry: _Entry, delay: float | None) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        if delay is not None:
            entry.timer = asyncio.get_running_loop().call_later(delay + self.timer_slack, self.add, key)
