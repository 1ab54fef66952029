"""A job whose reconcile keeps raising is failed with the error named after a bounded number of attempts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tfjob_operator.api import CleanPodPolicy, RunPolicy
from tfjob_operator.api.constants import LABEL_JOB_NAME
from tfjob_operator.controller.reconcile_errors import (
    MAX_UNEXPECTED_ERRORS,
    REASON,
    give_up,
    gives_up,
    not_authorized_delay,
)
from tfjob_operator.reconcile import DeleteJob, DeletePod, EmitEvent

NOW = datetime(2026, 11, 24, 20, 0, tzinfo=UTC)


@pytest.mark.parametrize(("failures", "expected"), [(1, False), (MAX_UNEXPECTED_ERRORS - 1, False),
                                                    (MAX_UNEXPECTED_ERRORS, True), (MAX_UNEXPECTED_ERRORS + 7, True)])
def test_retries_are_bounded(failures: int, expected: bool) -> None:
    assert gives_up(failures) is expected


def test_a_refusal_by_the_authorizer_is_retried_ever_more_slowly_up_to_a_minute() -> None:
    queue = [min(0.5 * 2 ** n, 10.0) for n in range(1, 9)]  # the work queue's own back-off (defaults)
    assert [not_authorized_delay(n, d) for n, d in enumerate(queue, 1)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert not_authorized_delay(1, 10.0) == 10.0  # never sooner than the queue's own back-off


def test_giving_up_fails_the_job_naming_the_error_with_a_warning_event() -> None:
    job = {"metadata": {"name": "m", "namespace": "default"}, "spec": {},
           "status": {"conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}}
    decision = give_up(job, TypeError("'int' object is not iterable"), 5, NOW)
    failed = next(c for c in decision.status.conditions if c.type == "Failed")
    running = next(c for c in decision.status.conditions if c.type == "Running")
    assert (failed.status, failed.reason, running.status) == ("True", REASON, "False")
    assert "TypeError: 'int' object is not iterable" in (failed.message or "")
    assert decision.status.state == "Failed" and decision.status.completionTime
    (event,) = decision.of_type(EmitEvent)
    assert (event.type, event.reason) == ("Warning", REASON)


def test_a_finished_job_keeps_its_outcome() -> None:
    job = {"metadata": {"name": "m"}, "status": {"conditions": [{"type": "Succeeded", "status": "True",
                                                                  "reason": "JobSucceeded"}]}}
    decision = give_up(job, RuntimeError("x"), 9, NOW)
    assert [(c.type, c.reason) for c in decision.status.conditions] == [("Succeeded", "JobSucceeded")]
    assert decision.of_type(EmitEvent) == []


def _pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": f"m-{name}", "labels": {LABEL_JOB_NAME: "m"},
                         "ownerReferences": [{"uid": "uid-m", "controller": True, "kind": "TFJob", "name": "m"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "tensorflow"}]}, "status": {"phase": phase}}


PODS = [_pod("worker-0", "Running"), _pod("worker-1", "Succeeded"), _pod("ps-0", "Pending")]
RUNNING_JOB = {"metadata": {"name": "m", "uid": "uid-m"}, "spec": {},
               "status": {"conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}}
SUCCEEDED_JOB = {**RUNNING_JOB, "status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "X"}],
                                           "completionTime": "2026-11-24T19:59:00Z"}}


@pytest.mark.parametrize(("job", "policy", "deleted"), [
    (RUNNING_JOB, CleanPodPolicy.RUNNING, ["m-worker-0", "m-ps-0"]),
    (RUNNING_JOB, CleanPodPolicy.ALL, ["m-worker-0", "m-worker-1", "m-ps-0"]),
    (RUNNING_JOB, CleanPodPolicy.NONE, []),
    (RUNNING_JOB, None, ["m-worker-0", "m-ps-0"]),  # a spec that does not parse: the running pods, as InvalidSpec
    (SUCCEEDED_JOB, CleanPodPolicy.ALL, ["m-worker-0", "m-worker-1", "m-ps-0"]),  # finished before: cleaned too
], ids=["running", "all", "none", "unparsed-spec", "already-finished"])
def test_giving_up_cleans_the_pods_per_clean_pod_policy(job: dict[str, Any], policy: CleanPodPolicy | None,
                                                        deleted: list[str]) -> None:
    run_policy = None if policy is None else RunPolicy(cleanPodPolicy=policy)
    decision = give_up(job, RuntimeError("x"), 5, NOW, PODS, run_policy)
    assert [a.name for a in decision.of_type(DeletePod)] == deleted


def test_giving_up_honours_the_ttl_of_the_failed_job() -> None:
    later = give_up(RUNNING_JOB, RuntimeError("x"), 5, NOW, PODS, RunPolicy(ttlSecondsAfterFinished=60))
    assert later.requeue_after == pytest.approx(60) and later.of_type(DeleteJob) == []
    gone = give_up(RUNNING_JOB, RuntimeError("x"), 5, NOW, PODS, RunPolicy(ttlSecondsAfterFinished=0))
    assert len(gone.of_type(DeleteJob)) == 1
