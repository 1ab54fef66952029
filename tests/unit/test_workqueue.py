"""The controller's work queue (tfjob_operator.controller.workqueue): coalescing, one run at a time per key,
back-off on errors, the run's answer as the key's one timer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tfjob_operator.controller.workqueue import Backoff, WorkQueue

FAST = Backoff(base=0.01, most=0.04)


async def until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


class Recorder:
    """A process function that records its runs; `gate` (when set) holds every run until opened."""

    def __init__(self, answers: list[float | None] | None = None) -> None:
        self.runs: list[str] = []
        self.running: set[str] = set()
        self.most_at_once: dict[str, int] = {}
        self.answers = list(answers or [])
        self.gate: asyncio.Event | None = None

    async def __call__(self, key: str) -> float | None:
        assert key not in self.running, f"two runs of {key} at once"
        self.running.add(key)
        self.most_at_once[key] = len(self.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            self.runs.append(key)
            return self.answers.pop(0) if self.answers else None
        finally:
            self.running.discard(key)


async def test_adds_while_a_run_is_in_flight_cause_exactly_one_more_run() -> None:
    work = Recorder()
    work.gate = asyncio.Event()
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST)
    queue.add("a")
    await until(lambda: "a" in work.running)
    for _ in range(5):
        queue.add("a")
    work.gate.set()
    await until(lambda: len(work.runs) == 2 and not work.running)
    await asyncio.sleep(0.05)
    assert work.runs == ["a", "a"]


async def test_keys_run_side_by_side_but_one_key_never_twice_at_once() -> None:
    work = Recorder()
    work.gate = asyncio.Event()
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST)
    queue.add("a")
    queue.add("b")
    await until(lambda: work.running == {"a", "b"})
    queue.add("a")
    work.gate.set()
    await until(lambda: sorted(work.runs) == ["a", "a", "b"])


async def test_errors_back_off_exponentially_up_to_the_cap_and_a_success_resets_the_count() -> None:
    seen: list[tuple[int, float]] = []
    outcomes = [RuntimeError("1"), RuntimeError("2"), RuntimeError("3"), RuntimeError("4"), None]

    async def flaky(key: str) -> float | None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return None

    async def on_error(key: str, exc: Exception, failures: int, delay: float) -> float | None:
        seen.append((failures, delay))
        return delay

    queue: WorkQueue[str] = WorkQueue(flaky, backoff=FAST, on_error=on_error)
    queue.add("a")  # retried by the back-off timer alone, no further add
    await until(lambda: not outcomes)
    assert seen == [(1, 0.02), (2, 0.04), (3, 0.04), (4, 0.04)]
    await until(lambda: queue.failures("a") == 0)


async def test_on_error_may_stop_the_retries() -> None:
    calls: list[str] = []

    async def broken(key: str) -> float | None:
        calls.append(key)
        raise RuntimeError("bug")

    async def give_up(key: str, exc: Exception, failures: int, delay: float) -> float | None:
        return None

    queue: WorkQueue[str] = WorkQueue(broken, backoff=FAST, on_error=give_up)
    queue.add("a")
    await until(lambda: calls)
    await asyncio.sleep(0.1)  # several back-off periods: no retry came
    assert calls == ["a"] and queue.failures("a") == 1


async def test_a_run_that_asks_to_look_again_runs_again_and_its_next_answer_replaces_the_timer() -> None:
    work = Recorder(answers=[0.02, 0.3, None])
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST)
    queue.add("a")
    await until(lambda: len(work.runs) == 2)  # the timer of the first answer
    queue.add("a")  # the third run answers None: the 0.3 s timer of the second is cancelled
    await until(lambda: len(work.runs) == 3)
    await asyncio.sleep(0.5)
    assert len(work.runs) == 3


async def test_a_forgotten_key_finishes_its_run_but_keeps_no_timer() -> None:
    work = Recorder(answers=[0.02])
    work.gate = asyncio.Event()
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST)
    queue.add("a")
    await until(lambda: "a" in work.running)
    queue.forget("a")
    work.gate.set()
    await until(lambda: work.runs == ["a"])
    await asyncio.sleep(0.1)
    assert work.runs == ["a"] and "a" not in queue


async def test_the_first_run_is_immediate_and_later_adds_within_the_debounce_share_one_run() -> None:
    work = Recorder()
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST, debounce=1.0)
    started = time.monotonic()
    queue.add("a")
    await until(lambda: work.runs == ["a"])
    assert time.monotonic() - started < 0.5  # not debounced
    queue.add("a")
    await asyncio.sleep(0.05)
    queue.add("a")  # within the first's debounce: served by the same run
    await until(lambda: len(work.runs) == 2)
    await asyncio.sleep(0.05)
    assert work.runs == ["a", "a"]


async def test_other_work_holding_the_keys_lock_delays_the_run_and_durations_are_observed() -> None:
    work = Recorder()
    durations: list[float] = []
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST, observe=durations.append)
    lock = queue.lock("a")
    async with lock:
        queue.add("a")
        await asyncio.sleep(0.05)
        assert work.runs == []
    await until(lambda: work.runs == ["a"])
    await until(lambda: len(durations) == 1)


async def test_stop_cancels_runs_and_timers() -> None:
    work = Recorder(answers=[0.05])
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST)
    queue.add("a")
    await until(lambda: work.runs == ["a"])
    await queue.stop()
    await asyncio.sleep(0.15)
    assert work.runs == ["a"] and "a" not in queue


@pytest.mark.parametrize(("failures", "delay"), [(1, 1.0), (2, 2.0), (4, 8.0), (5, 10.0), (9, 10.0)])
def test_backoff_doubles_from_the_base_up_to_the_cap(failures: int, delay: float) -> None:
    assert Backoff(base=0.5, most=10.0).delay(failures) == delay


async def test_a_paused_queue_keeps_what_is_added_and_runs_each_key_once_on_resume() -> None:
    """A standby replica's queue: the jobs its watches show are kept, none is reconciled until it leads."""
    work = Recorder()
    queue: WorkQueue[str] = WorkQueue(work, backoff=FAST)
    queue.paused = True
    for key in ("a", "b", "a"):
        queue.add(key)
    await asyncio.sleep(0.05)
    assert work.runs == []
    queue.resume()
    await until(lambda: sorted(work.runs) == ["a", "b"])
    queue.add("c")
    await until(lambda: sorted(work.runs) == ["a", "b", "c"])
