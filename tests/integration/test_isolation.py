"""One job's cost never blocks the others: a job as big as the limits allow, whose pods would not fit the
operator's per-job budget, is failed with reason ReconcileBudgetExceeded while a normal job beside it runs to
success; its reconciles (parse, render, decide) run on worker threads, not on the event loop every job shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_harness import Cluster, Operator, local_cluster, py, replica, wait_for

from tfjob_operator.api import limits
from tfjob_operator.controller import reconcile_budget

pytestmark = pytest.mark.timeout(180)


def hostile_replica() -> dict[str, Any]:
    """The most pods the limits allow, each carrying a ~200 KiB template: accepted by the CRD and validation,
    but ~360 MiB of pods to build."""
    spec = replica(py("pass"), limits.MAX_REPLICAS_PER_JOB)
    spec["template"]["spec"]["containers"][0]["env"] = [{"name": "BLOB", "value": "x" * 200_000}]
    return spec


def test_a_job_over_its_budget_fails_while_a_normal_job_beside_it_succeeds(
        cluster: Cluster, operator: Operator) -> None:
    hostile = cluster.submit({"Worker": hostile_replica()})
    normal = cluster.submit({"Worker": replica(py("import time; time.sleep(1)"), 2)})
    cluster.wait_state(normal, "Succeeded", timeout=60)
    failed = wait_for(lambda: cluster.condition(hostile, "Failed"), 60, what="the hostile job failed")
    assert failed["reason"] == reconcile_budget.REASON
    assert f"{limits.MAX_REPLICAS_PER_JOB} pods" in failed["message"] and "TFJOB_RECONCILE_BUDGET_BYTES" in \
        failed["message"]
    cluster.wait_events(hostile, reconcile_budget.REASON)
    assert cluster.pods(hostile) == []  # refused before anything was built or created
    # The operator keeps serving: a job submitted after the hostile one was handled runs too.
    after = cluster.submit({"Worker": replica(py("pass"), 1)})
    cluster.wait_state(after, "Succeeded", timeout=60)
    assert operator.proc is not None and operator.proc.poll() is None


def test_a_reconcile_over_its_time_budget_fails_the_job_instead_of_holding_the_operator(tmp_path: Path) -> None:
    """A budget cut in the middle of deciding: 300 pods take far longer than 0.05 s to render."""
    with local_cluster(tmp_path) as cluster:
        op = Operator(cluster.kubeconfig, tmp_path / "operator.log", TFJOB_RECONCILE_BUDGET_SECONDS="0.05").start()
        try:
            name = cluster.submit({"Worker": replica(py("pass"), 300)})
            failed = wait_for(lambda: cluster.condition(name, "Failed"), 60, what="the job failed")
            assert failed["reason"] == reconcile_budget.REASON
            assert "TFJOB_RECONCILE_BUDGET_SECONDS" in failed["message"] and "0.05 s" in failed["message"]
            assert cluster.pods(name) == []
        finally:
            op.stop()
        assert op.proc is not None and op.proc.returncode == 0, op.log()[-3000:]
