"""When progress shows, under an interval long enough to measure against (4 s): the first figures within one
interval of the chief's first epoch, even beside a job whose chief never answers; and a job shorter than an
interval still ends with its last figures, which the worker runtime leaves in the chief's termination message.
Scripted chiefs (the worker runtime's own metrics and termination code), no TensorFlow."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from operator_harness import Cluster, Operator, local_cluster, py, replica, wait_for

INTERVAL = 4.0

#: Serves /metrics as the worker runtime does and starts epoch 1 after $START seconds, on a whole second; that
#: second goes out as its checkpoint time, which the status shows (in whole seconds).
SLOW_START = py("""
import math, os, time
from tfjob_worker.metrics import Identity, ReportCollector, serve
from tfjob_worker.reports import Report
served = ReportCollector(Identity.from_env(os.environ), 0)
serve(int(os.environ['TFJOB_WORKER_METRICS_PORT']), served, host='127.0.0.1')
time.sleep(float(os.environ['START']))
time.sleep(math.ceil(time.time()) - time.time())
began = time.time()
for step in range(1, 3000):
    served.update(Report(started=True, trains=True, epoch=1, epochs=3, global_step=step, last_checkpoint=began,
                         last_progress=time.time()))
    time.sleep(0.2)
""")

#: Accepts connections on its metrics port and never answers: each read of it takes the whole read timeout.
HUNG = py("""
import os, socket, time
s = socket.socket()
s.bind(('127.0.0.1', int(os.environ['TFJOB_WORKER_METRICS_PORT'])))
s.listen(64)
time.sleep(600)
""")

#: Trains two epochs in well under an interval, never read, and leaves its figures as the runtime does on exit 0.
SHORT = py("""
import time
from tfjob_worker import termination
from tfjob_worker.reports import Report
time.sleep(1)
now = time.time()
termination.write(Report(started=True, trains=True, epoch=2, epochs=2, global_step=40, examples_per_sec=250.0,
                         last_checkpoint=now, last_progress=now))
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("progress-timing")) as c:
        op = Operator(c.kubeconfig, c.workdir / "operator.log", TFJOB_PROGRESS_INTERVAL=str(INTERVAL)).start()
        try:
            yield c
        finally:
            op.stop()


def test_a_job_shorter_than_an_interval_ends_with_its_last_figures(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(SHORT, 1)})
    status = cluster.wait_state(name, "Succeeded", timeout=60)
    assert {k: status["progress"].get(k) for k in ("epoch", "epochs", "step", "examplesPerSecond", "summary")} == {
        "epoch": 2, "epochs": 2, "step": 40, "examplesPerSecond": 250.0, "summary": "done"}


def test_the_first_progress_shows_within_one_interval_of_the_first_epoch(cluster: Cluster) -> None:
    hung = cluster.submit({"Worker": replica(HUNG, 1)})
    cluster.wait_state(hung, "Running", timeout=60)
    late = []
    for start in (1.0, 2.5, 4.0):
        spec = replica(SLOW_START, 1)
        spec["template"]["spec"]["containers"][0]["env"] = [{"name": "START", "value": str(start)}]
        name = cluster.submit({"Worker": spec})
        progress = wait_for(lambda: cluster.status(name).get("progress"), 60, interval=0.1,  # noqa: B023
                            what="status.progress")
        late.append(time.time() - datetime.fromisoformat(progress["lastCheckpointTime"]).timestamp())
    assert max(late) <= INTERVAL + 1.0, f"first progress {late} s after the first epoch, interval {INTERVAL} s"
