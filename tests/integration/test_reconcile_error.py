"""A job whose reconcile keeps raising is failed with reason ReconcileError and, like any Failed job, its pods
are cleaned up per its cleanPodPolicy: the real operator against the local control plane.

What makes the reconcile raise is input no check foresaw: the operator's own record of the gang's size (the
`tfjob.dev/gang-replicas` annotation) overwritten with a count that is not a number while the operator was
restarting (a running operator keeps its own last write of it). Every reconcile reads it (to size the gang),
finished job or not, so only the give-up path itself can stop the pods."""

from __future__ import annotations

import pytest
from operator_harness import Cluster, Operator, py, replica, wait_for

from tfjob_operator.api.constants import ANNOTATION_GANG_REPLICAS
from tfjob_operator.controller.reconcile_errors import REASON

pytestmark = pytest.mark.timeout(120)

# worker-1 finishes at once (its pod Succeeded), worker-0 runs until stopped: the job stays Running.
ONE_DONE_ONE_RUNNING = py("import json, os, time; "
                          "time.sleep(0 if json.loads(os.environ['TF_CONFIG'])['task']['index'] else 600)")


@pytest.mark.parametrize(("policy", "kept"), [("Running", {"worker-1"}), ("All", set())])
def test_a_job_failed_by_reconcile_errors_cleans_its_pods_per_clean_pod_policy(
        cluster: Cluster, operator: Operator, policy: str, kept: set[str]) -> None:
    name = cluster.submit({"Worker": replica(ONE_DONE_ONE_RUNNING, 2)}, cleanPodPolicy=policy)
    wait_for(lambda: cluster.pod_phases(name) == {f"{name}-worker-0": "Running", f"{name}-worker-1": "Succeeded"},
             40, what="worker-0 Running and worker-1 Succeeded")
    operator.kill()
    cluster.kubectl("annotate", "tfjob", name, f'{ANNOTATION_GANG_REPLICAS}={{"Worker": "two"}}', "--overwrite")
    operator.start()

    cluster.wait_state(name, "Failed", timeout=60)
    failed = cluster.condition(name, "Failed")
    assert failed is not None and failed["reason"] == REASON
    assert "ValueError" in failed["message"] and "report it with the operator's log" in failed["message"]
    assert [m for r, m in cluster.wait_events(name, REASON) if r == REASON] == [failed["message"]]
    # The running pod is deleted (graceful); a Succeeded pod is removed at once when deleted, so once worker-0
    # is gone, worker-1 is either gone too (All) or was never deleted (Running).
    wait_for(lambda: f"{name}-worker-0" not in cluster.pod_phases(name), 30, what="the running pod deleted")
    left = {p.metadata.name.removeprefix(f"{name}-") for p in cluster.pods(name) if not p.metadata.deletion_timestamp}
    assert left == kept
