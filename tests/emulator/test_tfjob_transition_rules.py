"""The TFJob CRD's transition rules through the official client: the API server refuses a `replicas` change of a
job that is not suspended (422 naming the field and how to apply the change), and takes it while suspended."""

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


def _create(api: kubernetes.client.CustomObjectsApi, replicas: dict[str, Any], **run_policy: Any) -> str:
    specs = {rtype: {"replicas": n, "template": TEMPLATE} for rtype, n in replicas.items()}
    api.create_namespaced_custom_object(G, V, "default", PLURAL, {
        "apiVersion": f"{G}/{V}", "kind": "TFJob", "metadata": {"name": "j"},
        "spec": {"tfReplicaSpecs": specs, "runPolicy": run_policy}})
    return "j"


def _patch(api: kubernetes.client.CustomObjectsApi, spec: dict[str, Any]) -> dict[str, Any]:
    return dict(api.patch_namespaced_custom_object(G, V, "default", PLURAL, "j", {"spec": spec}))


def _refusal(api: kubernetes.client.CustomObjectsApi, spec: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        _patch(api, spec)
    return refused.value.status, json.loads(refused.value.body)["message"]


@pytest.mark.parametrize(("rtype", "spec_key"), [("Worker", "Worker"), ("PS", "PS"), ("Chief", "master")])
def test_changing_replicas_of_a_job_not_suspended_is_refused_naming_the_field(
        tfjobs: kubernetes.client.CustomObjectsApi, rtype: str, spec_key: str) -> None:
    _create(tfjobs, {spec_key: 1, "Worker": 2} if spec_key != "Worker" else {"Worker": 2})
    status, message = _refusal(tfjobs, {"tfReplicaSpecs": {spec_key: {"replicas": 3}}})
    assert status == 422
    assert f"spec.tfReplicaSpecs.{rtype}.replicas cannot change unless the job is suspended" in message
    assert "set spec.runPolicy.suspend to true" in message
    assert tfjobs.get_namespaced_custom_object(G, V, "default", PLURAL, "j")["spec"]["tfReplicaSpecs"][spec_key][
        "replicas"] != 3


def test_adding_a_replica_type_to_a_job_not_suspended_is_refused(tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"Worker": 2})
    status, message = _refusal(tfjobs, {"tfReplicaSpecs": {"Evaluator": {"replicas": 1, "template": TEMPLATE}}})
    assert status == 422 and "spec.tfReplicaSpecs.Evaluator.replicas cannot change" in message


def test_a_key_in_an_unusual_case_is_held_to_the_same_rule(tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"wOrKeR": 2})
    status, message = _refusal(tfjobs, {"tfReplicaSpecs": {"wOrKeR": {"replicas": 3}}})
    assert status == 422 and "spec.tfReplicaSpecs.<type>.replicas cannot change" in message


def test_replicas_change_while_suspending_while_suspended_or_when_resuming(
        tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"Worker": 2})
    _patch(tfjobs, {"runPolicy": {"suspend": True}, "tfReplicaSpecs": {"Worker": {"replicas": 3}}})
    _patch(tfjobs, {"tfReplicaSpecs": {"Worker": {"replicas": 4}}})
    job = _patch(tfjobs, {"runPolicy": {"suspend": False}, "tfReplicaSpecs": {"Worker": {"replicas": 5}}})
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 5
    assert _refusal(tfjobs, {"tfReplicaSpecs": {"Worker": {"replicas": 6}}})[0] == 422


def test_other_changes_of_a_running_job_are_taken(tfjobs: kubernetes.client.CustomObjectsApi) -> None:
    _create(tfjobs, {"Worker": 2}, backoffLimit=1)
    job = _patch(tfjobs, {"runPolicy": {"backoffLimit": 3, "ttlSecondsAfterFinished": 60}})
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3
