"""API faults injected by the local API server into the operator's requests (5xx, 409 conflicts, 429 with
Retry-After, slow responses) and into every watch (dropped, and expired by a compaction so that clients must
list again), at seeded random moments while jobs run: every job still finishes and the invariants hold."""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from chaos_world import SEED, record, scaled
from operator_harness import Cluster, Operator, needs_kubelocal, wait_for
from test_operator_kills import a_job, chaos_cluster, check

from kubelocal.apiserver.faults import FaultInjector

__all__ = ["chaos_cluster"]

pytestmark = [needs_kubelocal(), pytest.mark.timeout(600)]

FAULTS = scaled(30)
#: Only the operator's requests fail or slow down (kopf's client, the official client): the test's own
#: client, the kubelet and the scheduler are spared, so what is tested is the operator's handling.
OPERATOR = r"^(kopf/|tfjob-operator)"
JOB_PATHS = r"/namespaces/default/(pods|tfjobs)"


def fault_menu(faults: FaultInjector, rng: random.Random) -> dict[str, Callable[[], object]]:
    def n() -> int:
        return rng.randint(1, 4)

    return {
        "5xx": lambda: faults.fail("*", JOB_PATHS, rng.choice([500, 502, 503]), n(), agent=OPERATOR),
        "409 on a status write": lambda: faults.fail("PATCH", r"/tfjobs/[^/]+/status", 409, n(), agent=OPERATOR),
        "409 on a pod create": lambda: faults.fail("POST", r"/namespaces/default/pods$", 409, 1, agent=OPERATOR),
        "429 Retry-After": lambda: faults.fail("*", ".", 429, n(), agent=OPERATOR),
        "slow responses": lambda: faults.delay("*", ".", round(rng.uniform(0.5, 3.0), 1), n(), agent=OPERATOR),
        "dropped watches": faults.drop_watches,
        "expired watches": faults.expire_watches,
    }


def test_jobs_finish_cleanly_through_api_faults(chaos_cluster: Cluster, tmp_path: Path) -> None:
    cluster = chaos_cluster
    rng = random.Random(SEED)
    menu = fault_menu(cluster.apiserver.faults, rng)
    op = Operator(cluster.kubeconfig, tmp_path / "operator.log").start()
    sizes: dict[str, int] = {}
    try:
        with record(cluster) as rec:
            # Faults start once the operator serves jobs: before, its only request is a discovery probe once a
            # second, which would take the queued faults one by one (30 s of start-up instead of chaos).
            specs, policy, size = a_job(rng)
            first = cluster.submit(specs, **policy)
            sizes[first] = size
            wait_for(lambda: cluster.status(first), 60, what="the operator serving jobs")
            for step in range(FAULTS):
                if step % 3 == 0:
                    specs, policy, size = a_job(rng)
                    sizes[cluster.submit(specs, **policy)] = size
                time.sleep(rng.uniform(0.1, 1.0))  # a random moment
                kind = rng.choice(sorted(menu))
                menu[kind]()
                rec.fault(kind)
            check(rec, sizes, f"API faults ×{FAULTS} ({', '.join(sorted(menu))})")
            assert op.proc is not None and op.proc.poll() is None, "the operator survives API faults"
        # The faults reached the operator: its requests were answered with each injected status.
        answered = Counter(r.status_code for r in list(cluster.apiserver.requests)
                           if re.search(OPERATOR, r.user_agent) and r.status_code in (409, 429, 500, 502, 503))
        print(f"operator requests answered with a fault status: {dict(sorted(answered.items()))}")
        assert {409, 429} <= set(answered) and answered.keys() & {500, 502, 503}
    finally:
        cluster.apiserver.faults.clear()
        op.stop()
