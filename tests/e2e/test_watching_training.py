"""End to end: what a user sees of training from the cluster: progress in the status, and a hung worker
turned into one TrainingStalled gang restart that resumes and succeeds. Real TensorFlow workers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from e2e_helpers import REPO, apply, example
from operator_harness import Cluster, Operator, local_cluster, wait_for


@pytest.fixture(scope="module")
def watched_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local cluster and the operator reading the chiefs' progress every 2 s."""
    workdir = tmp_path_factory.mktemp("watch")
    with local_cluster(workdir, nodes="1x{cpu:64,memory:128Gi}") as cluster:
        op = Operator(cluster.kubeconfig, workdir / "operator.log", TFJOB_PROGRESS_INTERVAL="2").start()
        try:
            yield cluster
        finally:
            op.stop()


def stalling_job(name: str, stall_timeout: int) -> dict:
    """mnist-cpu with a model whose worker 1 hangs mid-epoch 2 in the first attempt only."""
    manifest = example("mnist-cpu")
    manifest["metadata"]["name"] = name
    manifest["spec"]["runPolicy"]["stallTimeoutSeconds"] = stall_timeout
    container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["args"] = ["--model", "user_model:build_stalling", "--dataset", "user_model:data_without_validation",
                         "--epochs", "3", "--steps-per-epoch", "10", "--output-dir", f"/data/{name}"]
    # the user's module, and the worker runtime of this checkout (not whatever the venv's install points at)
    container["env"] = [{"name": "PYTHONPATH", "value": f"{REPO / 'tests' / 'worker'}:{REPO / 'worker_image'}"},
                        {"name": "STALL_WORKER_INDEX", "value": "1"}, {"name": "STALL_AFTER_STEPS", "value": "15"},
                        {"name": "STALL_ATTEMPT", "value": "0"}]
    return manifest


@pytest.mark.timeout(420)
def test_a_hung_worker_costs_one_training_stalled_restart_and_the_job_still_succeeds(
        watched_cluster: Cluster) -> None:
    cluster = watched_cluster
    apply(cluster, stalling_job("stalls", stall_timeout=8))
    # progress from the chief's metrics endpoint reaches the status, and kubectl shows it
    progress = wait_for(lambda: cluster.status("stalls").get("progress"), 180, interval=0.5,
                        what="status.progress")
    assert progress["summary"].startswith("epoch ") and progress["epochs"] == 3 and "updatedAt" in progress
    table = cluster.kubectl("get", "tfj", "stalls")
    assert table.split("\n")[0].split()[:5] == ["NAME", "STATE", "WORKERS", "RESTARTS", "PROGRESS"]
    # worker 1 hangs in epoch 2; both workers' watchdogs fire; the operator restarts the gang once, blaming
    # worker 1 (stopped in its own code: its py_function) and not worker 0, which only waited for it
    events = wait_for(lambda: [m for r, m in cluster.events("stalls") if r == "TrainingStalled"], 180,
                      interval=0.5, what="a TrainingStalled Event")
    assert re.match(r"pod stalls-worker-1 \(Worker 1, container tensorflow\) stalled in its own code at "
                    r"worker/user_model\.py:\d+ in stall_here after step 15 \(exit 202", events[0]), events[0]
    assert "; stalls-worker-0 was only waiting for it, inside TensorFlow;" in events[0], events[0]
    status = cluster.wait_state("stalls", "Succeeded", timeout=240)
    assert (status["restartCount"], status["failureRestarts"]) == (1, 1)
    assert status["progress"]["summary"] == "done" and status["progress"]["epochs"] == 3  # the last read is kept
    out = cluster.workdir / "volumes" / "default" / "tfjob-shared" / "stalls"
    result = json.loads((out / "result.json").read_text())
    assert result["resumed_from_epoch"] == 2  # the backup of epoch 1 survived the stall
    assert (out / "tensorboard" / "train").is_dir()


@pytest.mark.timeout(420)
def test_a_stall_rehearsal_blames_the_hung_worker_and_not_the_one_waiting_for_it(tmp_path) -> None:
    manifest = example("mnist-cpu")
    manifest["metadata"]["name"] = "rehearsed"
    manifest["spec"]["runPolicy"]["stallTimeoutSeconds"] = 20  # above an epoch end's backup on a busy machine
    args = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--epochs") + 1] = "3"
    args[args.index("--output-dir") + 1] = "/data/rehearsed"
    path = tmp_path / "rehearsed.yaml"
    path.write_text(json.dumps(manifest))
    result = subprocess.run([sys.executable, "-m", "tfjob_operator", "local", str(path), "--stall-worker-after",
                             "0", "--workdir", str(tmp_path / "work"), "--plain", "--timeout", "360"],
                            capture_output=True, text=True, timeout=400, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "hung the training loop of rehearsed-worker-1" in result.stdout
    restart = next(line for line in result.stdout.splitlines() if "TrainingStalled: " in line)
    assert restart.split("TrainingStalled: ", 1)[1].startswith(
        "pod rehearsed-worker-1 (Worker 1, container tensorflow) stalled in its own code at "
        "tfjob_worker/lifecycle.py:"), restart
    assert "; rehearsed-worker-0 was only waiting for it, inside TensorFlow;" in restart, restart
    assert not any(word in restart for word in ("cuInit", "cuda", "CUDA")), restart


def test_stall_rehearsal_without_a_stall_timeout_is_refused_naming_the_field(tmp_path) -> None:
    workdir = tmp_path / "work"
    result = subprocess.run([sys.executable, "-m", "tfjob_operator", "local", "examples/mnist-cpu.yaml",
                             "--stall-worker-after", "0", "--workdir", str(workdir), "--plain"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert "mnist-cpu: spec.runPolicy.stallTimeoutSeconds is not set" in result.stderr
    assert not workdir.exists()  # nothing started
