"""The elastic trace replay's rules on tiny hand-made traces, and its rigid mode against gang_replay's decisions."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import elastic_replay
import gang_replay
from elastic_replay import Knobs

pytestmark = pytest.mark.timeout(120)

HOUR = 3600.0


def schedule_hash(jobs: list[gang_replay.Job]) -> str:
    return hashlib.sha256(repr([(j.id, j.start, j.end) for j in jobs]).encode()).hexdigest()


def test_elastic_gang_starts_narrow_shrinks_on_a_lost_node_and_widens_after_the_cooldown():
    # 2 nodes x 2 GPUs, one GPU per worker. A 1-GPU job holds a GPU for an hour; a 4-worker elastic job (min 2)
    # arriving with it starts at 3: one worker beside the 1-GPU job on node-000, two on node-001.
    rows = [(0.0, HOUR, 1), (1.0, 4 * HOUR, 4)]
    knobs = Knobs(elastic=True, efficiency=1.0, restart_penalty=60.0, cooldown=300.0)
    res = elastic_replay.replay(rows, knobs, [(1000.0, 2000.0, 1)], nodes=2, gpn=2)
    small, gang = res.jobs
    assert small.start == 0.0 and gang.start == 1.0
    # Timeline of the gang (work: 4 h at 4 workers = 14,400 s of full-width work):
    #   1 → 1000 s at 3 workers: 999 x 3/4 = 749.25 s of work done.
    #   1000 s: node-001 lost; 1 GPU free on node-000 (the small job holds the other): 1 < min 2, so it waits.
    #   2000 s: node-001 back; it restarts at 3 (its width fits again): no resize; 60 s penalty.
    #   3600 s: the small job ends; room for 4 from then, the cooldown (300 s since the start at 1 s) long
    #   passed, so it widens at 3600 + 60 = 3660 s: (3660 - 2060) x 3/4 = 1200 s more work.
    #   3660 s: restart at 4 with a 60 s penalty; 14,400 - 749.25 - 1200 = 12,450.75 s left at full speed.
    assert res.run.resizes == 1
    assert res.run.restarts == 2  # the lost node, the widen
    assert gang.end == pytest.approx(3660.0 + 60.0 + 14400 - 749.25 - 1200)


@pytest.mark.parametrize(("cooldown", "widened"), [(300.0, 7260.0), (5000.0, 3600.0 + 5000.0)])
def test_elastic_gang_shrinks_when_its_width_no_longer_fits(cooldown, widened):
    # 2 nodes x 4 GPUs. An 8-worker elastic gang (min 4) runs alone at 8; node 1 is lost for an hour: the gang
    # restarts at 4 on node 0 at once, and widens back to 8 once the node is back, room has lasted 60 s and the
    # cooldown has passed since the shrink (at 3600 s): whichever comes last.
    rows = [(0.0, 10 * HOUR, 8)]
    res = elastic_replay.replay(rows, Knobs(elastic=True, restart_penalty=60.0, cooldown=cooldown),
                                [(HOUR, 2 * HOUR, 1)], nodes=2, gpn=4)
    (gang,) = res.jobs
    assert res.run.resizes == 2 and res.run.restarts == 2
    # 0 → 3600 at 8: 3600 s of work. From 3600 at 4 after a 60 s penalty, half speed until the widen; then a
    # 60 s penalty and the rest at full speed.
    narrow = (widened - 3660.0) / 2
    assert gang.end == pytest.approx(widened + 60.0 + 36000 - 3600 - narrow)
    rigid = elastic_replay.replay(rows, Knobs(elastic=False, restart_penalty=60.0), [(HOUR, 2 * HOUR, 1)],
                                  nodes=2, gpn=4)
    # The rigid gang waits for the node: restarts at 7200 with the penalty, 36,000 - 3600 s of work left.
    assert (rigid.run.resizes, rigid.run.restarts) == (0, 1)
    assert rigid.jobs[0].end == pytest.approx(7200.0 + 60.0 + 36000 - 3600)
    assert gang.end < rigid.jobs[0].end


def test_efficiency_scales_a_narrow_gangs_progress():
    rows = [(0.0, HOUR, 2), (0.0, HOUR, 4)]  # 4 GPUs: the 4-worker gang (min 2) starts at 2 beside the first
    slow = elastic_replay.replay(rows, Knobs(elastic=True, efficiency=1.0, cooldown=10 * HOUR), nodes=1, gpn=4)
    fast = elastic_replay.replay(rows, Knobs(elastic=True, efficiency=2.0, cooldown=10 * HOUR), nodes=1, gpn=4)
    assert slow.jobs[1].end == pytest.approx(2 * HOUR)  # at half speed, never widened (cooldown)
    assert fast.jobs[1].end == pytest.approx(HOUR)  # 2 x 2/4 = full speed


@pytest.mark.skipif(not gang_replay.TRACE.exists(), reason="the ITP trace is not in third_party/")
def test_rigid_without_preemptions_makes_gang_replays_decisions():
    rows = gang_replay.load_trace(gang_replay.TRACE, "cluster03.csv", 4.0, 800)
    today = gang_replay.replay(rows, 1, "builtin", nodes=64, gpn=8, passes=10)
    rigid = elastic_replay.replay(rows, Knobs(elastic=False), nodes=64, gpn=8)
    assert all(j.end is not None for j in rigid.jobs)
    assert schedule_hash(rigid.jobs) == schedule_hash(today.jobs)
