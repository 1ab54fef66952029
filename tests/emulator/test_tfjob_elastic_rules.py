"""The TFJob CRD's elastic rules through the official client against the local API server: spec.elasticPolicy
is refused (422, naming the field) unless 1 ≤ minReplicas ≤ Worker.replicas ≤ maxReplicas and the job has no PS;
an elastic job's Worker.replicas may change while it runs (the operator restarts the gang at that width), other
replica types may not, and the policy is added or removed only while the job is suspended."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
import yaml

from tfjob_operator.api.crd import CRD_PATH

G, V, PLURAL = "tfjob.dev", "v1", "tfjobs"
TEMPLATE = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}


@pytest.fixture
def tfjobs(client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(yaml.safe_load(CRD_PATH.read_text()))
    return kubernetes.client.CustomObjectsApi(client)


def _job(replicas: dict[str, int], policy: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"tfReplicaSpecs": {t: {"replicas": n, "template": TEMPLATE} for t, n in replicas.items()}}
    if policy is not None:
        spec["elasticPolicy"] = policy
    return {"apiVersion": f"{G}/{V}", "kind": "TFJob", "metadata": {"name": "j"}, "spec": spec}


def _create(api: kubernetes.client.CustomObjectsApi, replicas: dict[str, int],
            policy: dict[str, Any] | None) -> dict[str, Any]:
    return dict(api.create_namespaced_custom_object(G, V, "default", PLURAL, _job(replicas, policy)))


def _refused(call: Any) -> str:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        call()
    assert refused.value.status == 422
    return str(json.loads(refused.value.body)["message"])


def _patch(api: kubernetes.client.CustomObjectsApi, spec: dict[str, Any]) -> dict[str, Any]:
    return dict(api.patch_namespaced_custom_object(G, V, "default", PLURAL, "j", {"spec": spec}))


@pytest.mark.parametrize(("replicas", "policy", "expected"), [
    ({"Worker": 1}, {"minReplicas": 2, "maxReplicas": 4},
     "spec.elasticPolicy.minReplicas must be ≤ spec.tfReplicaSpecs.Worker.replicas"),
    ({"Worker": 5}, {"minReplicas": 2, "maxReplicas": 4},
     "spec.tfReplicaSpecs.Worker.replicas must be ≤ spec.elasticPolicy.maxReplicas"),
    ({"Worker": 3}, {"minReplicas": 4, "maxReplicas": 2}, "spec.elasticPolicy.minReplicas must be ≤ maxReplicas"),
    ({"Worker": 2}, {"minReplicas": 0, "maxReplicas": 4}, "spec.elasticPolicy.minReplicas"),
    ({"Worker": 2, "PS": 1}, {"minReplicas": 1, "maxReplicas": 4},
     "spec.elasticPolicy is for MultiWorkerMirroredStrategy jobs"),
], ids=["min-above-replicas", "replicas-above-max", "min-above-max", "min-zero", "with-ps"])
def test_a_bad_elastic_policy_is_refused_naming_the_field(tfjobs: kubernetes.client.CustomObjectsApi,
                                                         replicas: dict[str, int], policy: dict[str, Any],
                                                         expected: str) -> None:
    assert expected in _refused(lambda: _create(tfjobs, replicas, policy))


def test_an_elastic_jobs_worker_replicas_change_while_running_within_min_and_max(
        tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    created = _create(tfjobs, {"Worker": 3}, {"minReplicas": 2, "maxReplicas": 4})
    assert created["spec"]["elasticPolicy"]["scaling"] == "ConstantGlobalBatch"  # the CRD's default
    assert created["spec"]["elasticPolicy"]["resizeCooldownSeconds"] == 300
    assert _patch(tfjobs, {"tfReplicaSpecs": {"Worker": {"replicas": 4}}})["spec"]["tfReplicaSpecs"]["Worker"][
        "replicas"] == 4
    message = _refused(lambda: _patch(tfjobs, {"tfReplicaSpecs": {"Worker": {"replicas": 5}}}))
    assert "spec.tfReplicaSpecs.Worker.replicas must be ≤ spec.elasticPolicy.maxReplicas" in message


def test_an_elastic_jobs_chief_stays_fixed_while_running(tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"Chief": 1, "Worker": 2}, {"minReplicas": 1, "maxReplicas": 4})
    message = _refused(lambda: _patch(tfjobs, {"tfReplicaSpecs": {"Chief": {"replicas": 0}}}))
    assert "spec.tfReplicaSpecs.Chief.replicas cannot change unless the job is suspended" in message


def test_a_rigid_jobs_worker_change_names_elastic_policy_as_the_way(tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"Worker": 2}, None)
    message = _refused(lambda: _patch(tfjobs, {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}))
    assert "spec.tfReplicaSpecs.Worker.replicas cannot change" in message and "spec.elasticPolicy" in message


def test_elastic_policy_is_added_or_removed_only_while_suspended(tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"Worker": 2}, None)
    message = _refused(lambda: _patch(tfjobs, {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 4}}))
    assert "spec.elasticPolicy cannot be added or removed unless the job is suspended" in message
    _patch(tfjobs, {"runPolicy": {"suspend": True}, "elasticPolicy": {"minReplicas": 1, "maxReplicas": 4}})
    job = _patch(tfjobs, {"runPolicy": {"suspend": False}})
    assert job["spec"]["elasticPolicy"]["maxReplicas"] == 4
    message = _refused(lambda: _patch(tfjobs, {"elasticPolicy": None}))
    assert "spec.elasticPolicy cannot be added or removed" in message
