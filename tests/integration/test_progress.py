"""Progress in the TFJob status: the operator reads the chief's worker metrics (no RBAC for workers) and
writes status.progress only when a figure moved. The chief here is the worker runtime's real metrics
endpoint fed by a scripted trainer (no TensorFlow); tests/e2e does the same with real training."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from operator_harness import Cluster, Operator, py, replica, wait_for

CHIEF = py("""
import os, time
from tfjob_worker.metrics import Identity, ReportCollector, serve
from tfjob_worker.reports import Report
served = ReportCollector(Identity.from_env(os.environ), 0)
serve(int(os.environ['TFJOB_WORKER_METRICS_PORT']), served, host='127.0.0.1')
for step in range(1, 6):  # five steps of epoch 1, then it holds still (an idle job)
    served.update(Report(started=True, trains=True, epoch=1, epochs=2, global_step=step, examples_per_sec=512.0,
                         last_checkpoint=time.time(), last_progress=time.time()))
    time.sleep(0.4)
time.sleep(600)
""")


#: The harness's operator (tests/integration/conftest.py) reports progress every half second.
OPERATOR_SETTINGS = {"TFJOB_PROGRESS_INTERVAL": "0.5"}


def operator_metric(op: Operator, sample: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{op.env['TFJOB_METRICS_PORT']}/metrics", timeout=5).read()
    for line in text.decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0


def test_chief_progress_reaches_the_status_and_an_idle_job_costs_no_more_writes(cluster: Cluster,
                                                                                operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(CHIEF, 1)})
    cluster.wait_state(name, "Running", timeout=60)
    progress = wait_for(lambda: (p := cluster.status(name).get("progress") or {}).get("step") == 5 and p, 60,
                        what="step 5 in status.progress")
    assert progress["summary"] == "epoch 1/2 step 5" and progress["examplesPerSecond"] == 512.0
    assert progress["lastCheckpointTime"].endswith("Z") and progress["updatedAt"].endswith("Z")
    writes = operator_metric(operator, "tfjob_progress_writes_total")
    assert 1 <= writes <= 5  # at most one per change of figures
    reads = operator_metric(operator, 'tfjob_progress_reads_total{result="ok"}')
    wait_for(lambda: operator_metric(operator, 'tfjob_progress_reads_total{result="ok"}') >= reads + 4, 30,
             what="four more reads of the chief")
    assert operator_metric(operator, "tfjob_progress_writes_total") == writes  # nothing moved: nothing written
    assert operator_metric(operator, 'tfjob_jobs{state="Running"}') >= 1
    status = subprocess.run([sys.executable, "-m", "tfjob_operator", "status", name, "--kubeconfig",
                             str(cluster.kubeconfig)], capture_output=True, text=True, timeout=60).stdout
    assert "progress: epoch 1/2 step 5, 512.0 examples/s, last checkpoint " in status
    assert "PROGRESS" in cluster.kubectl("get", "tfj", name) and "epoch 1/2 step 5" in cluster.kubectl(
        "get", "tfj", name)
