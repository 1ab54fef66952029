"""The chaos invariants catch what they are for (pure, over made-up records)."""

from __future__ import annotations

from typing import Any

from chaos_world import Seen, duplicate_pods, leaked_pods, partial_gangs, unconverged


def pod(name: str, uid: str, attempt: str = "0", node: str | None = None, phase: str = "Pending",
        job: str = "j") -> dict[str, Any]:
    labels = {"tfjob.dev/job-name": job, "tfjob.dev/replica-type": "worker",
              "tfjob.dev/replica-index": name[-1], "tfjob.dev/attempt": attempt}
    return {"metadata": {"name": name, "uid": uid, "labels": labels}, "spec": {"nodeName": node},
            "status": {"phase": phase}}


def job(state: str | None, reason: str | None = None, policy: str | None = None) -> dict[str, Any]:
    conditions = [{"type": state, "status": "True", "reason": reason}] if state else []
    return {"metadata": {"name": "j"}, "spec": {"runPolicy": {"cleanPodPolicy": policy} if policy else {}},
            "status": {"state": state, "conditions": conditions}}


def added(obj: dict[str, Any], kind: str = "ADDED") -> Seen:
    return Seen(0.0, "pods", kind, obj)


def test_a_replica_created_twice_in_one_attempt_is_a_duplicate() -> None:
    assert duplicate_pods([added(pod("j-worker-0", "a")), added(pod("j-worker-0", "b"))]) == ["j/worker/0/0: 2 pods"]
    # A new attempt is a new pod, not a duplicate.
    assert duplicate_pods([added(pod("j-worker-0", "a")), added(pod("j-worker-0", "b", attempt="1"))]) == []


def test_a_gang_with_some_pods_bound_and_others_never_is_partial() -> None:
    events = [added(pod("j-worker-0", "a", node="n1"), "MODIFIED"), added(pod("j-worker-1", "b"))]
    assert partial_gangs(events, {"j": 2}) == ["j attempt 0: 1 of 2 pods bound (['j-worker-0'])"]
    events.append(added(pod("j-worker-1", "b", node="n2"), "MODIFIED"))
    assert partial_gangs(events, {"j": 2}) == []


def test_a_job_converges_only_when_finished_and_a_failure_has_a_reason() -> None:
    assert unconverged({"j": job("Running")}, ["j"]) == ["j: Running"]
    assert unconverged({"j": job("Failed")}, ["j"]) == ["j: Failed without a reason"]
    assert unconverged({"j": job("Failed", "BackoffLimitExceeded")}, ["j"]) == []
    assert unconverged({"j": None}, ["j"]) == []  # deleted by its TTL after finishing


def test_pods_left_after_the_finish_are_judged_by_the_clean_pod_policy() -> None:
    running = {"j-worker-0": pod("j-worker-0", "a", phase="Running")}
    done = {"j-worker-0": pod("j-worker-0", "a", phase="Succeeded")}
    assert leaked_pods({"j": job("Succeeded", "JobSucceeded")}, running) == ["j-worker-0: Running under "
                                                                            "cleanPodPolicy Running"]
    assert leaked_pods({"j": job("Succeeded", "JobSucceeded")}, done) == []
    assert leaked_pods({"j": job("Succeeded", "JobSucceeded", "All")}, done) != []
    assert leaked_pods({"j": job("Succeeded", "JobSucceeded", "None")}, running) == []
    assert leaked_pods({"j": job("Running")}, running) == []  # not finished: nothing to clean yet
    assert leaked_pods({"j": None}, done) == ["j-worker-0: its job was deleted"]
