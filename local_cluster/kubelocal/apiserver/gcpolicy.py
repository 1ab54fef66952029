"""Garbage collection for a process that serves the control plane for a long time (`tfjob local up`).

CPython's cyclic collector walks every tracked container in a full (generation 2) collection, and runs one
whenever a quarter more objects have survived since the last. A control plane holding 10,000 pods, once in
the store and once in each component's informer cache, has about a million of them: every full collection
then stops the API server and the components together for 0.3 to 0.6 s, on a heap that keeps growing. That
was the growing spike in ms per create (bench/local_scale.py) and most of a GET's p99 during a burst.

So, as long-running Python servers do (gc.freeze after start-up; full collections off the request path):
- the start-up heap (modules, Kubernetes' OpenAPI schemas, the registry) is frozen: it is never garbage, and
  no collection walks it again;
- generations 0 and 1 keep CPython's thresholds: they catch nearly all cyclic garbage with pauses of a few ms;
- automatic full collections become rare (a safety net under load that never stops), and the server runs the
  full collection itself once requests have slowed to heartbeats, so that its pause falls where nobody waits.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

#: CPython's own default for threshold2: a full collection after this many generation-1 collections.
DEFAULT_FULL_EVERY = 10


@dataclass(frozen=True)
class GcSettings:
    """How often the collector may run a full collection on its own, and when the server runs one."""

    #: Generation-1 collections between two automatic full collections (CPython: 10); only under load that
    #: never lets the server be idle does a full collection happen during requests.
    full_every: int = 1000
    #: Generation-1 collections since the last full one that make a full collection worth running when idle.
    idle_after: int = DEFAULT_FULL_EVERY
    #: Seconds over which the request rate is measured.
    window: float = 1.0
    #: Requests per second that still count as idle: the kubelet's heartbeats (a Lease per node each second)
    #: and the odd poll never stop, a burst or a client at work is hundreds.
    idle_rate: float = 20.0
    #: Seconds without any request right before a full collection starts.
    min_quiet: float = 0.1
    #: How late the server's loop may be and still count as idle: a loop that is behind has requests waiting
    #: in its sockets that it has not read yet (they are not "activity" until it does).
    max_lag: float = 0.05
    #: At most this share of the time goes to full collections: after one that took d seconds, the next
    #: waits at least d / max_share (a heap of a million objects: 0.5 s, then 25 s).
    max_share: float = 0.02


@dataclass(frozen=True)
class GcState:
    """What the decision looks at: the collector's counts and the server's recent past, in seconds."""

    young_collections: int  # generation-1 collections since the last full one (gc.get_count()[2])
    rate: float  # requests per second over the last window
    quiet_for: float  # since a request last started or finished
    lag: float  # how late the server's loop woke the collector
    since_full: float  # since the last full collection the server ran ended
    last_full_took: float  # how long that one took (0 before the first)


def full_collection_due(state: GcState, settings: GcSettings) -> bool:
    """Whether to run a full collection now: enough has survived into the old generation since the last one,
    the server is idle and keeping up (so no request waits behind the pause), and full collections stay
    a small share of the time."""
    return (state.young_collections >= settings.idle_after and state.rate <= settings.idle_rate
            and state.quiet_for >= settings.min_quiet and state.lag <= settings.max_lag
            and state.since_full * settings.max_share >= state.last_full_took)


class IdleCollector:
    """Owns the process's collector while the server runs (`activity`: time.monotonic() of the latest request
    and how many requests have started): freezes the start-up heap, makes automatic full collections rare,
    and runs them when the server is idle. `stop()` gives the collector back."""

    def __init__(self, activity: Callable[[], tuple[float, int]], settings: GcSettings = GcSettings()) -> None:
        self.activity = activity
        self.settings = settings
        self.full_collections = 0
        self._saved: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._full_ended = time.monotonic()
        self._full_took = 0.0
        self._lag = 0.0

    def start(self) -> None:
        """Call once start-up is done, on the loop that serves requests."""
        if self._task is not None:
            return
        gc.collect()
        gc.freeze()
        self._saved = gc.get_threshold()
        young, middle, _ = self._saved
        gc.set_threshold(young, middle, self.settings.full_every)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="apiserver-idle-gc")

    async def _run(self) -> None:
        while True:
            before = self.activity()[1]
            await self._sleep(self.settings.window)
            rate = (self.activity()[1] - before) / (self.settings.window + self._lag)
            if not self._due(rate):
                continue
            await self._sleep(0.02)  # once more after a moment: a request that had arrived is being read by now
            if not self._due(rate):
                continue
            started = time.monotonic()
            gc.collect()
            self._full_ended = time.monotonic()
            self._full_took = self._full_ended - started
            self.full_collections += 1

    async def _sleep(self, seconds: float) -> None:
        """Sleep, and keep how late the loop woke us."""
        asked = time.monotonic()
        await asyncio.sleep(seconds)
        self._lag = time.monotonic() - asked - seconds

    def _due(self, rate: float) -> bool:
        now = time.monotonic()
        state = GcState(young_collections=gc.get_count()[2], rate=rate, quiet_for=now - self.activity()[0],
                        lag=self._lag, since_full=now - self._full_ended, last_full_took=self._full_took)
        return full_collection_due(state, self.settings)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._task = None
        if self._saved is not None:
            gc.set_threshold(*self._saved)
        gc.unfreeze()
