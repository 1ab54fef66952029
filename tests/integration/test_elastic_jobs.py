"""Elastic workers through the operator against the local control plane: an elastic tfjob.dev/v1 job's
Worker.replicas edit restarts the gang at the new width (a resize, not a failure); a kubeflow.org/v1 PS job with
enableDynamicWorker adds and removes workers one by one without restarting the others, with Kubeflow's sparse
TF_CONFIG. (The width the gang view says fits is the builtin gang's, tested with it.)"""

from __future__ import annotations

import json
import uuid
from typing import Any

from operator_harness import Cluster, Operator, py, replica
from polling import wait_for

KF = "kubeflow.org"
FOREVER = py("import time; time.sleep(600)")


#: The harness's cluster and operator (tests/integration/conftest.py) with Kubeflow's CRD and API served.
KUBEFLOW_CRD = True
OPERATOR_SETTINGS = {"TFJOB_KUBEFLOW_API": "all"}


def _create(cluster: Cluster, group: str, spec: dict[str, Any]) -> str:
    name = f"j{uuid.uuid4().hex[:8]}"
    cluster.custom.create_namespaced_custom_object(group, "v1", "default", "tfjobs", {
        "apiVersion": f"{group}/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec})
    return name


def _patch_workers(cluster: Cluster, group: str, name: str, replicas: int) -> None:
    cluster.custom.patch_namespaced_custom_object(group, "v1", "default", "tfjobs", name, {
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas}}}})


def _running(cluster: Cluster, name: str) -> dict[str, tuple[str, str]]:
    """Running pods not being deleted: name → (attempt, uid)."""
    return {p.metadata.name: (p.metadata.labels["tfjob.dev/attempt"], p.metadata.uid) for p in cluster.pods(name)
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None}


def test_an_elastic_jobs_worker_edit_restarts_the_gang_at_the_new_width(cluster: Cluster, operator: Operator) -> None:
    name = _create(cluster, "tfjob.dev", {"tfReplicaSpecs": {"Worker": replica(FOREVER, 3)},
                                          "elasticPolicy": {"minReplicas": 2, "maxReplicas": 4}})
    status = cluster.wait_state(name, "Running")
    assert status["elastic"]["summary"] == "3/4 (min 2)" and status["workers"] == "3/3"
    pods = {p.metadata.name: p for p in cluster.pods(name)}
    env = {e.name: e.value for e in pods[f"{name}-worker-0"].spec.containers[0].env}
    assert (env["TFJOB_ELASTIC_SCALING"], env["TFJOB_ELASTIC_REFERENCE_WORKERS"]) == ("ConstantGlobalBatch", "3")
    assert "3/4 (min 2)" in cluster.kubectl("get", "tfjobs.tfjob.dev", name, "-o", "wide")

    _patch_workers(cluster, "tfjob.dev", name, 2)
    wait_for(lambda: sorted(_running(cluster, name)) == [f"{name}-worker-0", f"{name}-worker-1"]
             and {a for a, _ in _running(cluster, name).values()} == {"1"}, 40, what="the gang at 2 as attempt 1")
    status = cluster.wait_state(name, "Running")
    assert (status["restartCount"], status["failureRestarts"]) == (1, 0)
    assert (status["elastic"]["currentReplicas"], status["elastic"]["resizes"]) == (2, 1)
    pods = {p.metadata.name: p for p in cluster.pods(name)}
    env = {e.name: e.value for e in pods[f"{name}-worker-1"].spec.containers[0].env}
    assert len(json.loads(env["TF_CONFIG"])["cluster"]["worker"]) == 2
    assert env["TFJOB_ELASTIC_REFERENCE_WORKERS"] == "3"  # N0 stays the width the job started with
    resized = dict(cluster.wait_events(name, "Resized"))["Resized"]
    assert "3 → 2 workers: spec.tfReplicaSpecs.Worker.replicas set to 2" in resized


def test_dynamic_workers_are_added_and_removed_one_by_one(cluster: Cluster, operator: Operator) -> None:
    name = _create(cluster, KF, {"enableDynamicWorker": True, "tfReplicaSpecs": {
        "PS": replica(FOREVER, 1), "Worker": replica(FOREVER, 2)}})
    wait_for(lambda: len(_running(cluster, name)) == 3, 40, what="PS and 2 workers running")
    before = _running(cluster, name)
    pods = {p.metadata.name: p for p in cluster.pods(name)}
    tf_config = json.loads({e.name: e.value for e in pods[f"{name}-worker-1"].spec.containers[0].env}["TF_CONFIG"])
    # The local cluster addresses pods on loopback ports: the shape is Kubeflow's, the addresses are local.
    assert (list(tf_config["cluster"]["worker"]), len(tf_config["cluster"]["ps"])) == (["1"], 1)
    assert tf_config["task"] == {"type": "worker", "index": 1} and "environment" not in tf_config

    _patch_workers(cluster, KF, name, 3)
    wait_for(lambda: f"{name}-worker-2" in _running(cluster, name), 40, what="worker-2 added")
    assert {k: v for k, v in _running(cluster, name).items() if k in before} == before  # the others kept running

    _patch_workers(cluster, KF, name, 1)
    wait_for(lambda: sorted(_running(cluster, name)) == [f"{name}-ps-0", f"{name}-worker-0"], 40,
             what="workers 1 and 2 removed")
    assert _running(cluster, name)[f"{name}-worker-0"] == before[f"{name}-worker-0"]
    cluster.custom.delete_namespaced_custom_object(KF, "v1", "default", "tfjobs", name)
