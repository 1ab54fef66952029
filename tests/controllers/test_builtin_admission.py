"""Admission as kube-apiserver's, through the official client: ServiceAccount admission, defaulting of
the built-in workload kinds, immutable fields and the selector/template rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes
import pytest
from controller_helpers import read, sleeper, unique
from polling import wait_for

from kubelocal.apiserver.plugins.builtin_validation import causes

NS = "default"
Core = kubernetes.client.CoreV1Api
Apps = kubernetes.client.AppsV1Api
Batch = kubernetes.client.BatchV1Api


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {**sleeper()["spec"], **spec}}


def _deployment(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    template = sleeper()
    template["metadata"]["labels"] = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}}, "template": template}}


def _refused(call: Any, *args: Any) -> tuple[int, str]:
    """The status code and the message of the Status the server refused with."""
    with pytest.raises(kubernetes.client.ApiException) as refused:
        call(*args)
    return refused.value.status, json.loads(refused.value.body)["message"]


def test_a_pod_naming_a_missing_service_account_is_forbidden(core: Core) -> None:
    status, message = _refused(core.create_namespaced_pod, NS, _pod(unique("nosa"), serviceAccountName="robot"))
    assert status == 403
    assert 'error looking up service account default/robot: serviceaccount "robot" not found' in message


def test_a_pod_without_a_service_account_runs_as_default(core: Core) -> None:
    name = unique("sa")
    core.create_namespaced_pod(NS, _pod(name))
    pod = read(core.read_namespaced_pod, name, NS)
    assert pod is not None and pod["spec"]["serviceAccountName"] == "default"
    core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_a_pod_in_a_brand_new_namespace_is_admitted_once_its_default_account_exists(core: Core) -> None:
    ns = unique("fresh")
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for(lambda: read(core.read_namespaced_service_account, "default", ns), what="the default SA")
    core.create_namespaced_pod(ns, _pod("first"))


def test_a_deployment_reads_back_with_kubernetes_defaults(apps: Apps) -> None:
    name = unique("defaults")
    apps.create_namespaced_deployment(NS, _deployment(name))
    spec = (read(apps.read_namespaced_deployment, name, NS) or {})["spec"]
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    pod_spec = spec["template"]["spec"]
    assert (pod_spec["restartPolicy"], pod_spec["dnsPolicy"], pod_spec["schedulerName"]) == (
        "Always", "ClusterFirst", "default-scheduler")
    assert pod_spec["containers"][0]["terminationMessagePath"] == "/dev/termination-log"


def test_a_deployment_whose_selector_misses_its_template_labels_is_invalid(apps: Apps) -> None:
    name = unique("mismatch")
    status, message = _refused(apps.create_namespaced_deployment, NS, _deployment(name, labels={"app": "other"}))
    assert status == 422
    assert "spec.template.metadata.labels" in message and "`selector` does not match template `labels`" in message


def test_a_deployment_selector_cannot_change(apps: Apps) -> None:
    name = unique("selector")
    apps.create_namespaced_deployment(NS, _deployment(name))
    changed = {"spec": {"selector": {"matchLabels": {"app": name, "tier": "x"}},
                        "template": {"metadata": {"labels": {"app": name, "tier": "x"}}}}}
    status, message = _refused(apps.patch_namespaced_deployment, name, NS, changed)
    assert status == 422 and "spec.selector" in message and "field is immutable" in message


def test_a_service_keeps_its_cluster_ip_and_refuses_a_new_one(core: Core) -> None:
    name = unique("svc")
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}
    created = read(core.read_namespaced_service, core.create_namespaced_service(NS, body).metadata.name, NS)
    assert created is not None
    assert created["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    ip = created["spec"]["clusterIP"]
    replaced = copy.deepcopy(body)
    replaced["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    kept = core.replace_namespaced_service(name, NS, replaced)
    assert kept.spec.cluster_ip == ip, "a replace without clusterIP keeps the allocated one"
    status, message = _refused(core.patch_namespaced_service, name, NS, {"spec": {"clusterIP": "10.96.99.99"}})
    assert status == 422 and "spec.clusterIP" in message and "field is immutable" in message


def test_a_job_template_cannot_change(batch: Batch) -> None:
    name = unique("jobtpl")
    template = sleeper(1)
    template["spec"]["restartPolicy"] = "Never"
    batch.create_namespaced_job(NS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                                     "spec": {"template": template}})
    job = read(batch.read_namespaced_job, name, NS)
    assert job is not None and (job["spec"]["backoffLimit"], job["spec"]["completions"]) == (6, 1)
    status, message = _refused(batch.patch_namespaced_job, name, NS,
                   {"spec": {"template": {"metadata": {"labels": {"new": "label"}}}}})
    assert status == 422 and "spec.template" in message


MATCHING = {"selector": {"matchLabels": {"a": "1"}}, "template": {"metadata": {"labels": {"a": "1", "b": "2"}}}}


@pytest.mark.parametrize(("key", "spec", "old_spec", "fields"), [
    (("apps", "deployments"), MATCHING, None, []),
    (("apps", "deployments"), {**MATCHING, "selector": {}}, None, ["spec.selector"]),
    (("apps", "deployments"), {**MATCHING, "selector": {"matchExpressions": [
        {"key": "b", "operator": "NotIn", "values": ["2"]}]}}, None, ["spec.template.metadata.labels"]),
    (("apps", "replicasets"), {**MATCHING, "selector": {"matchLabels": {"a": "2"}}}, None,
     ["spec.template.metadata.labels"]),
    (("batch", "jobs"), {"template": {}}, None, []),
    (("batch", "jobs"), {"manualSelector": True, **MATCHING, "selector": {"matchLabels": {"z": "1"}}}, None,
     ["spec.template.metadata.labels"]),
    (("batch", "jobs"), {"completions": 2, "template": {}}, {"completions": 1, "template": {}}, ["spec.completions"]),
    (("", "services"), {"clusterIP": "10.0.0.2"}, {"clusterIP": "10.0.0.1"}, ["spec.clusterIP"]),
    (("", "services"), {"clusterIP": "10.0.0.1"}, {"clusterIP": "10.0.0.1"}, []),
])
def test_builtin_validation_rules(key: tuple[str, str], spec: dict[str, Any], old_spec: dict[str, Any] | None,
                                  fields: list[str]) -> None:
    old = None if old_spec is None else {"spec": old_spec}
    assert [c[0] for c in causes(key, {"spec": spec}, old)] == fields
