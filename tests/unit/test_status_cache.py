"""The controller's status cache (tfjob_operator.controller.status_cache): what it writes now, what it holds back
and for how long, and how its own writes are laid over a watch that trails them."""

from __future__ import annotations

from typing import Any

import pytest

from tfjob_operator.api import constants
from tfjob_operator.api.observed import view_job
from tfjob_operator.controller.status_cache import HOLD_MOST_SECONDS, HOLD_SECONDS, JobRecord, StatusCache
from tfjob_operator.reconcile.observe import awaits_start


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def job(uid: str = "uid-1", status: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    worker = {"replicas": 2, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}}
    return {"apiVersion": "tfjob.dev/v1", "kind": "TFJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": uid, "annotations": annotations or {}},
            "spec": {"tfReplicaSpecs": {"Worker": worker}}, "status": status or {}}


def cond(ctype: str, status: str = "True") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": "X", "message": ""}


CREATED = {"state": "Created", "conditions": [cond("Created")]}
RUNNING = {"state": "Running", "conditions": [cond("Created"), cond("Running")]}


def written_as(status: dict[str, Any], clock: Clock | None = None) -> JobRecord:
    record = JobRecord(clock or Clock())
    record.read("uid-1", lambda: status)
    return record


def test_a_status_equal_to_the_written_one_is_not_written() -> None:
    plan = written_as(RUNNING).plan_write("uid-1", dict(RUNNING))
    assert (plan.write, plan.held) == (False, None)


@pytest.mark.parametrize("new", [
    pytest.param({**CREATED, "restartCount": 1}, id="an attempt number"),
    pytest.param({**CREATED, "conditions": [cond("Created"), cond("Queued")]}, id="Queued"),
    pytest.param(RUNNING, id="Running"),
    pytest.param({**CREATED, "conditions": [cond("Created"), cond("Failed")]}, id="an outcome"),
])
def test_a_decision_that_must_survive_a_crash_is_written_at_once(new: dict[str, Any]) -> None:
    assert written_as(CREATED).plan_write("uid-1", new).write


def test_a_change_of_pod_counts_alone_waits_for_company_at_most_the_hold() -> None:
    clock = Clock()
    record = written_as(RUNNING, clock)
    counts = {**RUNNING, "replicaStatuses": {"Worker": {"active": 2}}}
    first = record.plan_write("uid-1", counts)
    assert (first.write, first.held) == (False, HOLD_SECONDS)
    clock.now += 0.4
    again = record.plan_write("uid-1", {**counts, "replicaStatuses": {"Worker": {"active": 1}}})
    assert not again.write and again.held == pytest.approx(HOLD_SECONDS - 0.4)  # counted from the first hold
    clock.now += HOLD_SECONDS
    assert record.plan_write("uid-1", counts).write
    record.wrote("uid-1", counts)
    clock.now += 0.1
    assert record.plan_write("uid-1", {**counts, "workers": "2/2"}).held == HOLD_SECONDS  # a new hold


def test_a_hold_lasts_while_the_jobs_pods_move_and_ends_a_second_after_their_last_event() -> None:
    clock = Clock()
    record = written_as({}, clock)
    assert record.plan_write("uid-1", CREATED).held == HOLD_SECONDS
    for _ in range(3):  # created, scheduled, released: each a pod event under a second apart
        clock.now += 0.8
        record.pod_event()
        plan = record.plan_write("uid-1", CREATED)
        assert not plan.write and plan.held == pytest.approx(HOLD_SECONDS)
    clock.now += HOLD_SECONDS  # the pods stopped moving (still Pending): Created is written alone
    assert record.plan_write("uid-1", CREATED).write


def moving_until(record: JobRecord, clock: Clock, bound: float) -> None:
    """A pod event every 0.5 s: Created stays held until the clock reaches `bound`, and is written then."""
    while clock.now < bound - 0.5:
        clock.now += 0.5
        record.pod_event()
        assert not record.plan_write("uid-1", CREATED).write
    clock.now += 0.5
    record.pod_event()
    assert record.plan_write("uid-1", CREATED).write


def test_pods_that_keep_moving_hold_a_change_at_most_the_longest_hold() -> None:
    clock = Clock()
    record = written_as({}, clock)
    record.plan_write("uid-1", CREATED)
    moving_until(record, clock, 100.0 + HOLD_MOST_SECONDS)


def test_pods_awaiting_their_start_hold_created_through_a_slow_release_and_it_joins_running() -> None:
    """On a busy control plane the gang's release and the scheduler's first look take seconds with no pod event:
    Created waits for them (it is no news yet), and goes out with Running in one write."""
    clock = Clock()
    record = written_as({}, clock)
    assert record.plan_write("uid-1", CREATED).held == HOLD_SECONDS  # the pods are being created
    clock.now += 0.5
    record.pod_event()  # created, gated: no event until the release, 4 s later
    plan = record.plan_write("uid-1", CREATED, starting=True)
    assert not plan.write and plan.held == pytest.approx(HOLD_MOST_SECONDS)  # a pod event comes back sooner
    clock.now += 4.0
    record.pod_event()  # released; the scheduler looks 3 s later
    assert not record.plan_write("uid-1", CREATED, starting=True).write
    clock.now += 2.0
    # A reconcile 2 s after the last pod event (its requeue, say): the 1 s rule alone would write Created now.
    assert not record.plan_write("uid-1", CREATED, starting=True).write
    clock.now += 1.0
    record.pod_event()  # bound
    clock.now += 0.5
    record.pod_event()  # running: 8 s after the first hold, each step a second or more after the last
    assert record.written == ("uid-1", {})  # nothing went out before Running: Created rides with it
    assert record.plan_write("uid-1", RUNNING, starting=False).write


def test_the_longest_hold_counts_from_the_pods_last_seen_awaiting_their_start_at_most_twice_over() -> None:
    clock = Clock()
    record = written_as({}, clock)
    record.plan_write("uid-1", CREATED)
    clock.now += 8.0
    record.pod_event()
    record.plan_write("uid-1", CREATED, starting=True)  # last seen waiting 8 s into the hold
    moving_until(record, clock, 100.0 + 8.0 + HOLD_MOST_SECONDS)  # then bound, started... moving all along
    # A start that never comes (a gang release that never comes): written twice the longest hold in.
    stuck = written_as({}, clock)
    start = clock.now
    while not stuck.plan_write("uid-1", CREATED, starting=True).write:
        clock.now += 1.0
        assert clock.now - start <= 2 * HOLD_MOST_SECONDS
    assert clock.now - start == pytest.approx(2 * HOLD_MOST_SECONDS)


def pod(gates: tuple[str, ...] = (), node: str = "", scheduled: tuple[str, str] | None = None, phase: str = "Pending",
        deleting: bool = False, waiting: str = "") -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": scheduled[0], "reason": scheduled[1]}] if scheduled else []
    statuses = [{"name": "tensorflow", "state": {"waiting": {"reason": waiting}}}] if waiting else []
    return {"metadata": {"name": "j-worker-0", **({"deletionTimestamp": "2026-11-27T00:00:00Z"} if deleting else {})},
            "spec": {"schedulingGates": [{"name": g} for g in gates], "nodeName": node or None},
            "status": {"phase": phase, "conditions": conditions, "containerStatuses": statuses}}


@pytest.mark.parametrize(("the_pod", "awaits"), [
    pytest.param(pod((constants.GANG_SCHEDULING_GATE,), scheduled=("False", "SchedulingGated")), True,
                 id="gated for the gang's release"),
    pytest.param(pod(), True, id="released, not yet looked at by the scheduler"),
    pytest.param(pod(scheduled=("False", "SchedulingGated")), True, id="released, the gated mark not yet cleared"),
    pytest.param(pod(("kueue.x-k8s.io/admission",)), False, id="held by Kueue for quota"),
    pytest.param(pod((constants.GANG_SCHEDULING_GATE, "other")), False, id="held by another gate too"),
    pytest.param(pod(scheduled=("False", "Unschedulable")), False, id="no room, the scheduler says"),
    pytest.param(pod(node="n1", scheduled=("True", "")), True, id="bound, not yet reported by its kubelet"),
    pytest.param(pod(node="n1", scheduled=("True", ""), waiting="ContainerCreating"), False,
                 id="being started by its kubelet"),
    pytest.param(pod(node="n1", scheduled=("True", ""), waiting="ImagePullBackOff"), False,
                 id="its image failing to pull"),
    pytest.param(pod(deleting=True), False, id="being deleted"),
    pytest.param(pod(phase="Failed"), False, id="ended"),
])
def test_a_pod_awaits_its_start_only_in_the_control_planes_hands(the_pod: dict[str, Any], awaits: bool) -> None:
    assert awaits_start(the_pod) is awaits


def test_pods_done_awaiting_their_start_do_not_stretch_a_later_hold() -> None:
    clock = Clock()
    record = written_as({}, clock)
    record.plan_write("uid-1", CREATED, starting=True)
    clock.now += 2.0
    record.wrote("uid-1", CREATED)
    clock.now += 30.0
    counts = {**CREATED, "replicaStatuses": {"Worker": {"active": 2}}}
    assert record.plan_write("uid-1", counts).held == HOLD_SECONDS  # a new hold: the old sighting is not its
    clock.now += HOLD_SECONDS
    assert record.plan_write("uid-1", counts).write


def test_a_pod_event_of_a_job_without_a_record_creates_none() -> None:
    cache = StatusCache()
    cache.pod_event(("ns", "j"))
    assert len(cache) == 0


def test_the_created_condition_and_start_fields_alone_are_held_even_on_a_first_write() -> None:
    assert written_as(CREATED).plan_write("uid-1", {**CREATED, "state": "Created", "startTime": "t"}).held
    assert not written_as({}).plan_write("uid-1", CREATED).write  # Created alone may wait for Running
    assert written_as({}).plan_write("uid-1", {**CREATED, "restartCount": 0}).write


def test_the_watch_is_taken_as_written_until_this_controller_writes_and_a_new_job_starts_afresh() -> None:
    record = written_as(RUNNING)
    record.read("uid-1", lambda: pytest.fail("the status on the server is known already"))
    record.decide("uid-1", RUNNING)
    record.read("uid-2", lambda: CREATED)  # deleted and created again under the same name
    assert not record.plan_write("uid-2", dict(CREATED)).write
    view = record.overlay(view_job(job("uid-2", status=CREATED)))
    assert view.status.state == "Created"  # the old job's decided status is not laid over the new one


def test_own_writes_are_laid_over_a_watch_that_trails_them() -> None:
    record = written_as(CREATED)
    record.decide("uid-1", RUNNING)
    record.annotated("uid-1", {"tfjob.dev/x": "1", "tfjob.dev/gone": None})
    view = record.overlay(view_job(job(status=CREATED, annotations={"tfjob.dev/gone": "y", "keep": "z"})))
    assert view.status.state == "Running"
    assert view.obj["metadata"]["annotations"] == {"tfjob.dev/x": "1", "keep": "z"}


def test_a_partial_write_lands_in_the_decided_and_written_copies_of_that_job_only() -> None:
    record = written_as(RUNNING)
    record.decide("uid-1", dict(RUNNING))
    assert record.current("uid-1", {})["state"] == "Running"
    assert record.current("uid-other", {"state": "Created"}) == {"state": "Created"}
    record.merge("uid-1", "progress", {"epoch": 1})
    assert record.decided is not None and record.written is not None
    assert record.decided[1]["progress"] == record.written[1]["progress"] == {"epoch": 1}
    record.merge("uid-other", "progress", {"epoch": 2})
    assert record.decided[1]["progress"] == {"epoch": 1}


def test_a_forgotten_job_gets_a_new_record_and_the_old_one_keeps_late_writes_to_itself() -> None:
    cache = StatusCache()
    old = cache.record(("ns", "j"))
    assert cache.record(("ns", "j")) is old
    cache.forget(("ns", "j"))
    old.decide("uid-1", RUNNING)  # a reconcile in flight when the job was deleted
    assert cache.record(("ns", "j")).decided is None
