"""A worker pod deleted mid-epoch (as a drain or a preemption does) on a local cluster with the operator: the
kubelet's SIGTERM makes every worker stop after the same step and the chief back up; the gang restarts and
resumes at that step, mid-epoch, with nothing lost. Worker 1 holds at step HOLD (TFJOB_FAULT_HOLD_AT_STEP) until
the delete's SIGTERM, and the workers exchange their stop flags after every step (TFJOB_STOP_CHECK_EVERY_STEPS=1),
so the stop lands at exactly that step, mid-epoch 1, however fast the machine runs."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import REPO, apply
from operator_harness import Cluster, Operator, local_cluster
from polling import wait_for

from tfjob_operator.client.local.image import worker_image_defaults

STEPS = 20  # per epoch
HOLD = 8  # the step worker 1 holds after, mid-epoch 1: the agreed stop


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with local_cluster(tmp_path / "cluster", nodes="1x{cpu:64,memory:128Gi}", image=worker_image_defaults()) as c:
        op = Operator(c.kubeconfig, tmp_path / "operator.log").start()
        try:
            yield c
        finally:
            op.stop()


def job(name: str, out: Path) -> dict[str, Any]:
    args = ["--epochs", "1", "--steps-per-epoch", str(STEPS), "--log-every-steps", "5", "--output-dir", str(out)]
    container = {"name": "tensorflow", "image": "ghcr.io/tfjob-operator/tfjob-worker:0.1.0",
                 "command": ["python", "-m", "tfjob_worker", *args],
                 "env": [{"name": "PYTHONPATH", "value": str(REPO / "worker_image")},
                         {"name": "TFJOB_FAULT_HOLD_AT_STEP", "value": f"{HOLD} task=worker:1 attempt=0"},
                         {"name": "TFJOB_STOP_CHECK_EVERY_STEPS", "value": "1"}],
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
    return {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                                                   "template": {"spec": {"containers": [container]}}}}}}


def log(cluster: Cluster, pod: str) -> str:
    try:
        return str(cluster.core.read_namespaced_pod_log(pod, "default"))
    except Exception:  # the pod is being replaced: no log yet
        return ""


def follow(cluster: Cluster, pod: str) -> list[str]:
    """What `kubectl logs -f POD` shows, gathered in the background until that pod's container ends (the gang's
    restart replaces the pod under the same name within a second, so reading the log later can miss its end)."""
    lines: list[str] = []
    stream = cluster.core.read_namespaced_pod_log(pod, "default", follow=True, _preload_content=False)

    def gather() -> None:  # chunks as they come (amt=None), until the container ends
        for chunk in stream.stream(amt=None):
            lines.append(chunk.decode(errors="replace"))

    threading.Thread(target=gather, daemon=True).start()
    return lines


@pytest.mark.timeout(420)
def test_a_deleted_worker_pod_stops_the_gang_at_one_step_and_the_restart_resumes_there(
        cluster: Cluster, tmp_path: Path) -> None:
    name = apply(cluster, job("graceful", tmp_path / "out"))
    chief = f"{name}-worker-0"
    wait_for(lambda: f"[tfjob] fault: holding after step {HOLD}" in log(cluster, f"{name}-worker-1"), timeout=240,
             interval=0.5, what=f"worker 1 holding at step {HOLD} of epoch 1")
    followed = follow(cluster, chief)
    deleted = time.monotonic()
    cluster.core.delete_namespaced_pod(f"{name}-worker-1", "default")
    stopped = wait_for(lambda: re.search(r"preempted: stopped after epoch 1 step (\d+) \(samples (\d+)\); saving",
                                         "".join(followed)), timeout=60, interval=0.2, what="the agreed stop")
    print(f"pod deleted -> the chief stopped and backed up: {time.monotonic() - deleted:.2f}s")
    step, samples = int(stopped[1]), int(stopped[2])
    assert (step, samples) == (HOLD, HOLD * 64)

    cluster.wait_state(name, "Succeeded", timeout=300)
    resumed = log(cluster, chief)
    assert f"[tfjob] resumed from backup at epoch 1 step {step} samples {samples}" in resumed, resumed
