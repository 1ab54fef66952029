"""End to end: a job shorter than the progress interval (the default 30 s) still ends with its last figures in
status.progress, which the worker runtime left in the chief's termination message. Real TensorFlow workers."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import apply, example
from operator_harness import Cluster


@pytest.mark.timeout(300)
def test_a_job_shorter_than_the_progress_interval_ends_with_its_last_figures(e2e_cluster: Cluster) -> None:
    manifest = example("mnist-cpu")
    manifest["metadata"]["name"] = "short"
    container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["args"] = ["--model", "digits-mlp", "--epochs", "2", "--steps-per-epoch", "5",
                         "--output-dir", "/data/short"]
    apply(e2e_cluster, manifest)
    status = e2e_cluster.wait_state("short", "Succeeded", timeout=240)
    progress = status["progress"]
    assert (progress["epoch"], progress["epochs"], progress["step"], progress["summary"]) == (2, 2, 10, "done")
    assert progress["examplesPerSecond"] > 0 and progress["lastCheckpointTime"].endswith("Z")
    chief = e2e_cluster.core.read_namespaced_pod("short-worker-0", "default")
    message = json.loads(chief.status.container_statuses[0].state.terminated.message)  # as a real kubelet reports
    assert (message["tfjob_worker_epoch"], message["tfjob_worker_global_step"]) == (2, 10)
