"""Kubeflow's `kubeflow.org/v1` TFJobs through the same pure core: who manages a job, what its pods look like,
and a status that stays inside Kubeflow's CRD schema."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.api import apigroups, constants
from tfjob_operator.api.apigroups import KUBEFLOW, TFJOB_DEV, KubeflowApi
from tfjob_operator.api.observed import prior_status
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.reconcile import AnnotateJob, CreateObject, ReconcileOptions, reconcile

ROOT = Path(__file__).resolve().parents[2]
VENDORED = ROOT / "third_party" / "crds"
CHART_COPY = ROOT / "deploy" / "helm" / "tfjob-operator" / "files" / "kubeflow"
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

OFF, MANAGED, ALL = KubeflowApi.OFF, KubeflowApi.MANAGED, KubeflowApi.ALL
OURS, KF, MK = apigroups.MANAGED_BY_TFJOB, apigroups.MANAGED_BY_KUBEFLOW, apigroups.MANAGED_BY_MULTIKUEUE

#: (API, runPolicy.managedBy, TFJOB_KUBEFLOW_API) → managed by this operator?
OWNERSHIP = [
    (TFJOB_DEV, "", OFF, True), (TFJOB_DEV, OURS, OFF, True), (TFJOB_DEV, KF, OFF, True),
    (TFJOB_DEV, MK, ALL, False), (TFJOB_DEV, "example.com/other", OFF, True),  # ours, to refuse as InvalidSpec
    (KUBEFLOW, OURS, OFF, False), (KUBEFLOW, "", OFF, False),
    (KUBEFLOW, OURS, MANAGED, True), (KUBEFLOW, "", MANAGED, False), (KUBEFLOW, KF, MANAGED, False),
    (KUBEFLOW, "example.com/other", MANAGED, False), (KUBEFLOW, MK, MANAGED, False),
    (KUBEFLOW, OURS, ALL, True), (KUBEFLOW, "", ALL, True), (KUBEFLOW, KF, ALL, True), (KUBEFLOW, MK, ALL, False),
    (KUBEFLOW, "example.com/other", ALL, True),
]


@pytest.mark.parametrize(("group", "managed_by", "setting", "ours"), OWNERSHIP,
                         ids=[f"{g.group}-{m or 'unset'}-{s}" for g, m, s, _ in OWNERSHIP])
def test_who_manages_a_job(group: apigroups.ApiGroup, managed_by: str, setting: KubeflowApi, ours: bool) -> None:
    assert apigroups.managed_here(group, managed_by, setting) is ours


def kubeflow_job(managed_by: str | None = None, status: dict[str, Any] | None = None,
                 annotations: dict[str, str] | None = None, policy: str = "ExitCode") -> dict[str, Any]:
    run_policy = {"managedBy": managed_by} if managed_by else {}
    container = {"name": "tensorflow", "image": "tf:1"}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "annotations": annotations or {}},
            "spec": {"runPolicy": run_policy, "tfReplicaSpecs": {"Worker": {
                "replicas": 2, "restartPolicy": policy, "template": {"spec": {"containers": [container]}}}}},
            "status": status or {}}


def test_a_kubeflow_job_is_left_alone_unless_the_setting_makes_it_ours() -> None:
    assert reconcile(kubeflow_job(), [], T0).managed is False
    assert reconcile(kubeflow_job(), [], T0, ReconcileOptions(kubeflow_api=MANAGED)).managed is False
    assert reconcile(kubeflow_job(OURS), [], T0, ReconcileOptions(kubeflow_api=MANAGED)).managed is True


def test_kubeflow_job_pods_belong_to_it_and_carry_the_labels_kubeflow_sdk_selects_by() -> None:
    decision = reconcile(kubeflow_job(), [], T0, ReconcileOptions(kubeflow_api=ALL))
    pods = {c.name: c.obj for c in decision.of_type(CreateObject) if c.kind == "Pod"}
    service = next(c.obj for c in decision.of_type(CreateObject) if c.kind == "Service")
    for obj in (*pods.values(), service):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["apiVersion"], ref["kind"], ref["uid"]) == ("kubeflow.org/v1", "TFJob", "uid-j")
    labels = pods["j-worker-0"]["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-name"] == "j"
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "0"
    assert labels["training.kubeflow.org/job-role"] == "master"  # worker 0 decides success without a chief
    assert "training.kubeflow.org/job-role" not in pods["j-worker-1"]["metadata"]["labels"]
    assert labels[constants.LABEL_JOB_NAME] == "j"  # and ours, which the operator selects by


def test_tfjob_dev_pods_carry_no_kubeflow_labels() -> None:
    job = {**kubeflow_job(), "apiVersion": "tfjob.dev/v1"}
    pods = [c.obj for c in reconcile(job, [], T0).of_type(CreateObject) if c.kind == "Pod"]
    assert not any(k.startswith("training.kubeflow.org/") for p in pods for k in p["metadata"]["labels"])
    assert pods[0]["metadata"]["ownerReferences"][0]["apiVersion"] == "tfjob.dev/v1"


def failed_worker(attempt: int) -> list[dict[str, Any]]:
    def pod(name: str, phase: str, state: dict[str, Any]) -> dict[str, Any]:
        rtype, index = name.split("-")
        return {"metadata": {"name": f"j-{name}", "labels": {
                    constants.LABEL_JOB_NAME: "j", constants.LABEL_REPLICA_TYPE: rtype,
                    constants.LABEL_REPLICA_INDEX: index, constants.LABEL_ATTEMPT: str(attempt)}},
                "spec": {"containers": [{"name": "tensorflow"}]},
                "status": {"phase": phase, "containerStatuses": [{"name": "tensorflow", "state": state}]}}

    return [pod("worker-0", "Running", {"running": {}}),
            pod("worker-1", "Failed", {"terminated": {"exitCode": 137, "finishedAt": "2026-01-01T11:59:59Z"}})]


def test_kubeflow_job_keeps_its_gang_counters_in_annotations_written_before_any_pod_is_deleted() -> None:
    running = {"conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}
    job = kubeflow_job(status=running, annotations=apigroups.counter_annotations(2, 1))
    assert (prior_status(job).restartCount, prior_status(job).failureRestarts) == (2, 1)
    decision = reconcile(job, failed_worker(2), T0, ReconcileOptions(kubeflow_api=ALL))
    assert (decision.status.restartCount, decision.status.failureRestarts) == (3, 2)
    first = decision.actions[0]
    assert isinstance(first, AnnotateJob) and first.annotations == apigroups.counter_annotations(3, 2)


def status_schema() -> dict[str, Any]:
    crd = yaml.safe_load((VENDORED / "kubeflow.org_tfjobs.yaml").read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"])


def outside_schema(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """Paths of `value` a structural schema would prune (properties it does not declare)."""
    if isinstance(value, dict) and "properties" in schema:
        out = []
        for key, item in value.items():
            if key not in schema["properties"]:
                out.append(f"{path}.{key}")
            else:
                out.extend(outside_schema(item, schema["properties"][key], f"{path}.{key}"))
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return [p for k, v in value.items() for p in outside_schema(v, schema["additionalProperties"], f"{path}.{k}")]
    if isinstance(value, list) and "items" in schema:
        return [p for i, v in enumerate(value) for p in outside_schema(v, schema["items"], f"{path}[{i}]")]
    return []


def test_a_kubeflow_jobs_status_stays_inside_kubeflows_crd_schema() -> None:
    running = {"conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}
    decision = reconcile(kubeflow_job(status=running), failed_worker(0), T0, ReconcileOptions(kubeflow_api=ALL))
    full = decision.status.model_dump(mode="json", exclude_none=True)
    assert outside_schema(full, status_schema())  # ours has more (restartCount, workers, ...): it must be cut
    stored = apigroups.status_for_group(KUBEFLOW, "j", full)
    assert outside_schema(stored, status_schema()) == []
    assert {"conditions", "replicaStatuses", "startTime", "lastReconcileTime"} <= set(stored)
    assert stored["replicaStatuses"]["Worker"]["selector"] == "tfjob.dev/job-name=j,tfjob.dev/replica-type=worker"
    assert [c["type"] for c in stored["conditions"]][-1] == "Restarting"  # Kubeflow's State column: the last one
    assert apigroups.status_for_group(TFJOB_DEV, "j", full) == full


def test_unknown_managed_by_is_refused_naming_the_field_and_the_known_values() -> None:
    job = {**kubeflow_job("example.com/mine"), "apiVersion": "tfjob.dev/v1"}
    with pytest.raises(InvalidSpec) as refused:
        parse_tfjob(job)
    (message,) = refused.value.messages
    assert message.startswith("spec.runPolicy.managedBy: 'example.com/mine'")
    assert all(m in message for m in apigroups.KNOWN_MANAGERS)
    for known in ("", *apigroups.KNOWN_MANAGERS):
        parse_tfjob({**kubeflow_job(known or None), "apiVersion": "tfjob.dev/v1"})


def test_vendored_kubeflow_crd_is_the_published_file_and_the_chart_ships_it_with_its_license() -> None:
    data = (VENDORED / "kubeflow.org_tfjobs.yaml").read_bytes()
    assert hashlib.sha256(data).hexdigest() in (VENDORED / "SOURCES.md").read_text()
    assert (CHART_COPY / "kubeflow.org_tfjobs.yaml").read_bytes() == data
    assert "Apache License" in (CHART_COPY / "LICENSE").read_text()
    crd = yaml.safe_load(data)
    assert (crd["metadata"]["name"], [v["name"] for v in crd["spec"]["versions"]]) == ("tfjobs.kubeflow.org", ["v1"])
    json.dumps(crd)  # plain data: the chart templates it with toYaml


def test_a_stored_kubeflow_status_reads_back_as_the_status_written() -> None:
    running = {"conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}
    decision = reconcile(kubeflow_job(status=running), failed_worker(0), T0, ReconcileOptions(kubeflow_api=ALL))
    stored = apigroups.status_for_group(KUBEFLOW, "j", decision.status.model_dump(mode="json"))
    annotations = apigroups.counter_annotations(decision.status.restartCount, decision.status.failureRestarts)
    again = prior_status(kubeflow_job(status=stored, annotations=annotations))  # type: ignore[arg-type]
    assert again.conditions == decision.status.conditions
    assert again.replicaStatuses["Worker"].active == decision.status.replicaStatuses["Worker"].active
    assert (again.restartCount, again.failureRestarts) == (1, 1)
