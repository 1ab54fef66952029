"""The operator's index of TFJob pods (tfjob_operator.controller.pod_index): the latest kept body of each pod, by
job."""

from __future__ import annotations

from typing import Any

from tfjob_operator.api import constants
from tfjob_operator.controller.pod_index import PodIndex, job_of


def pod(name: str, job: str | None = "j", phase: str = "Pending", namespace: str = "ns") -> dict[str, Any]:
    labels = {constants.LABEL_JOB_NAME: job} if job else {}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "status": {"phase": phase}}


def phases(index: PodIndex, key: tuple[str, str]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["status"]["phase"] for p in index.get(key) or []}


def test_each_pod_is_kept_once_at_its_latest_version_and_a_job_without_pods_leaves_the_index() -> None:
    index = PodIndex()
    key = ("ns", "j")
    index.apply(key, "ADDED", pod("j-worker-0"))
    index.apply(key, "ADDED", pod("j-worker-1"))
    index.apply(key, "MODIFIED", pod("j-worker-0", phase="Running"))
    assert phases(index, key) == {"j-worker-0": "Running", "j-worker-1": "Pending"}
    index.apply(key, "DELETED", pod("j-worker-0"))
    index.apply(key, "DELETED", pod("j-worker-0"))  # a relist may report a deletion the watch already did
    assert phases(index, key) == {"j-worker-1": "Pending"}
    index.apply(key, "DELETED", pod("j-worker-1"))
    assert key not in index and list(index) == []


def test_kept_pods_carry_no_managed_fields_and_are_not_the_watched_objects() -> None:
    index = PodIndex()
    watched = pod("j-worker-0")
    index.apply(("ns", "j"), "ADDED", watched)
    (kept,) = index[("ns", "j")]
    assert "managedFields" not in kept["metadata"] and kept["status"] is not watched["status"]


def test_a_pod_belongs_to_the_job_its_label_names_in_its_own_namespace() -> None:
    assert job_of(pod("a", job="train", namespace="team")) == ("team", "train")
    assert job_of({"metadata": {"name": "b", "labels": {constants.LABEL_JOB_NAME: "x"}}}) == ("default", "x")
    assert job_of(pod("c", job=None)) is None


def test_a_pod_deleted_with_a_cause_leaves_its_last_body_until_its_name_comes_again_or_the_job_goes() -> None:
    index = PodIndex()
    key = ("ns", "j")
    preempted = pod("j-worker-0", phase="Failed")
    preempted["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                          "reason": "PreemptionByScheduler", "message": "preempted by p"}]
    for p in (preempted, pod("j-worker-1", phase="Running")):
        index.apply(key, "ADDED", p)
        index.apply(key, "DELETED", p)
    assert key not in index
    (name, last), = index.last_words(key).items()  # a plain deletion says nothing worth keeping
    assert name == "j-worker-0" and last["status"]["conditions"][0]["reason"] == "PreemptionByScheduler"
    index.apply(key, "ADDED", pod("j-worker-0"))  # the next attempt's pod of the same name
    assert index.last_words(key) == {}
    index.apply(key, "DELETED", preempted)
    index.forget(key)
    assert index.last_words(key) == {}
