"""The scheduler stand-in through the API: binding, Unschedulable with retry, gated and foreign pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from local_helpers import condition, core_api, phase_is, pod_dict, python_pod, unique
from polling import wait_for as wait_until

from kubelocal.cluster import LocalClusterThread
from kubelocal.nodes import make_node

pytestmark = pytest.mark.timeout(90)
Core = kubernetes.client.CoreV1Api


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterThread]:
    with LocalClusterThread(nodes="2x{gpu:2,cpu:8,memory:16Gi};zoned{cpu:4,label:zone=a}",
                            workdir=tmp_path_factory.mktemp("sched"), crds=()) as c:
        yield c


@pytest.fixture(scope="module")
def api(gpu_cluster: LocalClusterThread) -> Iterator[Core]:
    core = core_api(gpu_cluster.url)
    yield core
    core.api_client.close()


def gpu_pod(name: str, gpus: int, code: str = "print(1)", **spec: Any) -> dict[str, Any]:
    return python_pod(name, code, container={"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}, **spec)


def scheduled(core: Core, name: str) -> dict[str, Any] | None:
    pod = pod_dict(core, name)
    return pod if pod and condition(pod, "PodScheduled").get("status") == "True" else None


def unschedulable(core: Core, name: str) -> dict[str, Any] | None:
    pod = pod_dict(core, name)
    return pod if pod and condition(pod, "PodScheduled").get("reason") == "Unschedulable" else None


def test_a_pod_that_fits_is_bound_and_runs_and_a_scheduled_event_says_where(api: Core) -> None:
    name = unique("fits")
    api.create_namespaced_pod("default", gpu_pod(name, 2))
    pod = wait_until(phase_is(api, name, "Succeeded"), what=f"{name} to run to completion")
    assert pod["spec"]["nodeName"] in ("node-0", "node-1")
    assert condition(pod, "PodScheduled")["status"] == "True"
    # Recorded in the background after the bind, as kube-scheduler's event broadcaster does.
    scheduled = wait_until(lambda: [e for e in api.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name}").items if e.reason == "Scheduled"],
        what="a Scheduled event")
    assert scheduled[0].message == f"Successfully assigned default/{name} to {pod['spec']['nodeName']}"
    assert scheduled[0].source.component == "default-scheduler"


def test_node_selector_places_the_pod_on_the_labelled_node(api: Core) -> None:
    name = unique("zoned")
    api.create_namespaced_pod("default", python_pod(name, "print(1)", nodeSelector={"zone": "a"}))
    assert wait_until(lambda: scheduled(api, name), what="binding")["spec"]["nodeName"] == "zoned"


def test_a_pod_whose_selector_matches_no_node_is_bound_once_a_node_gets_the_label(
        gpu_cluster: LocalClusterThread, api: Core) -> None:
    name = unique("relabel")
    api.create_namespaced_pod("default", python_pod(name, "print(1)", nodeSelector={"zone": name}))
    pending = wait_until(lambda: unschedulable(api, name), what="the pod Unschedulable")
    assert "didn't match Pod's node affinity/selector" in condition(pending, "PodScheduled")["message"]
    moves = gpu_cluster.scheduler.queue.moves["NodeUpdate"]
    api.patch_node("zoned", {"metadata": {"labels": {"zone": name}}})
    try:
        assert wait_until(lambda: scheduled(api, name), what="binding after the label")["spec"]["nodeName"] == "zoned"
        assert gpu_cluster.scheduler.queue.moves["NodeUpdate"] > moves
    finally:
        api.patch_node("zoned", {"metadata": {"labels": {"zone": "a"}}})


def test_pod_too_big_for_any_node_waits_unschedulable_until_a_node_fits(
        gpu_cluster: LocalClusterThread, api: Core) -> None:
    name = unique("big")
    api.create_namespaced_pod("default", gpu_pod(name, 4))
    pod = wait_until(lambda: unschedulable(api, name), what="PodScheduled=False Unschedulable")
    assert condition(pod, "PodScheduled")["message"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    wait_until(lambda: any(e.reason == "FailedScheduling" for e in api.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name}").items), what="a FailedScheduling event")
    moved_by_node_add = gpu_cluster.scheduler.queue.moves["NodeAdd"]
    big = make_node("big", gpu=4)
    api.create_node(big)
    try:
        pod = wait_until(phase_is(api, name, "Succeeded"), what=f"{name} to run on the new node")
        assert pod["spec"]["nodeName"] == "big"
        assert gpu_cluster.scheduler.queue.moves["NodeAdd"] > moved_by_node_add
    finally:
        api.delete_node("big")


def hold_pod(name: str, gpus: int, ctl: Path) -> dict[str, Any]:
    """A pod that runs until the file `release` appears in `ctl`."""
    hold = "import os, time\nwhile not os.path.exists('/ctl/release'): time.sleep(0.05)"
    body = gpu_pod(name, gpus, hold, volumes=[{"name": "ctl", "hostPath": {"path": str(ctl)}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "ctl", "mountPath": "/ctl"}]
    return body


def test_an_unschedulable_pod_is_retried_when_another_pod_ends_and_not_on_unrelated_events(
        gpu_cluster: LocalClusterThread, api: Core, tmp_path: Path) -> None:
    scheduler = gpu_cluster.scheduler
    holders = [unique("holder") for _ in range(2)]
    for holder in holders:
        api.create_namespaced_pod("default", hold_pod(holder, 2, tmp_path))
    for holder in holders:
        wait_until(phase_is(api, holder, "Running"), what=f"{holder} to hold its GPUs")
    waiter = unique("waiter")
    api.create_namespaced_pod("default", gpu_pod(waiter, 1))
    wait_until(lambda: unschedulable(api, waiter), what="the waiter to be Unschedulable")
    tried = scheduler.attempts["unschedulable"]

    # Events that cannot make the waiter fit: pods the scheduler does not place, a label on the waiter,
    # an annotation on a node, and a pod that is bound elsewhere and keeps running.
    api.create_namespaced_pod("default", python_pod(unique("gated"), "print(1)",
                                                    schedulingGates=[{"name": "tfjob.dev/gang"}]))
    api.create_namespaced_pod("default", python_pod(unique("volcano"), "print(1)", schedulerName="volcano"))
    api.patch_namespaced_pod(waiter, "default", {"metadata": {"labels": {"seen": "yes"}}})
    api.patch_node("node-0", {"metadata": {"annotations": {"example.com/heartbeat": unique("beat")}}})
    barrier = unique("barrier")  # created last: once it is bound, the scheduler has seen every event above
    api.create_namespaced_pod("default", hold_pod(barrier, 0, tmp_path))
    wait_until(lambda: scheduled(api, barrier), what="the barrier pod to be bound")
    assert scheduler.attempts["unschedulable"] == tried, "the waiter was retried on an event that frees nothing"
    assert unschedulable(api, waiter)

    retried_on_finish = scheduler.queue.moves["AssignedPodUpdate"]
    (tmp_path / "release").touch()
    pod = wait_until(phase_is(api, waiter, "Succeeded"), what="the waiter to run once GPUs are free")
    assert pod["spec"]["nodeName"] in ("node-0", "node-1")
    assert scheduler.queue.moves["AssignedPodUpdate"] > retried_on_finish


def test_gated_pods_are_never_touched_by_the_scheduler(gpu_cluster: LocalClusterThread, api: Core) -> None:
    gated = unique("gated")
    api.create_namespaced_pod("default", python_pod(gated, "print(1)",
                                                    schedulingGates=[{"name": "tfjob.dev/gang"}]))
    barrier = unique("barrier")  # created later, so once it is bound the scheduler has seen the gated pod
    api.create_namespaced_pod("default", python_pod(barrier, "print(1)"))
    wait_until(lambda: scheduled(api, barrier), what="the barrier pod to be bound")
    pod = pod_dict(api, gated)
    assert pod and not pod["spec"].get("nodeName")
    assert (condition(pod, "PodScheduled")["status"], condition(pod, "PodScheduled")["reason"]) == (
        "False", "SchedulingGated")
    touched = [r for r in gpu_cluster.apiserver.requests
               if r.name == gated and (r.user_agent or "").startswith("tfjob-local-scheduler")]
    assert touched == []
    api.patch_namespaced_pod(gated, "default", [{"op": "remove", "path": "/spec/schedulingGates"}])
    wait_until(phase_is(api, gated, "Succeeded"), what="the ungated pod to run")


def test_pods_for_another_scheduler_are_left_pending(api: Core) -> None:
    name = unique("volcano")
    api.create_namespaced_pod("default", python_pod(name, "print(1)", schedulerName="volcano"))
    barrier = unique("barrier")
    api.create_namespaced_pod("default", python_pod(barrier, "print(1)"))
    wait_until(lambda: scheduled(api, barrier), what="the barrier pod to be bound")
    pod = pod_dict(api, name)
    assert pod and not pod["spec"].get("nodeName") and not condition(pod, "PodScheduled")
    api.delete_namespaced_pod(name, "default")
