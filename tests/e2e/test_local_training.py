"""End to end: real TensorFlow workers trained by the real operator on the local control plane.

These are the scenarios a user of `tfjob local` (and of a real cluster) cares about: the job trains and
succeeds, a lost worker costs one gang restart and training resumes from the backup, an eviction does not
use up the failure budget, broken user code fails fast with the pod named, PS pods never keep a finished
job Running, invalid jobs change nothing, and two jobs can share the cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from e2e_helpers import REPO, apply, example, with_epochs, with_hold
from operator_harness import Cluster, wait_for

TFJOB = [sys.executable, "-m", "tfjob_operator"]
#: mnist-cpu trains 20 steps an epoch (1293 examples // 64): worker 1 of the first attempt holds 5 steps into epoch
#: 2, so a fault injected after epoch 1 hits it mid-epoch 2 however fast the machine runs (docs/worker.md).
HOLD_IN_EPOCH_2 = "25 task=worker:1 attempt=0"


def tfjob_local(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TFJOB, "local", *args, "--plain"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def output_dir(workdir: Path, job: str) -> Path:
    return workdir / "volumes" / "default" / "tfjob-shared" / job


@pytest.mark.timeout(420)
def test_mnist_example_trains_to_high_accuracy_and_saves_a_usable_model(tmp_path: Path) -> None:
    result = tfjob_local("examples/mnist-cpu.yaml", "--workdir", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "TFJob mnist-cpu: Succeeded" in result.stdout
    # The view shows every epoch line of the chief once, in order (it looks twice a second; epochs end between).
    shown = [line.split("chief: ", 1)[1].split()[1] for line in result.stdout.splitlines()
             if "chief: epoch " in line and " step " not in line]
    assert shown == [f"{n}/6" for n in range(1, 7)], result.stdout[-3000:]
    out = output_dir(tmp_path, "mnist-cpu")
    metrics = json.loads((out / "result.json").read_text())
    assert metrics["test_accuracy"] >= 0.9
    assert metrics["world_size"] == 2
    assert (tmp_path / "mnist-cpu-training.png").read_bytes()[:4] == b"\x89PNG"
    # The SavedModel loads in a fresh process and classifies the digits it was trained on.
    check = subprocess.run([sys.executable, "-c", f"""
import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf
from sklearn.datasets import load_digits
d = load_digits()
model = tf.saved_model.load({str(out / "saved_model")!r})
fn = model.signatures["serving_default"]
x = tf.constant((d.images[:200] / 16.0).reshape(200, 64).astype("float32"))
probs = list(fn(x).values())[0].numpy()
print((probs.argmax(axis=1) == d.target[:200]).mean())
"""], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr[-2000:]
    assert float(check.stdout.strip().splitlines()[-1]) >= 0.9


@pytest.mark.timeout(480)
def test_killed_worker_restarts_the_gang_once_and_training_resumes_from_backup(tmp_path: Path) -> None:
    manifest = tmp_path / "mnist-cpu.yaml"
    manifest.write_text(yaml.safe_dump(with_epochs(with_hold(example("mnist-cpu"), HOLD_IN_EPOCH_2), 3)))
    result = tfjob_local(str(manifest), "--workdir", str(tmp_path / "work"), "--kill-worker-after", "0")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "killed mnist-cpu-worker-1 with SIGKILL" in result.stdout
    # The restart names the pod and the kill as it was, not memory and not a start-up line of CUDA from its log.
    restart = next(line for line in result.stdout.splitlines() if "RetryableExitCode: " in line)
    assert restart.split("RetryableExitCode: ", 1)[1].startswith(
        "pod mnist-cpu-worker-1 (Worker 1, container tensorflow) exited with code 137 (SIGKILL): Killed with SIGKILL "
        "by a fault injection (tfjob local --kill-worker-after); restarting the whole gang as attempt 1"), restart
    assert not any(word in restart for word in ("cuInit", "cuda", "OOM", "memory")), restart
    assert "cuInit" not in result.stdout
    assert "2 attempts (1 gang restarts)" in result.stdout
    assert "attempt 1" in result.stdout  # the pods of the second attempt were shown
    metrics = json.loads((output_dir(tmp_path / "work", "mnist-cpu") / "result.json").read_text())
    assert metrics["resumed_from_epoch"] == 2  # the kill came mid-epoch 2: its backup is epoch 1's
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]  # every epoch trained, none twice


def test_invalid_job_is_refused_naming_the_field_and_nothing_starts(tmp_path: Path) -> None:
    bad = example("mnist-cpu")
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox"})
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(bad))
    workdir = tmp_path / "work"
    result = tfjob_local(str(path), "--workdir", str(workdir), timeout=60)
    assert result.returncode == 2
    assert 'spec.tfReplicaSpecs.Worker.template.spec.containers: no container named "tensorflow"' in result.stderr
    assert not workdir.exists()  # no control plane, no pods, nothing written


class TestOnASharedLocalCluster:
    """Scenarios driven through the API, as `kubectl apply` would, on one long-lived local cluster."""

    @pytest.mark.timeout(300)
    def test_user_code_error_fails_the_job_fast_naming_pod_and_exit_code(self, e2e_cluster: Cluster,
                                                                         tmp_path: Path) -> None:
        (tmp_path / "broken_model.py").write_text(
            "def build(*args, **kwargs):\n    raise ValueError('bad layer size')\n\n"
            "def data(*args, **kwargs):\n    raise ValueError('bad data file')\n")
        manifest = example("mnist-cpu")
        manifest["metadata"]["name"] = "broken"
        container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        container["args"] = ["--model", "broken_model:build", "--dataset", "broken_model:data",
                             "--output-dir", "/data/broken"]
        container["env"] = [{"name": "PYTHONPATH", "value": str(tmp_path)}]
        start = time.monotonic()
        apply(e2e_cluster, manifest)
        status = e2e_cluster.wait_state("broken", "Failed", timeout=120)
        elapsed = time.monotonic() - start
        failed = e2e_cluster.condition("broken", "Failed")
        assert failed is not None
        assert "broken-worker-" in failed["message"] and "exited with code 1" in failed["message"]
        assert status.get("restartCount", 0) == 0
        assert elapsed < 60 + 30  # 60 s is the promise; TF start-up on a loaded 2-core box gets some slack

    @pytest.mark.timeout(300)
    def test_a_worker_over_its_memory_limit_fails_as_oom_killed_naming_that_pod(self, e2e_cluster: Cluster) -> None:
        memory = e2e_cluster.local.kubelet.memory
        if not memory.enforced:
            pytest.skip(f"memory limits {memory.why}")
        manifest = example("mnist-cpu")
        manifest["metadata"]["name"] = "hungry"
        manifest["spec"]["runPolicy"]["backoffLimit"] = 0
        container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        container["args"] = ["--model", "user_model:build_hungry", "--dataset", "user_model:data", "--epochs", "2",
                             "--output-dir", "/data/hungry"]
        container["resources"] = {"requests": {"cpu": "1", "memory": "1536Mi"}, "limits": {"memory": "1536Mi"}}
        container["env"] = [{"name": "PYTHONPATH", "value": str(REPO / "tests" / "worker")},
                            {"name": "HOG_WORKER_INDEX", "value": "1"}, {"name": "HOG_MIB", "value": "3072"}]
        apply(e2e_cluster, manifest)
        e2e_cluster.wait_state("hungry", "Failed", timeout=240)
        failed = e2e_cluster.condition("hungry", "Failed")
        assert failed is not None
        # Worker 1 (a TensorFlow worker: its log starts with CUDA's cuInit error line) went over its limit.
        assert failed["message"].startswith(
            "pod hungry-worker-1 (Worker 1, container tensorflow) exited with code 137 (OOMKilled) (hint: the "
            "kernel's OOM killer stopped it at its memory limit: raise resources.limits.memory or lower the batch "
            "size)"), failed["message"]
        assert not any(word in failed["message"] for word in ("cuInit", "cuda", "CUDA")), failed["message"]

    @pytest.mark.timeout(480)
    def test_two_jobs_at_once_succeed_one_evicted_without_using_its_failure_budget_and_ps_cleaned_up(
            self, e2e_cluster: Cluster) -> None:
        apply(e2e_cluster, example("ps-strategy"))
        manifest = with_epochs(with_hold(example("mnist-cpu"), HOLD_IN_EPOCH_2), 3)
        manifest["metadata"]["name"] = "evicted"
        manifest["spec"]["runPolicy"]["backoffLimit"] = 0  # a failure restart would fail the job at once
        args = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
        args[args.index("--output-dir") + 1] = "/data/evicted"
        apply(e2e_cluster, manifest)
        e2e_cluster.wait_state("evicted", "Running", timeout=120)
        wait_for(lambda: "fault: holding after step 25" in e2e_cluster.core.read_namespaced_pod_log(
            "evicted-worker-1", "default"), timeout=180, interval=0.5, what="worker 1 holding in epoch 2")
        e2e_cluster.call(e2e_cluster.local.kubelet.evict("default", "evicted-worker-1"))
        # The eviction restarts that gang once, as a disruption: backoffLimit 0 is untouched.
        status = e2e_cluster.wait_state("evicted", "Succeeded", timeout=300)
        assert status["restartCount"] == 1
        assert status.get("failureRestarts", 0) == 0
        assert {p.metadata.labels["tfjob.dev/attempt"] for p in e2e_cluster.pods("evicted")} == {"1"}
        # The other job shared the cluster and succeeded too; its PS never exits by itself: the operator deleted
        # it, so nothing of the job is left running.
        e2e_cluster.wait_state("ps-strategy", "Succeeded", timeout=360)
        wait_for(lambda: all(p != "Running" for p in e2e_cluster.pod_phases("ps-strategy").values()), timeout=30,
                 what="no ps-strategy pod left running")
        assert "ps-strategy-ps-0" not in e2e_cluster.pod_phases("ps-strategy")
