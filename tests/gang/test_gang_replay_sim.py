"""The trace-replay simulator's own rules, on tiny hand-made traces (the figures come from bench/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gang_replay

pytestmark = pytest.mark.timeout(60)

# Two 3-GPU jobs submitted in the same second on 2 nodes x 2 GPUs, one GPU per worker.
TWO_BIG_TOGETHER = [(0.0, 3600.0, 3), (0.0, 3600.0, 3)]


def test_no_gang_interleaves_concurrent_gangs_into_a_deadlock_and_breaks_it():
    out = gang_replay.replay(TWO_BIG_TOGETHER, 1, "no-gang", nodes=2, gpn=2, passes=10)
    assert out.deadlocks == 1
    assert out.unfinished == 0
    first, second = sorted(out.jobs, key=lambda j: j.end or 0)
    assert (first.start, second.start) == (0.0, 3600.0)
    # The deleted gang had held 2 GPUs for no time (deadlock found at once); nothing else was partial.
    assert out.partial_gpu_hours == 0.0


@pytest.mark.parametrize("policy", ["builtin", "fifo-gang"])
def test_gang_policies_never_hold_gpus_in_partial_gangs(policy):
    out = gang_replay.replay(TWO_BIG_TOGETHER, 1, policy, nodes=2, gpn=2, passes=10)
    assert (out.deadlocks, out.partial_gpu_hours, out.unfinished) == (0, 0.0, 0)
    assert sorted(j.start for j in out.jobs) == [0.0, 3600.0]


def test_no_gang_partial_gang_holds_gpus_until_it_completes():
    # A 1-GPU job runs for an hour; a 4-GPU gang arriving with it binds 3 pods and waits for the 4th.
    rows = [(0.0, 3600.0, 1), (1.0, 3600.0, 4)]
    out = gang_replay.replay(rows, 1, "no-gang", nodes=2, gpn=2, passes=10)
    assert out.deadlocks == 0
    assert out.partial_gpu_hours == pytest.approx(3 * 3599 / 3600)
    gang = out.jobs[1]
    assert gang.start == 3600.0


def test_builtin_backfills_where_strict_fifo_waits():
    # A 4-GPU gang waits for a running 2-GPU job; a later 1-GPU job fits in the idle GPU.
    rows = [(0.0, 3600.0, 2), (1.0, 3600.0, 4), (2.0, 600.0, 1)]
    backfill = gang_replay.replay(rows, 1, "builtin", nodes=2, gpn=2, passes=10)
    strict = gang_replay.replay(rows, 1, "fifo-gang", nodes=2, gpn=2, passes=10)
    assert backfill.jobs[2].start == 2.0
    assert strict.jobs[2].start == 3600.0 + 3600.0
