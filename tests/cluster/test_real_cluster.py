"""The end-to-end scenarios on a real cluster (kind, k3d or yours) with the operator installed by Helm."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any, TypeVar

import polling
import pytest
import yaml
from cluster_helpers import REPO, RealCluster

pytestmark = pytest.mark.cluster
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    return polling.wait_for(predicate, timeout, interval=2, what=what)


def status(cluster: RealCluster, name: str) -> dict[str, Any]:
    job = cluster.custom.get_namespaced_custom_object("tfjob.dev", "v1", cluster.namespace, "tfjobs", name)
    return job.get("status") or {}


def apply(cluster: RealCluster, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / ".venv" / "bin" / "kubectl"), "--kubeconfig", cluster.kubeconfig, "apply",
                           "-f", "-"], input=yaml.safe_dump(manifest), capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(900)
def test_mnist_trains_and_succeeds(real_cluster: RealCluster) -> None:
    result = apply(real_cluster, real_cluster.example("mnist-cpu", "mnist"))
    assert result.returncode == 0, result.stderr
    final = wait_for(lambda: (s := status(real_cluster, "mnist")).get("state") in ("Succeeded", "Failed") and s,
                     600, "mnist to finish")
    assert final["state"] == "Succeeded", final


@pytest.mark.timeout(900)
def test_deleted_worker_restarts_the_gang_and_the_job_succeeds(real_cluster: RealCluster) -> None:
    assert apply(real_cluster, real_cluster.example("mnist-cpu", "lost")).returncode == 0
    wait_for(lambda: status(real_cluster, "lost").get("state") == "Running", 300, "lost to run")
    wait_for(lambda: "epoch 1/" in real_cluster.core.read_namespaced_pod_log("lost-worker-0", real_cluster.namespace),
             300, "the first epoch")
    real_cluster.core.delete_namespaced_pod("lost-worker-1", real_cluster.namespace)
    final = wait_for(lambda: (s := status(real_cluster, "lost")).get("state") in ("Succeeded", "Failed") and s,
                     600, "lost to finish")
    assert final["state"] == "Succeeded" and final["restartCount"] == 1 and final.get("failureRestarts", 0) == 0


def test_invalid_job_is_refused_at_apply_naming_the_field(real_cluster: RealCluster) -> None:
    bad = real_cluster.example("mnist-cpu", "bad")
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": real_cluster.worker_image})
    result = apply(real_cluster, bad)
    assert result.returncode != 0
    assert 'no container named "tensorflow"' in result.stderr
    pods = real_cluster.core.list_namespaced_pod(real_cluster.namespace, label_selector="tfjob.dev/job-name=bad")
    assert not pods.items
