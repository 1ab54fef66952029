"""End to end: a hung worker, as `tfjob local --stall-worker-after` rehearses it, turned into one TrainingStalled
gang restart that blames the hung worker and not the one waiting for it, resumes from the backup and succeeds.
Real TensorFlow workers. (The watchdog naming a user's own code, `user_model.py ... in stall_here`, is shown with
real TensorFlow in tests/worker/test_training_processes.py; status.progress with real workers in
test_short_job_progress.py and while training in tests/integration/test_progress.py; the PROGRESS column in
tests/emulator/test_kubectl.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from e2e_helpers import REPO, example


@pytest.mark.timeout(420)
def test_a_stall_rehearsal_costs_one_training_stalled_restart_blaming_the_hung_worker_and_the_job_succeeds(
        tmp_path) -> None:
    manifest = example("mnist-cpu")
    manifest["metadata"]["name"] = "rehearsed"
    manifest["spec"]["runPolicy"]["stallTimeoutSeconds"] = 20  # above an epoch end's backup on a busy machine
    args = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--epochs") + 1] = "3"
    args[args.index("--output-dir") + 1] = "/data/rehearsed"
    path = tmp_path / "rehearsed.yaml"
    path.write_text(json.dumps(manifest))
    workdir = tmp_path / "work"
    result = subprocess.run([sys.executable, "-m", "tfjob_operator", "local", str(path), "--stall-worker-after",
                             "0", "--workdir", str(workdir), "--plain", "--timeout", "360"],
                            capture_output=True, text=True, timeout=400, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "hung the training loop of rehearsed-worker-1" in result.stdout
    # both workers' watchdogs fire; the operator restarts the gang once, blaming worker 1 (stopped in the
    # rehearsal's signal handler, its own Python code) and not worker 0, which only waited for it
    restart = next(line for line in result.stdout.splitlines() if "TrainingStalled: " in line)
    assert restart.split("TrainingStalled: ", 1)[1].startswith(
        "pod rehearsed-worker-1 (Worker 1, container tensorflow) stalled in its own code at "
        "tfjob_worker/lifecycle.py:"), restart
    assert "; rehearsed-worker-0 was only waiting for it, inside TensorFlow;" in restart, restart
    assert not any(word in restart for word in ("cuInit", "cuda", "CUDA")), restart
    assert "TFJob rehearsed: Succeeded" in result.stdout
    assert "2 attempts (1 gang restarts)" in result.stdout
    assert "failure restarts   1 (counted towards backoffLimit" in result.stdout  # a stall is a failure restart
    out = workdir / "volumes" / "default" / "tfjob-shared" / "rehearsed"
    metrics = json.loads((out / "result.json").read_text())
    assert metrics["resumed_from_epoch"] >= 2  # the hang came after epoch 1: the gang resumed from a backup
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    assert (out / "tensorboard" / "train").is_dir()


def test_stall_rehearsal_without_a_stall_timeout_is_refused_naming_the_field(tmp_path) -> None:
    workdir = tmp_path / "work"
    result = subprocess.run([sys.executable, "-m", "tfjob_operator", "local", "examples/mnist-cpu.yaml",
                             "--stall-worker-after", "0", "--workdir", str(workdir), "--plain"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert "mnist-cpu: spec.runPolicy.stallTimeoutSeconds is not set" in result.stderr
    assert not workdir.exists()  # nothing started
