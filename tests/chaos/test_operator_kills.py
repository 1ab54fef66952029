"""The operator SIGKILLed at random (seeded) moments while jobs run, and restarted each time: every job still
finishes, no replica ever gets two pods in one attempt, no gang is left partly bound, no pod outlives its
cleanPodPolicy."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaos_world import SEED, Record, duplicate_pods, leaked_pods, partial_gangs, record, report, scaled, unconverged
from operator_harness import Cluster, Operator, local_cluster, py, replica, wait_for

pytestmark = pytest.mark.timeout(600)

KILLS = scaled(20)
NODES = "node-a{cpu:8,memory:16Gi};node-b{cpu:8,memory:16Gi}"
# Cheap pods: a short sleep, then an exit code; the first attempt may exit 130 (a retryable code: the
# operator restarts the whole gang) or 1 (the job fails).
RETRY_ONCE = "import os, sys, time; time.sleep({s}); sys.exit(130 if os.environ['TFJOB_ATTEMPT'] == '0' else 0)"
POLICIES = ("Running", "All", "None")


def a_job(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Replica specs, run policy and gang size of one random job (mostly succeeding, some retrying, few failing)."""
    workers = rng.randint(1, 3)
    seconds = round(rng.uniform(0.5, 3.0), 1)
    roll = rng.random()
    code = (RETRY_ONCE.format(s=seconds) if roll < 0.3 else
            f"import sys, time; time.sleep({seconds}); sys.exit(1)" if roll < 0.4 else
            f"import time; time.sleep({seconds})")
    return ({"Worker": replica(py(code), workers, resources={})},
            {"cleanPodPolicy": rng.choice(POLICIES), "backoffLimit": 3}, workers)


@pytest.fixture
def chaos_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with local_cluster(tmp_path, nodes=NODES) as cluster:
        yield cluster


def check(rec: Record, sizes: dict[str, int], title: str) -> None:
    """Every job converged, then the invariants over everything recorded; prints the run's figures."""
    names = list(sizes)
    wait_for(lambda: not unconverged(rec.jobs(), names), 120, what="every job finished")
    # Clean-up follows the finish: a bounded wait for it, then nothing may be left.
    wait_for(lambda: not leaked_pods(rec.jobs(), rec.pods()), 30, what="pods cleaned up per cleanPodPolicy")
    events = rec.snapshot()
    checks = {"one pod per replica and attempt": duplicate_pods(events), "no partially bound gang":
              partial_gangs(events, sizes), "every job converged": unconverged(rec.jobs(), names),
              "no pod past its cleanPodPolicy": leaked_pods(rec.jobs(), rec.pods())}
    print("\n" + report(title, rec, names, checks))
    for what, violations in checks.items():
        assert violations == [], f"{what}: {violations}"


def test_jobs_finish_cleanly_through_repeated_operator_sigkills(chaos_cluster: Cluster, tmp_path: Path) -> None:
    cluster = chaos_cluster
    rng = random.Random(SEED)
    op = Operator(cluster.kubeconfig, tmp_path / "operator.log").start()
    sizes: dict[str, int] = {}
    try:
        with record(cluster) as rec:
            for _ in range(scaled(4)):
                specs, policy, size = a_job(rng)
                sizes[cluster.submit(specs, **policy)] = size
            for kill in range(KILLS):
                # A random moment: during start-up, mid-reconcile, mid-release or while pods run.
                time.sleep(rng.uniform(0.2, 2.0))
                op.kill()
                rec.fault(f"SIGKILL {kill + 1}")
                if kill % 2 == 0:  # jobs keep arriving, so kills land on every phase of a job's life
                    specs, policy, size = a_job(rng)
                    sizes[cluster.submit(specs, **policy)] = size
                op.start()
            check(rec, sizes, f"operator SIGKILLs ×{KILLS}")
    finally:
        op.stop()
    assert "Traceback" not in op.log(), op.log()[-3000:]
