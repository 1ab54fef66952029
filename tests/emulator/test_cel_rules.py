"""CRD validation rules (x-kubernetes-validations, CEL) enforced by the API server, through the official
client: a broken rule is 422 naming the field and the rule's message; transition rules see oldSelf."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from emulator_helpers import WIDGET_CRD

from kubelocal.apiserver.plugins.cel_rules import violations

G, V = "emulator.test", "v1"
ROOT = Path(__file__).resolve().parents[2]


def _ruled_crd() -> dict[str, Any]:
    crd = copy.deepcopy(WIDGET_CRD)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    spec["properties"]["maxReplicas"] = {"type": "integer"}
    spec["x-kubernetes-validations"] = [
        {"rule": "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
         "message": "replicas must not exceed maxReplicas"},
        {"rule": "self.size == oldSelf.size", "message": "size is immutable", "fieldPath": ".size"},
    ]
    schema["x-kubernetes-validations"] = [{"rule": "self.metadata.name.size() <= 10"}]
    return crd


@pytest.fixture
def ruled(client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(_ruled_crd())
    return kubernetes.client.CustomObjectsApi(client)


def _widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{V}", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": "small", **spec}}


def _refusal(call: Any, *args: Any) -> tuple[int, str]:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        call(*args)
    return refused.value.status, json.loads(refused.value.body)["message"]


def test_a_broken_rule_is_422_naming_the_field_and_the_message(ruled: kubernetes.client.CustomObjectsApi) -> None:
    status, message = _refusal(ruled.create_namespaced_custom_object, G, V, "default", "widgets",
                               _widget("w", replicas=5, maxReplicas=2))
    assert status == 422
    assert 'spec: Invalid value: "object": replicas must not exceed maxReplicas' in message
    ruled.create_namespaced_custom_object(G, V, "default", "widgets", _widget("w", replicas=2, maxReplicas=2))


def test_a_rule_without_a_message_quotes_the_rule(ruled: kubernetes.client.CustomObjectsApi) -> None:
    status, message = _refusal(ruled.create_namespaced_custom_object, G, V, "default", "widgets",
                               _widget("much-too-long"))
    assert status == 422 and "failed rule: self.metadata.name.size() <= 10" in message


def test_a_transition_rule_refuses_a_change_on_update(ruled: kubernetes.client.CustomObjectsApi) -> None:
    ruled.create_namespaced_custom_object(G, V, "default", "widgets", _widget("w"))
    status, message = _refusal(ruled.patch_namespaced_custom_object, G, V, "default", "widgets", "w",
                               {"spec": {"size": "large"}})
    assert status == 422 and "spec.size" in message and "size is immutable" in message
    ruled.patch_namespaced_custom_object(G, V, "default", "widgets", "w", {"spec": {"replicas": 3}})


def test_the_tfjob_crd_pod_limit_rule_holds_with_the_kubernetes_sum_function() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "tfjob.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    replicas = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"]
    assert violations(replicas, {"Worker": {"replicas": 999}, "Chief": {}}) == []
    (found,) = violations(replicas, {"Worker": {"replicas": 1000}, "Chief": {}})
    assert "more than 1000 pods in all" in found[2]


def test_a_crd_whose_rule_does_not_compile_is_refused_naming_the_rule(client: kubernetes.client.ApiClient) -> None:
    crd = _ruled_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"][1][
        "rule"] = "self.size =="
    ext = kubernetes.client.ApiextensionsV1Api(client)
    status, message = _refusal(ext.create_custom_resource_definition, crd)
    assert status == 422
    assert ("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule: "
            'Invalid value: "self.size ==": compilation failed') in message
    assert _refusal(ext.read_custom_resource_definition, crd["metadata"]["name"])[0] == 404


def test_a_crd_whose_rule_uses_the_optional_syntax_installs_and_its_other_rules_still_hold(
        client: kubernetes.client.ApiClient) -> None:
    """`self.?field` is valid Kubernetes CEL (1.29+) that cel-python cannot parse: the CRD installs as on a
    cluster, objects are accepted (that rule is not enforced here, and the server's log says so), and the CRD's
    other rules are still enforced."""
    crd = _ruled_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"].append(
        {"rule": "self.?maxReplicas.orValue(0) <= 100", "message": "at most 100"})
    kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(crd)
    custom = kubernetes.client.CustomObjectsApi(client)
    custom.create_namespaced_custom_object(G, V, "default", "widgets", _widget("w", replicas=1, maxReplicas=2))
    status, message = _refusal(custom.create_namespaced_custom_object, G, V, "default", "widgets",
                               _widget("x", replicas=5, maxReplicas=2))
    assert status == 422 and "replicas must not exceed maxReplicas" in message
