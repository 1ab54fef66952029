"""Built-in gang admission on the local control plane: the real operator (TFJOB_GANG_BACKEND=builtin) and
declared GPU nodes, 4 + 2 = 6 GPUs. Every pod change is recorded from a watch, so "never a partial gang" is
checked over the whole run, not at a few sampled instants.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_harness import Cluster, Operator, free_port, local_cluster, py, replica, wait_for
from shared_data import CRDS

from kubelocal.kubeclient import STRATEGIC_MERGE_PATCH, Informer, KubeClient

pytestmark = [pytest.mark.timeout(180)]

NODES = "node-a{gpu:4,cpu:16,memory:64Gi};node-b{gpu:2,cpu:16,memory:64Gi}"
GATE = "tfjob.dev/gang"
RELEASED = "tfjob.dev/gang-released-at"
DATA_CRDS = CRDS


def gpu_workers(command: list[str], replicas: int, **kwargs: Any) -> dict[str, Any]:
    spec = replica(command, replicas, **kwargs)
    spec["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}
    return spec


def sleep_then_exit(seconds: float) -> list[str]:
    return py(f"import time; time.sleep({seconds})")


@dataclass(frozen=True)
class PodRecord:
    """One watch event of a pod, reduced to what gang checks need."""

    t: float
    kind: str
    name: str
    uid: str
    job: str
    attempt: str
    gated: bool
    released: bool
    #: The release stamp (tfjob.dev/gang-released-at): one value per admission pass.
    stamp: str | None
    node: str | None
    phase: str
    deleting: bool
    gpus: int


class Recorder:
    """A pod informer on the cluster's loop; `records` holds every event in watch order."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.records: list[PodRecord] = []
        self._client: KubeClient | None = None
        self._task: asyncio.Task[None] | None = None

    def _on(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        labels = meta.get("labels") or {}
        if "tfjob.dev/job-name" not in labels:
            return
        gpus = sum(int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
                   for c in spec.get("containers") or [])
        self.records.append(PodRecord(
            time.monotonic(), kind, meta["name"], meta["uid"], labels["tfjob.dev/job-name"],
            labels.get("tfjob.dev/attempt", "0"), any(g.get("name") == GATE for g in spec.get("schedulingGates") or []),
            RELEASED in (meta.get("annotations") or {}), (meta.get("annotations") or {}).get(RELEASED),
            spec.get("nodeName"),
            (pod.get("status") or {}).get("phase", ""), bool(meta.get("deletionTimestamp")), gpus))

    async def _start(self) -> None:
        self._client = self.cluster.client("gang-test-recorder")
        informer = Informer(self._client, "/api/v1/pods", self._on)
        self._task = asyncio.create_task(informer.run())
        await informer.synced.wait()

    async def _stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            await self._client.close()

    def start(self) -> Recorder:
        self.cluster.call(self._start())
        return self

    def stop(self) -> None:
        self.cluster.call(self._stop())

    def of(self, job: str) -> list[PodRecord]:
        return [r for r in self.records if r.job == job]


def first_times(records: list[PodRecord], what: str) -> dict[str, float]:
    """Pod uid → when it was first seen released (ungated after being gated) or bound."""
    out: dict[str, float] = {}
    for r in records:
        hit = (r.released and not r.gated) if what == "released" else bool(r.node)
        if hit and r.uid not in out:
            out[r.uid] = r.t
    return out


def assert_whole_gangs(records: list[PodRecord], sizes: dict[str, int]) -> None:
    """Every gang attempt (one pod uid per name) was released whole and at once, and bound whole, never in part.

    A gang's pods are created behind the gate, released together by one pass (one PATCH each), then bound; a
    partial gang would show as a gang with some pods bound while others stay gated or unbound."""
    created_gated = {r.uid for r in records if r.gated}
    released = first_times(records, "released")
    bound = first_times(records, "bound")
    stamps: dict[str, set[str]] = {}
    for r in records:
        if r.stamp:
            stamps.setdefault(r.uid, set()).add(r.stamp)
    gangs: dict[tuple[str, str, str], list[str]] = {}
    for uid in released:
        r = next(x for x in records if x.uid == uid)
        if r.job not in sizes:  # another test's job, still going
            continue
        assert len(stamps[uid]) == 1, f"{r.name} released more than once: {stamps[uid]}"
        # One admission pass stamps every pod it releases with the same time.
        gangs.setdefault((r.job, r.attempt, next(iter(stamps[uid]))), []).append(uid)
    assert gangs, "no gang was released"
    for (job, attempt, _), uids in gangs.items():
        assert len(uids) == sizes[job], f"{job} attempt {attempt}: {len(uids)} of {sizes[job]} pods released together"
        assert set(uids) <= created_gated, f"{job}: a pod was never gated"
        times = [bound[u] for u in uids if u in bound]
        assert len(times) in (0, len(uids)), f"{job} attempt {attempt}: {len(times)} of {len(uids)} pods bound"
        if times:
            assert max(times) - min(times) < 5.0, f"{job} attempt {attempt}: bindings spread {max(times) - min(times)}"
    # No pod was ever bound without first being released by the loop.
    assert set(bound) <= set(released)


def assert_never_over_capacity(records: list[PodRecord], capacity: dict[str, int]) -> None:
    """Replaying the watch: GPUs of bound, live pods never exceed a node's GPUs."""
    state: dict[str, PodRecord] = {}
    for r in records:
        if r.kind == "DELETED" or r.phase in ("Succeeded", "Failed"):
            state.pop(r.uid, None)
        else:
            state[r.uid] = r
        used: dict[str, int] = {}
        for p in state.values():
            if p.node:
                used[p.node] = used.get(p.node, 0) + p.gpus
        for node, gpus in used.items():
            assert gpus <= capacity[node], f"{node}: {gpus} GPUs bound at t={r.t}"


def bound_pods(cluster: Cluster, name: str) -> list[Any]:
    return [p for p in cluster.pods(name) if p.spec.node_name and not p.metadata.deletion_timestamp]


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("gang"), nodes=NODES) as c:
        yield c


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def gang_operator(gpu_cluster: Cluster, metrics_port: int) -> Iterator[Operator]:
    op = Operator(gpu_cluster.kubeconfig, gpu_cluster.workdir / "operator.log", TFJOB_GANG_BACKEND="builtin",
                  TFJOB_METRICS_PORT=str(metrics_port), TFJOB_METRICS_HOST="127.0.0.1").start()
    yield op
    op.stop()
    assert op.proc is not None and op.proc.returncode in (0, -15), op.log()[-3000:]


@pytest.fixture()
def recorder(gpu_cluster: Cluster, gang_operator: Operator) -> Iterator[Recorder]:
    rec = Recorder(gpu_cluster).start()
    yield rec
    rec.stop()
    # Leave the GPUs free for the next test.
    for job in gpu_cluster.custom.list_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs")["items"]:
        gpu_cluster.custom.delete_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs",
                                                           job["metadata"]["name"])
    # On the upstream plane kube-controller-manager's garbage collector deletes them, then the kubelet ends them
    # (30 s was too short there at a load of 12: the next test then saw this one's pods).
    wait_for(lambda: not gpu_cluster.core.list_namespaced_pod("default").items, 120, what="every pod gone")


def test_two_four_gpu_jobs_on_six_gpus_run_one_at_a_time_never_as_partial_gangs(
        gpu_cluster: Cluster, recorder: Recorder, metrics_port: int) -> None:
    c = gpu_cluster
    first = c.submit({"Worker": gpu_workers(sleep_then_exit(4), 4)}, name="first")
    wait_for(lambda: len(bound_pods(c, first)) == 4, 30, what="first: all 4 pods bound")
    second = c.submit({"Worker": gpu_workers(sleep_then_exit(1), 4)}, name="second")
    queued = wait_for(lambda: (q := c.condition(second, "Queued")) and q["status"] == "True" and
                      q["message"].startswith("needs") and q, 20, what="second Queued with the placement's reason")
    assert queued["reason"] == "GangQueued"
    assert queued["message"].startswith("needs 4 nvidia.com/gpu on ≤ 4 nodes; largest free 2"), queued["message"]
    row = c.kubectl("get", "tfj", second, "--no-headers").split()
    assert row[1] == "Queued"
    assert len(c.pods(second)) == 4 and bound_pods(c, second) == []
    assert all(any(g.name == GATE for g in p.spec.scheduling_gates or []) for p in c.pods(second))
    c.wait_state(first, "Running", 20)
    # Still queued with nothing bound while the first runs.
    assert bound_pods(c, second) == [] and c.status(second)["state"] == "Queued"
    c.wait_state(first, "Succeeded", 30)
    c.wait_state(second, "Succeeded", 40)
    assert_whole_gangs(recorder.records, {first: 4, second: 4})
    assert_never_over_capacity(recorder.records, {"node-a": 4, "node-b": 2})
    # The second gang was not bound before the first gang's pods ended.
    first_end = min(r.t for r in recorder.of(first) if r.phase == "Succeeded")
    second_bound = min(r.t for r in recorder.of(second) if r.node)
    assert second_bound > first_end
    c.wait_events(second, "GangAdmitted")
    assert metric(metrics_port, "tfjob_gang_admissions_total") >= 2
    assert metric(metrics_port, "tfjob_gang_admission_latency_seconds_count") >= 2
    assert metric(metrics_port, "tfjob_gang_queue_length") == 0


def test_operator_killed_while_a_gang_waits_admits_it_after_restart_without_double_booking(
        gpu_cluster: Cluster, recorder: Recorder, gang_operator: Operator) -> None:
    c = gpu_cluster
    first = c.submit({"Worker": gpu_workers(sleep_then_exit(4), 4)}, name="before-kill")
    wait_for(lambda: len(bound_pods(c, first)) == 4, 30, what="first bound")
    second = c.submit({"Worker": gpu_workers(sleep_then_exit(1), 4)}, name="after-kill")
    wait_for(lambda: (q := c.condition(second, "Queued")) and q["message"].startswith("needs"), 20,
             what="second queued")
    gang_operator.kill()  # SIGKILL: the loop's memory is gone; released pods are read back from the pods
    gang_operator.start()
    c.wait_state(first, "Succeeded", 30)
    c.wait_state(second, "Succeeded", 40)
    assert_whole_gangs(recorder.records, {first: 4, second: 4})
    assert_never_over_capacity(recorder.records, {"node-a": 4, "node-b": 2})
    assert min(r.t for r in recorder.of(second) if r.node) > min(r.t for r in recorder.of(first)
                                                                 if r.phase == "Succeeded")


def test_higher_priority_job_queued_later_is_admitted_first(gpu_cluster: Cluster, recorder: Recorder) -> None:
    c = gpu_cluster
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "team-urgent"},
            "value": 1000, "preemptionPolicy": "Never", "description": "urgent training"}
    try:
        k8s.SchedulingV1Api(c.core.api_client).create_priority_class(body)
    except k8s.ApiException as exc:
        assert exc.status == 409
    blocker = c.submit({"Worker": gpu_workers(sleep_then_exit(4), 4)}, name="blocker")
    wait_for(lambda: len(bound_pods(c, blocker)) == 4, 30, what="blocker bound")
    low = c.submit({"Worker": gpu_workers(sleep_then_exit(3), 4)}, name="low")
    wait_for(lambda: (q := c.condition(low, "Queued")) and q["message"].startswith("needs"), 20, what="low queued")
    high = c.submit({"Worker": gpu_workers(sleep_then_exit(3), 4)}, name="high",
                    schedulingPolicy={"priorityClass": "team-urgent"})
    wait_for(lambda: (q := c.condition(high, "Queued")) and q["message"].startswith("needs"), 20, what="high queued")
    c.wait_state(high, "Succeeded", 60)
    c.wait_state(low, "Succeeded", 60)
    high_bound = min(r.t for r in recorder.of(high) if r.node)
    low_bound = min(r.t for r in recorder.of(low) if r.node)
    assert high_bound < low_bound, "the urgent job queued later was not admitted first"
    # Only one of them fits at a time: the low job waited for the urgent one to end.
    assert low_bound > min(r.t for r in recorder.of(high) if r.phase == "Succeeded")
    assert_whole_gangs(recorder.records, {blocker: 4, low: 4, high: 4})
    assert_never_over_capacity(recorder.records, {"node-a": 4, "node-b": 2})


def test_gang_restart_goes_through_admission_again(gpu_cluster: Cluster, recorder: Recorder) -> None:
    c = gpu_cluster
    # Attempt 0: worker 1 dies with 137 (retryable) while its peers wait; attempt 1: everyone exits 0.
    crash_once = py("import json, os, sys, time\n"
                    "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
                    "if os.environ['TFJOB_ATTEMPT'] == '0':\n"
                    "    time.sleep(0.5 if index == 1 else 60); sys.exit(137)\n"
                    "time.sleep(1)")
    name = c.submit({"Worker": gpu_workers(crash_once, 3)}, name="restarts")
    status = c.wait_state(name, "Succeeded", 60)
    assert status["restartCount"] == 1
    attempt1 = [r for r in recorder.of(name) if r.attempt == "1"]
    assert attempt1 and attempt1[0].gated, "the next attempt's pods were not created gated"
    assert {r.name for r in attempt1 if r.released and not r.gated} == {f"{name}-worker-{i}" for i in range(3)}
    # Both attempts were admitted at once (the release is asserted above): no wait, so no GangAdmitted Event.
    assert_whole_gangs(recorder.records, {name: 3})


def test_schedule_timeout_recreates_the_gang_gated_and_requeues_it_with_backoff(
        gpu_cluster: Cluster, recorder: Recorder, metrics_port: int) -> None:
    c = gpu_cluster
    local = c.local
    c.call(local.cluster.stop_scheduler())  # kube-scheduler is down: released pods are never bound
    try:
        name = c.submit({"Worker": gpu_workers(sleep_then_exit(1), 2)}, name="stalled",
                        schedulingPolicy={"scheduleTimeoutSeconds": 2})
        first = wait_for(lambda: [p.metadata.uid for p in c.pods(name)
                                  if p.metadata.annotations and RELEASED in p.metadata.annotations], 20,
                         what="the gang released")
        wait_for(lambda: "GangScheduleTimeout" in c.event_reasons(name), 20, what="the watchdog fired")
        timed_out_at = time.monotonic()
        # Recreated behind the gate (new pods), and Queued saying when admission resumes.
        recreated = wait_for(lambda: [p for p in c.pods(name) if p.metadata.uid not in first
                                      and not p.metadata.deletion_timestamp], 20, what="the gang recreated")
        assert all(any(g.name == GATE for g in p.spec.scheduling_gates or []) for p in recreated)
        queued = wait_for(lambda: (q := c.condition(name, "Queued")) and "requeued" in q["message"] and q, 20,
                          what="Queued with the back-off")
        assert "admission resumes at" in queued["message"]
        message = next(m for r, m in c.events(name) if r == "GangScheduleTimeout")
        assert "2 of 2 pods not scheduled within scheduleTimeoutSeconds=2" in message and "resumes in 10s" in message
    finally:
        c.call(local.cluster.start_scheduler())
    c.wait_state(name, "Succeeded", 60)
    released_again = min(r.t for r in recorder.of(name) if r.uid not in first and r.released and not r.gated)
    assert released_again - timed_out_at >= 8.0, "re-admitted before the 10 s back-off ended"
    assert metric(metrics_port, "tfjob_gang_schedule_timeouts_total") >= 1


def test_volcano_job_creates_its_podgroup_first_and_pods_only_once_volcano_enqueues_it(gpu_cluster: Cluster,
                                                                                        recorder: Recorder) -> None:
    c = gpu_cluster
    c.install_crds([DATA_CRDS / "scheduling.volcano.sh_podgroups.yaml"])
    body = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob",
            "metadata": {"name": "vc", "annotations": {"tfjob.dev/gang-backend": "volcano"}},
            "spec": {"tfReplicaSpecs": {"Worker": gpu_workers(sleep_then_exit(1), 2)},
                     "runPolicy": {"schedulingPolicy": {"queue": "research"}}}}
    c.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", body)
    group = wait_for(lambda: next(iter(c.custom.list_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "default", "podgroups")["items"]), None), 20, what="the PodGroup")
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (2, "research")
    assert group["spec"]["minResources"]["nvidia.com/gpu"] == "2"
    queued = wait_for(lambda: (q := c.condition("vc", "Queued")) and "has not enqueued" in q["message"] and q, 20,
                      what="Queued on the PodGroup")
    assert queued["reason"] == "GangQueued" and c.pods("vc") == []
    # What Volcano does once the queue has room; the operator then creates the pods for Volcano to schedule.
    c.custom.patch_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "default", "podgroups", "vc",
                                            {"status": {"phase": "Inqueue"}})
    pods = wait_for(lambda: len(p := c.pods("vc")) == 2 and p, 20, what="the pods created")
    assert {p.spec.scheduler_name for p in pods} == {"volcano"}
    assert {p.metadata.annotations["scheduling.k8s.io/group-name"] for p in pods} == {"vc"}
    assert all(not p.spec.scheduling_gates for p in pods)


def test_pods_kueue_stops_are_recreated_as_the_next_attempt_in_a_new_pod_group(gpu_cluster: Cluster,
                                                                              recorder: Recorder) -> None:
    c = gpu_cluster
    # Attempt 0 runs until stopped and, like a real worker, takes a moment to exit on SIGTERM.
    code = py("import os, signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(143)))\n"
              "time.sleep(60 if os.environ['TFJOB_ATTEMPT'] == '0' else 0.5)")
    body = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob",
            "metadata": {"name": "kq", "annotations": {"tfjob.dev/gang-backend": "kueue"}},
            "spec": {"tfReplicaSpecs": {"Worker": gpu_workers(code, 2)},
                     "runPolicy": {"schedulingPolicy": {"queue": "team-a"}}}}
    c.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", body)
    c.wait_state("kq", "Running", 30)
    assert {p.metadata.labels["kueue.x-k8s.io/pod-group-name"] for p in c.pods("kq")} == {"kq-0"}
    # Kueue preempts the workload: it marks each pod TerminationTarget, then deletes it (what Kueue 0.17 writes,
    # as tests/upstream/test_kueue.py saw it).
    kueue = c.client("kueue-manager")
    stopped = {"status": {"conditions": [{"type": "TerminationTarget", "status": "True",
                                          "reason": "WorkloadEvictedDueToPreempted",
                                          "message": "Preempted to accommodate a workload (UID: 1, JobUID: 2) due to "
                                                     "prioritization in the ClusterQueue; preemptor path: /team"}]}}
    try:
        for pod in ("kq-worker-0", "kq-worker-1"):
            c.call(kueue.patch(f"/api/v1/namespaces/default/pods/{pod}/status", stopped, STRATEGIC_MERGE_PATCH))
            c.call(kueue.delete(f"/api/v1/namespaces/default/pods/{pod}"))
    finally:
        c.call(kueue.close())
    status = c.wait_state("kq", "Succeeded", 40)
    assert (status["restartCount"], status["failureRestarts"]) == (1, 0)
    c.wait_events("kq", "PodPreempted")
    groups = {r.name: r for r in recorder.of("kq") if r.attempt == "1"}
    assert set(groups) == {"kq-worker-0", "kq-worker-1"}
    assert {p.metadata.labels["kueue.x-k8s.io/pod-group-name"] for p in c.pods("kq")} <= {"kq-1"}


def _has_elastic_policy() -> bool:
    from tfjob_operator.api import TFJobSpec

    return "elasticPolicy" in TFJobSpec.model_fields


@pytest.mark.skipif(not _has_elastic_policy(), reason="needs spec.elasticPolicy (issue #27's API half)")
def test_an_elastic_job_starts_narrower_on_the_room_left_whole_at_that_width(gpu_cluster: Cluster,
                                                                            recorder: Recorder) -> None:
    c = gpu_cluster
    blocker = c.submit({"Worker": gpu_workers(sleep_then_exit(30), 3)}, name="blocker")
    wait_for(lambda: len(bound_pods(c, blocker)) == 3, 30, what="blocker: 3 pods bound")
    body = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "elastic"},
            "spec": {"tfReplicaSpecs": {"Worker": gpu_workers(sleep_then_exit(2), 4)},
                     "elasticPolicy": {"minReplicas": 2, "maxReplicas": 4}}}
    c.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", body)
    # 3 of the 6 GPUs are free: it runs with 3 workers instead of waiting for 4.
    wait_for(lambda: len(bound_pods(c, "elastic")) == 3, 30, what="elastic: 3 workers bound")
    c.wait_state("elastic", "Succeeded", 40)
    assert c.status(blocker)["state"] == "Running"  # it did not wait for the blocker to end
    assert_whole_gangs(recorder.of("elastic"), {"elastic": 3})
    assert_never_over_capacity(recorder.records, {"node-a": 4, "node-b": 2})
