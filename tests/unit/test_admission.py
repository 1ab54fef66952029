"""The builtin admission loop's shell (tfjob_operator.gang.admission) against an in-memory API: what it releases, when
it waits, and that two passes never book the same capacity even when the operator's pod index lags behind."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tfjob_operator.api.observed import JobView, view_job
from tfjob_operator.api.times import Clock
from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.controller import gang_wiring
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.gang import admission, builtin, queue
from tfjob_operator.gang.base import GangOptions
from tfjob_operator.metrics import Metrics
from tfjob_operator.reconcile.render import render

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def job_obj(name: str, workers: int, created: str = "2026-01-01T11:00:00Z", **policy: Any) -> dict[str, Any]:
    container = {"name": "tensorflow", "image": "tf:1",
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}
    spec: dict[str, Any] = {"tfReplicaSpecs": {"Worker": {"replicas": workers,
                                                          "template": {"spec": {"containers": [container]}}}}}
    if policy:
        spec["runPolicy"] = {"schedulingPolicy": policy}
    return {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "spec": spec, "status": {},
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": created}}


def gated_pods(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    job = parse_tfjob({k: v for k, v in obj.items() if k != "status"})
    pods = [builtin.BuiltinBackend().decorate_pod(job, p) for p in render(job).pods]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"{job.name}-pod-{i}"
        p["status"] = {"phase": "Pending"}
    return pods


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class FakeKube:
    """The API as the loop uses it: PATCH and DELETE pods, GET PriorityClasses, Events; and a watch of nodes and
    pods (every change is sent to the loop at once, or held back while `lagging`, as a slow watch would)."""

    nodes: list[dict[str, Any]]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    priority_classes: dict[str, int] = field(default_factory=dict)
    patches: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    on_pod: Callable[[str, Mapping[str, Any]], None] | None = None
    lagging: bool = False
    backlog: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Seconds a PATCH takes (an API server busy with a burst).
    patch_seconds: float = 0.0

    def changed(self, event_type: str, pod: dict[str, Any]) -> None:
        self.backlog.append((event_type, copy.deepcopy(pod)))
        if not self.lagging:
            self.catch_up()

    def catch_up(self) -> None:
        """The watch delivers what it held back."""
        backlog, self.backlog = self.backlog, []
        if self.on_pod is not None:
            for event_type, pod in backlog:
                self.on_pod(event_type, pod)

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.requests.append(f"{method} {path}")
        if method == "PATCH":
            await asyncio.sleep(self.patch_seconds)
            name = path.rsplit("/", 1)[1]
            self.pods[name] = merge(self.pods[name], body)
            self.patches.append(name)
            self.changed("MODIFIED", self.pods[name])
            return self.pods[name]
        raise AssertionError(f"unexpected {method} {path}")

    async def get(self, path: str) -> dict[str, Any] | None:
        name = path.rsplit("/", 1)[1]
        return {"value": self.priority_classes[name]} if name in self.priority_classes else None

    async def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> bool:
        self.deleted.append(name)
        pod = self.pods.pop(name, None)
        if pod is not None:
            self.changed("DELETED", pod)
        return pod is not None

    async def post_event(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


@dataclass
class FakeController:
    kube: FakeKube
    jobs: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    pods: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    settings: OperatorSettings = field(default_factory=lambda: OperatorSettings(gang_backend="builtin"))
    gang_options: GangOptions = field(default_factory=GangOptions)
    metrics: Metrics = field(default_factory=Metrics)
    triggered: list[tuple[str, str]] = field(default_factory=list)
    #: The loop this controller's pod events go to (as the operator's pod handler does).
    loop: admission.AdmissionLoop | None = None

    def trigger(self, key: tuple[str, str]) -> None:
        self.triggered.append(key)

    def view(self, key: tuple[str, str]) -> JobView | None:
        store = self.jobs.get(key)
        return view_job(store[-1]) if store else None

    async def watch_cluster(self) -> None:
        """The operator's one watch of nodes and every pod, started once: it hands each event to the loop."""
        assert self.loop is not None
        if self.kube.on_pod is None:
            for n in self.kube.nodes:
                self.loop.node_event("ADDED", copy.deepcopy(n))
            for p in self.kube.pods.values():
                self.loop.pod_event("ADDED", copy.deepcopy(p))
            self.kube.on_pod = self.loop.pod_event

    @property
    def cluster_listed(self) -> bool:
        return self.kube.on_pod is not None

    def submit(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        key = ("ns", obj["metadata"]["name"])
        self.jobs[key] = [obj]
        pods = gated_pods(obj)
        for p in pods:
            self.kube.pods[p["metadata"]["name"]] = p
            self.kube.changed("ADDED", p)
        self.sync(key)
        return pods

    def sync(self, key: tuple[str, str]) -> None:
        """The pod index catches up with the API. The loop hears of each pod event once, from the watch (a pass
        starts it; before, its first pass looks at every job with pods)."""
        self.pods[key] = [copy.deepcopy(p) for p in self.kube.pods.values()
                          if p["metadata"].get("labels", {}).get("tfjob.dev/job-name") == key[1]]

    def bind_all(self, phase: str = "Running") -> None:
        """kube-scheduler binds every released pod where it was pinned; the kubelet runs it."""
        for p in self.kube.pods.values():
            if not builtin.is_gated(p) and not p["spec"].get("nodeName"):
                p["spec"]["nodeName"] = p["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                p["status"]["phase"] = phase
                self.kube.changed("MODIFIED", p)


@dataclass
class FakeClock(Clock):
    """The wall time the test sets (`now[0]`); the monotonic count is the real one."""

    wall: list[datetime]

    def now(self) -> datetime:
        return self.wall[0]


def loop_for(controller: FakeController, now: list[datetime]) -> admission.AdmissionLoop:
    controller.loop = admission.AdmissionLoop(controller, clock=FakeClock(now))
    return controller.loop


def released(kube: FakeKube, job: str) -> list[str]:
    return sorted(n for n, p in kube.pods.items() if n.startswith(f"{job}-") and not builtin.is_gated(p))


async def test_one_gang_of_two_fits_six_gpus_the_other_waits_with_the_placement_reason() -> None:
    kube = FakeKube([node("a", 4), node("b", 2)])
    c = FakeController(kube)
    c.submit(job_obj("first", 4, "2026-01-01T11:00:00Z"))
    c.submit(job_obj("second", 4, "2026-01-01T11:00:01Z"))
    loop = loop_for(c, [T0])
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == ["ns/first"]
    assert released(kube, "first") == [f"first-worker-{i}" for i in range(4)] and released(kube, "second") == []
    reason = loop.reason_for("ns", "second")
    assert reason is not None and reason.startswith("needs 4 nvidia.com/gpu on ≤ 4 nodes; largest free 2")
    assert ("ns", "second") in c.triggered  # its status is rewritten with the reason
    assert kube.events == []  # admitted at once: no Event (the happy path posts JobCreated and the outcome)
    assert c.metrics.gang_queue_length._value.get() == 1


async def test_a_second_pass_before_binding_books_nothing_twice_even_if_the_pod_index_lags() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    c.submit(job_obj("first", 4, "2026-01-01T11:00:00Z"))
    loop = loop_for(c, [T0])
    await loop.pass_once()
    c.submit(job_obj("second", 2, "2026-01-01T11:00:01Z"))
    # The index still shows "first" gated (its watch events have not arrived); the API knows better.
    c.pods[("ns", "first")] = gated_pods(c.jobs[("ns", "first")][0])
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == []
    assert kube.patches.count("first-worker-0") == 1 and released(kube, "second") == []
    assert "largest free 0" in (loop.reason_for("ns", "second") or "")


async def test_a_stale_view_of_released_pods_is_not_reported_as_queued() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    stale = c.submit(job_obj("j", 2))
    loop = loop_for(c, [T0])
    assert not loop.released(stale)
    await loop.pass_once()
    assert loop.released(stale)  # reconcile drops Queued although its index still shows the gates


async def test_admission_latency_counts_from_the_first_gated_pod_seen() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    pods = c.submit(job_obj("j", 2))
    loop = loop_for(c, [T0])
    loop.pod_event("ADDED", pods[0])
    loop.state.queued_since["ns/j"] -= 6.0  # seen six seconds before the pass
    await loop.pass_once()
    histogram = c.metrics.gang_admission_seconds
    assert histogram._sum.get() >= 6.0  # type: ignore[attr-defined]
    # A wait that long is news even though no pass found the gang short: GangAdmitted says how long.
    assert [e[1] for e in kube.events] == ["GangAdmitted"] and "after 6." in kube.events[0][2]


async def test_a_slow_release_patch_is_no_wait_in_the_queue() -> None:
    kube = FakeKube([node("a", 4)], patch_seconds=0.7)
    c = FakeController(kube)
    pods = c.submit(job_obj("j", 2))
    loop = loop_for(c, [T0])
    loop.pod_event("ADDED", pods[0])
    loop.state.queued_since["ns/j"] -= admission.ADMITTED_NEWS_SECONDS - 0.6  # admitted 4.4 s after it was seen
    await loop.pass_once()
    assert released(kube, "j") == ["j-worker-0", "j-worker-1"]
    # Its PATCHes came back after 5.1 s, but the gang waited 4.4 s for admission: no GangAdmitted Event.
    assert kube.events == []


async def test_waits_count_once_per_period_however_often_passes_run() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    c.submit(job_obj("first", 4, "2026-01-01T11:00:00Z"))
    c.submit(job_obj("second", 4, "2026-01-01T11:00:01Z"))
    now = [T0]
    loop = loop_for(c, now)
    for i in range(5):  # a burst of pod events: five passes within a second
        now[0] = T0 + timedelta(seconds=i * 0.2)
        await loop.pass_once()
    assert loop.state.passes_waited == {"ns/second": 1}
    now[0] = T0 + timedelta(seconds=5)
    await loop.pass_once()
    assert loop.state.passes_waited == {"ns/second": 2}


async def admitted_and_bound(phase: str = "Running") -> tuple[FakeController, admission.AdmissionLoop]:
    """Job `j` (2 pods) admitted on node `a` and bound there, its pods in `phase`, the pod index caught up."""
    c = FakeController(FakeKube([node("a", 4)]))
    c.submit(job_obj("j", 2))
    loop = loop_for(c, [T0])
    await loop.pass_once()
    c.bind_all(phase=phase)
    c.sync(("ns", "j"))
    return c, loop


async def test_gpu_seconds_held_by_a_gang_bound_but_not_all_running_are_counted() -> None:
    c, loop = await admitted_and_bound("Pending")  # bound, containers still starting: 2 GPUs held, nothing trains
    loop._last_integration -= 10.0
    loop._integrate_gpu_seconds()
    assert c.metrics.gang_partial_gpu_seconds._value.get() == pytest.approx(20.0, rel=0.05)
    for p in c.pods[("ns", "j")]:
        p["status"]["phase"] = "Running"
    loop._last_integration -= 10.0
    loop._integrate_gpu_seconds()
    assert c.metrics.gang_partial_gpu_seconds._value.get() == pytest.approx(20.0, rel=0.05)


async def test_gpu_seconds_are_added_up_over_the_jobs_pod_events_named_not_a_scan_of_every_job() -> None:
    """Whether a gang holds GPUs idle changes only with its pods: once all its pods run, the job is read again only
    after a pod event of its own (at 2,000 running jobs, reading every job each second was idle CPU)."""
    c, loop = await admitted_and_bound()
    loop._integrate_gpu_seconds()
    assert ("ns", "j") not in loop._holding  # all running: nothing held idle, nothing to read until an event
    c.pods[("ns", "j")][0]["status"]["phase"] = "Pending"  # a change no event told of: not read
    loop._last_integration -= 10.0
    loop._integrate_gpu_seconds()
    assert c.metrics.gang_partial_gpu_seconds._value.get() == 0
    pod = c.kube.pods[c.pods[("ns", "j")][0]["metadata"]["name"]]
    pod["status"]["phase"] = "Pending"
    c.kube.changed("MODIFIED", pod)  # the watch shows it: 2 GPUs held by a gang not all running
    c.sync(("ns", "j"))
    loop._last_integration -= 10.0
    loop._integrate_gpu_seconds()
    assert c.metrics.gang_partial_gpu_seconds._value.get() == pytest.approx(20.0, rel=0.05)


async def test_a_release_the_watch_has_not_shown_yet_still_holds_its_node() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    c.submit(job_obj("first", 4, "2026-01-01T11:00:00Z"))
    loop = loop_for(c, [T0])
    kube.lagging = True  # neither the pod index nor the capacity watch has seen the release
    await loop.pass_once()
    c.pods[("ns", "first")] = gated_pods(c.jobs[("ns", "first")][0])
    c.submit(job_obj("second", 4, "2026-01-01T11:00:01Z"))
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == [] and released(kube, "second") == []
    kube.catch_up()  # the watch shows the release: the pods themselves now say where they hold
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == [] and "largest free 0" in (loop.reason_for("ns", "second") or "")


async def test_room_freed_by_a_pod_of_another_owner_admits_a_waiting_gang() -> None:
    kube = FakeKube([node("a", 4)])
    other = {"metadata": {"name": "other", "namespace": "team", "uid": "u-other"},
             "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
             "status": {"phase": "Running"}}
    kube.pods["other"] = other
    c = FakeController(kube)
    c.submit(job_obj("j", 2))
    loop = loop_for(c, [T0])
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == []
    loop._wake.clear()  # the run loop clears it before each pass
    kube.changed("MODIFIED", {**other, "status": {"phase": "Succeeded"}})
    assert loop._wake.is_set()  # the capacity watch wakes the loop; no pod of the job changed
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == ["ns/j"]


async def test_nothing_waiting_costs_no_api_call() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    c.jobs[("ns", "idle")] = [job_obj("idle", 1)]
    c.pods[("ns", "idle")] = []
    assert await loop_for(c, [T0]).pass_once() is None
    assert kube.requests == [] and kube.events == []


async def test_higher_priority_class_is_admitted_before_an_older_job() -> None:
    kube = FakeKube([node("a", 4)], priority_classes={"urgent": 1000})
    c = FakeController(kube)
    c.submit(job_obj("old", 4, "2026-01-01T11:00:00Z"))
    c.submit(job_obj("urgent", 4, "2026-01-01T11:30:00Z", priorityClass="urgent"))
    plan = await loop_for(c, [T0]).pass_once()
    assert plan is not None and plan.admitted == ["ns/urgent"]


async def test_jobs_created_in_one_second_are_served_in_the_order_first_seen() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    loop = loop_for(c, [T0])
    c.submit(job_obj("zz-first", 4, "2026-01-01T11:00:00Z"))
    c.pods[("ns", "zz-first")][0]["spec"]["nodeSelector"] = {"other": "x"}  # not placeable: seen, but waits
    kube.pods["zz-first-worker-0"]["spec"]["nodeSelector"] = {"other": "x"}
    await loop.pass_once()
    kube.pods["zz-first-worker-0"]["spec"].pop("nodeSelector")
    c.sync(("ns", "zz-first"))
    c.submit(job_obj("aa-second", 4, "2026-01-01T11:00:00Z"))
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == ["ns/zz-first"]


async def test_watchdog_deletes_a_gang_not_bound_in_time_and_backs_off_before_readmitting() -> None:
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    obj = job_obj("stalled", 2, scheduleTimeoutSeconds=30)
    c.submit(obj)
    now = [T0]
    loop = loop_for(c, now)
    await loop.pass_once()
    c.sync(("ns", "stalled"))
    now[0] = T0 + timedelta(seconds=29)
    assert (await loop.pass_once()).timed_out == []  # type: ignore[union-attr]
    now[0] = T0 + timedelta(seconds=31)
    plan = await loop.pass_once()
    assert plan is not None and plan.timed_out == ["ns/stalled"]
    assert sorted(kube.deleted) == ["stalled-worker-0", "stalled-worker-1"]
    assert [e[1] for e in kube.events] == ["GangScheduleTimeout"]
    assert "resumes in 10s" in kube.events[0][2]
    # Reconcile recreates the gang gated; it waits out the back-off, then is admitted again.
    c.submit(obj)
    now[0] = T0 + timedelta(seconds=35)
    assert (await loop.pass_once()).admitted == []  # type: ignore[union-attr]
    assert (loop.reason_for("ns", "stalled") or "").startswith("requeued after a schedule timeout")
    now[0] = T0 + timedelta(seconds=42)
    assert (await loop.pass_once()).admitted == ["ns/stalled"]  # type: ignore[union-attr]
    assert [e[1] for e in kube.events][-1] == "GangAdmitted"  # after a back-off the Queued condition showed
    # A second timeout doubles the wait.
    c.sync(("ns", "stalled"))
    now[0] = T0 + timedelta(seconds=80)
    await loop.pass_once()
    assert "resumes in 20s" in kube.events[-1][2]
    assert c.metrics.gang_schedule_timeouts._value.get() == 2


async def test_a_bound_gang_is_no_longer_waiting_and_its_reason_is_dropped() -> None:
    _, loop = await admitted_and_bound()
    assert await loop.pass_once() is None
    assert loop.reason_for("ns", "j") is None and loop.state.queued_since == {}


@pytest.mark.parametrize("pod, waits", [
    ({"metadata": {}, "spec": {"schedulingGates": [{"name": "tfjob.dev/gang"}]}, "status": {"phase": "Pending"}},
     True),
    ({"metadata": {"annotations": {builtin.ANNOTATION_RELEASED_AT: "2026-01-01T00:00:00Z"}}, "spec": {},
      "status": {"phase": "Pending"}}, True),
    ({"metadata": {"annotations": {builtin.ANNOTATION_RELEASED_AT: "2026-01-01T00:00:00Z"}},
      "spec": {"nodeName": "a"}, "status": {"phase": "Pending"}}, False),
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
      "spec": {"schedulingGates": [{"name": "tfjob.dev/gang"}]}, "status": {"phase": "Pending"}}, False),
    ({"metadata": {}, "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
      "status": {"phase": "Pending"}}, False),
    ({"metadata": {}, "spec": {}, "status": {"phase": "Pending"}}, False),
], ids=["gated", "released-unbound", "released-bound", "deleting", "other-gate", "plain"])
def test_which_pods_keep_the_loop_busy(pod: dict[str, Any], waits: bool) -> None:
    assert queue.waits_for_admission(pod) is waits


def test_gang_priority_prefers_the_servers_value_and_falls_back_to_the_class() -> None:
    with_value = {"spec": {"priority": 5, "priorityClassName": "urgent"}}
    unresolved = {"spec": {"priority": 0, "priorityClassName": "urgent"}}
    assert queue.gang_priority([with_value], {"urgent": 1000}) == 5
    assert queue.gang_priority([unresolved, {"spec": {}}], {"urgent": 1000}) == 1000
    assert queue.gang_priority([{"spec": {}}], {}) == 0


def test_current_gang_is_this_attempt_of_this_job_without_pods_being_deleted() -> None:
    obj = job_obj("j", 2)
    obj["status"] = {"restartCount": 1}
    pods = gated_pods(obj)
    for p in pods:
        p["metadata"]["labels"]["tfjob.dev/attempt"] = "1"
    old = copy.deepcopy(pods[0])
    old["metadata"]["labels"]["tfjob.dev/attempt"] = "0"
    going = copy.deepcopy(pods[1])
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    stranger = copy.deepcopy(pods[0])
    stranger["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    got = queue.current_gang(obj, [pods[0], old, going, stranger])
    assert [p["metadata"]["name"] for p in got] == ["j-worker-0"]


# ------------------------------------------------------------------ elastic gangs


@pytest.fixture
def elastic_jobs(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int]]:
    """Jobs by name → (min, max) workers: a stand-in for spec.elasticPolicy until the API field is in this branch."""
    bounds: dict[str, tuple[int, int]] = {}
    for module in (admission, queue):
        monkeypatch.setattr(module, "elastic_bounds", lambda j: bounds.get(j.name))
    return bounds


def submit_at(c: FakeController, obj: dict[str, Any], width: int) -> list[dict[str, Any]]:
    """The reconcile creates the job's gang at ``width`` workers (each pod records its gang size)."""
    narrow = copy.deepcopy(obj)
    narrow["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = width
    pods = gated_pods(narrow)
    for p in pods:
        p["metadata"]["annotations"]["tfjob.dev/gang-replicas"] = f'{{"Worker": {width}}}'
    key = ("ns", obj["metadata"]["name"])
    c.jobs[key] = [obj]
    for p in pods:
        c.kube.pods[p["metadata"]["name"]] = p
        c.kube.changed("ADDED", p)
    c.sync(key)
    return pods


async def test_a_waiting_elastic_gang_is_told_the_narrower_width_then_admitted_at_it(
        elastic_jobs: dict[str, tuple[int, int]]) -> None:
    elastic_jobs["e"] = (2, 4)
    kube = FakeKube([node("a", 3)])
    c = FakeController(kube)
    loop = loop_for(c, [T0])
    obj = job_obj("e", 4)
    rendered = submit_at(c, obj, 4)
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == [] and released(kube, "e") == []
    job = view_job(obj).job
    assert job is not None
    assert loop.fits_workers(job, rendered, c.pods[("ns", "e")]) == 3
    assert ("ns", "e") in c.triggered  # the reconcile is asked to look again
    # What the reconcile reads: the gang view of a builtin job carries it; another backend's does not.
    view = await gang_wiring.gang_view(c.settings, c.gang_options, None, loop, job, job, rendered,  # type: ignore[arg-type]
                                       c.pods[("ns", "e")])
    assert view.fits_workers == 3
    aside = OperatorSettings(gang_backend="none")
    view = await gang_wiring.gang_view(aside, c.gang_options, None, loop, job, job, rendered,  # type: ignore[arg-type]
                                       c.pods[("ns", "e")])
    assert view.fits_workers is None
    # The reconcile creates the gang again at 3: the next pass admits exactly those pods.
    for p in rendered:
        await kube.delete_pod("ns", p["metadata"]["name"])
    submit_at(c, obj, 3)
    plan = await loop.pass_once()
    assert plan is not None and plan.admitted == ["ns/e"]
    assert released(kube, "e") == ["e-worker-0", "e-worker-1", "e-worker-2"]


async def test_asking_what_fits_before_the_cluster_is_known_answers_nothing_and_starts_no_watch(
        elastic_jobs: dict[str, tuple[int, int]]) -> None:
    elastic_jobs["e"] = (1, 4)
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    loop = loop_for(c, [T0])
    obj = job_obj("e", 4)
    job = view_job(obj).job
    assert job is not None
    rendered = render(job).pods
    assert loop.fits_workers(job, rendered, []) is None and loop.leaving_nodes() == frozenset()
    assert kube.on_pod is None  # a query: the watch starts with the first pass that has a gang to place
    submit_at(c, obj, 4)
    await loop.pass_once()
    assert kube.on_pod is not None and loop.fits_workers(job, rendered, c.pods[("ns", "e")]) is not None


async def test_fits_workers_counts_the_jobs_own_pods_and_widens_only_while_nobody_waits(
        elastic_jobs: dict[str, tuple[int, int]]) -> None:
    elastic_jobs["e"] = (1, 4)
    kube = FakeKube([node("a", 4)])
    c = FakeController(kube)
    loop = loop_for(c, [T0])
    obj = job_obj("e", 4)
    rendered = submit_at(c, obj, 2)
    await loop.pass_once()
    c.bind_all()
    c.sync(("ns", "e"))
    job = view_job(obj).job
    assert job is not None
    await loop.pass_once()  # nothing waits now: the last pass's answer is dropped
    assert loop.fits_workers(job, rendered, c.pods[("ns", "e")]) == 4  # its 2 GPUs + the 2 free
    assert elastic_jobs.get("rigid") is None and loop.fits_workers(view_job(job_obj("rigid", 2)).job, rendered,
                                                                   []) is None
    c.submit(job_obj("other", 3, "2026-01-01T11:00:05Z"))  # a rigid gang waits for room
    await loop.pass_once()
    assert loop.fits_workers(job, rendered, c.pods[("ns", "e")]) == 2  # no widening past it
