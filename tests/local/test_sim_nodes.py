"""Simulated nodes (`sim:true` in --nodes): pods that run no process go Pending -> Running -> Succeeded/Failed
on the durations and exit codes their annotations or env declare, with simulated time compressed; the nodes
are Ready and renew their Leases as process nodes do, and the two kinds mix in one cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from local_helpers import condition, core_api, phase_is, pod_dict, python_pod, unique
from polling import wait_for as wait_until

from kubelocal import times
from kubelocal.cluster import LocalClusterThread
from kubelocal.controllers import ControllerSettings
from kubelocal.kubelet.sim import SimConfigError, container_plan, parse_seconds, start_delay
from kubelocal.nodes import SIM_LABEL, NodeSpecError, parse_node_spec

pytestmark = pytest.mark.timeout(90)
Core = kubernetes.client.CoreV1Api
#: Simulated seconds per wall second in this module's cluster.
SPEED = 60.0
SIM = {"nodeSelector": {SIM_LABEL: "true"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterThread]:
    """One process node and two simulated 8-GPU nodes; a simulated minute passes each wall second."""
    with LocalClusterThread(nodes="proc{cpu:8,memory:16Gi};2xsim{gpu:8,cpu:96,memory:1Ti,sim:true}",
                            workdir=tmp_path_factory.mktemp("sim"), restart_backoff=(0.1, 0.4),
                            controllers=ControllerSettings(node_monitor_grace=4.0), sim_speed=SPEED) as c:
        yield c


@pytest.fixture(scope="module")
def core(cluster: LocalClusterThread) -> Iterator[Core]:
    api = core_api(cluster.url)
    yield api
    api.api_client.close()


def sim_pod(name: str, *, annotations: dict[str, str] | None = None, restart: str = "Never",
            env: dict[str, str] | None = None) -> dict[str, Any]:
    pod = python_pod(name, "raise SystemExit('a simulated pod runs no process')", restart=restart, **SIM)
    pod["metadata"]["annotations"] = annotations or {}
    if env:
        pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return pod


def create(core: Core, body: dict[str, Any]) -> str:
    core.create_namespaced_pod("default", body)
    return str(body["metadata"]["name"])


def main_status(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]


def reported(core: Core, name: str) -> dict[str, Any] | None:
    """The pod's first container status, once the kubelet has reported one."""
    pod = pod_dict(core, name)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses")
    return statuses[0] if statuses else None


def status_writes(cluster: LocalClusterThread, name: str) -> int:
    return sum(1 for r in list(cluster.apiserver.requests)
               if r.resource == "pods" and r.subresource == "status" and r.name == name
               and r.user_agent.startswith("tfjob-local-kubelet"))


def test_a_simulated_pod_runs_for_its_declared_duration_and_succeeds(cluster: LocalClusterThread, core: Core) -> None:
    name = create(core, sim_pod(unique("sim-ok"), annotations={"kubelocal.dev/sim-duration": "2m"}))
    running = wait_until(phase_is(core, name, "Running", "Succeeded"), what=f"{name} to run")
    seen_running = time.monotonic()
    assert running["status"]["phase"] == "Running" and running["spec"]["nodeName"].startswith("sim-")
    assert main_status(running)["ready"] and "running" in main_status(running)["state"]
    done = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish", timeout=20)
    elapsed = time.monotonic() - seen_running
    assert done["status"]["phase"] == "Succeeded"
    terminated = main_status(done)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert terminated["containerID"].startswith("sim://")
    # 120 simulated seconds at 60 per second: 2 s of wall time between start and finish.
    ran = (times.parse_time(terminated["finishedAt"]) - times.parse_time(terminated["startedAt"])).total_seconds()
    assert 1 <= ran <= 4 and elapsed < 4
    assert condition(done, "Ready")["reason"] == "PodCompleted"
    # One write per transition: Running, then Succeeded (no Pending: it started at once).
    assert status_writes(cluster, name) == 2


def test_a_simulated_pod_fails_with_the_declared_exit_code(core: Core) -> None:
    name = create(core, sim_pod(unique("sim-bad"), annotations={"kubelocal.dev/sim-duration": "30",
                                                                "kubelocal.dev/sim-exit-code": "3"}))
    done = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish", timeout=20)
    assert done["status"]["phase"] == "Failed"
    terminated = main_status(done)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert main_status(done)["restartCount"] == 0


def test_a_containers_env_overrides_the_pods_annotations(core: Core) -> None:
    name = create(core, sim_pod(unique("sim-env"), annotations={"kubelocal.dev/sim-exit-code": "0"},
                                env={"KUBELOCAL_SIM_DURATION": "6s", "KUBELOCAL_SIM_EXIT_CODE": "7"}))
    done = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish", timeout=20)
    assert (done["status"]["phase"], main_status(done)["state"]["terminated"]["exitCode"]) == ("Failed", 7)


def test_a_start_delay_keeps_the_pod_pending_with_containers_creating(cluster: LocalClusterThread,
                                                                       core: Core) -> None:
    name = create(core, sim_pod(unique("sim-slow"), annotations={"kubelocal.dev/sim-start-delay": "90s",
                                                                 "kubelocal.dev/sim-duration": "1m"}))
    pending = wait_until(lambda: reported(core, name), what=f"{name} to report its container")
    assert pending["state"]["waiting"]["reason"] == "ContainerCreating"
    wait_until(phase_is(core, name, "Running"), what=f"{name} to start after its delay", timeout=10)
    wait_until(phase_is(core, name, "Succeeded"), what=f"{name} to succeed", timeout=10)
    assert status_writes(cluster, name) == 3  # Pending, Running, Succeeded


def test_on_failure_restarts_a_failing_simulated_container(core: Core) -> None:
    name = create(core, sim_pod(unique("sim-crash"), restart="OnFailure",
                                annotations={"kubelocal.dev/sim-duration": "3s", "kubelocal.dev/sim-exit-code": "1"}))
    status = wait_until(lambda: (s := reported(core, name)) and s["restartCount"] >= 2 and s,
                        what=f"{name} to restart twice", timeout=20)
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert pod_dict(core, name)["status"]["phase"] == "Running"  # type: ignore[index]
    core.delete_namespaced_pod(name, "default")
    wait_until(lambda: pod_dict(core, name) is None, what="the kubelet to confirm the deletion")


def test_a_pod_without_a_duration_runs_until_deleted(core: Core) -> None:
    name = create(core, sim_pod(unique("sim-forever")))
    wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    core.delete_namespaced_pod(name, "default")
    wait_until(lambda: pod_dict(core, name) is None, what="the kubelet to confirm the deletion")


def test_a_bad_duration_leaves_the_pod_pending_with_a_message_naming_the_annotation(core: Core) -> None:
    name = create(core, sim_pod(unique("sim-typo"), annotations={"kubelocal.dev/sim-duration": "ten minutes"}))
    def config_error() -> dict[str, Any] | None:
        waiting = ((reported(core, name) or {}).get("state") or {}).get("waiting") or {}
        return waiting if waiting.get("reason") == "CreateContainerConfigError" else None

    waiting = wait_until(config_error, what=f"{name} to report the bad setting")
    assert "kubelocal.dev/sim-duration" in waiting["message"] and "'ten minutes'" in waiting["message"]
    assert pod_dict(core, name)["status"]["phase"] == "Pending"  # type: ignore[index]
    core.delete_namespaced_pod(name, "default")


def test_eviction_of_a_simulated_pod_fails_it(cluster: LocalClusterThread, core: Core) -> None:
    name = create(core, sim_pod(unique("sim-evict")))
    wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    cluster.call(cluster.kubelet.evict("default", name))
    pod = wait_until(phase_is(core, name, "Failed"), what=f"{name} to be evicted")
    assert pod["status"]["reason"] == "Evicted"
    assert condition(pod, "DisruptionTarget")["reason"] == "TerminationByKubelet"


def test_a_killed_simulated_container_says_who_killed_it_and_its_restart_policy_applies(
        cluster: LocalClusterThread, core: Core) -> None:
    name = create(core, sim_pod(unique("sim-oom")))
    wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    cluster.call(cluster.kubelet.kill_container("default", name))
    pod = wait_until(phase_is(core, name, "Failed"), what=f"{name} to fail")
    terminated = main_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        137, "Killed", "Killed with SIGKILL by a fault injection")


def test_process_and_simulated_pods_run_side_by_side(core: Core) -> None:
    real = create(core, python_pod(unique("real"), "print('hello from a process')",
                                   nodeSelector={"kubernetes.io/hostname": "proc"}))
    sims = [create(core, sim_pod(unique("side"), annotations={"kubelocal.dev/sim-duration": "1s"}))
            for _ in range(6)]
    done = wait_until(phase_is(core, real, "Succeeded", "Failed"), what="the process pod to finish")
    assert done["status"]["phase"] == "Succeeded" and done["spec"]["nodeName"] == "proc"
    assert core.read_namespaced_pod_log(real, "default") == "hello from a process\n"
    assert main_status(done)["containerID"].startswith("process://")
    for name in sims:
        pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
        assert pod["status"]["phase"] == "Succeeded" and pod["spec"]["nodeName"].startswith("sim-")


def test_simulated_nodes_are_ready_labelled_and_renew_their_leases(core: Core) -> None:
    node = core.read_node("sim-0")
    assert node.metadata.labels[SIM_LABEL] == "true"
    assert node.status.node_info.container_runtime_version == "sim://local"
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert SIM_LABEL not in (core.read_node("proc").metadata.labels or {})
    coordination = kubernetes.client.CoordinationV1Api(core.api_client)
    first = coordination.read_namespaced_lease("sim-1", "kube-node-lease").spec.renew_time
    wait_until(lambda: coordination.read_namespaced_lease("sim-1", "kube-node-lease").spec.renew_time > first,
               what="the simulated node to renew its Lease", timeout=10)


def test_nodes_spec_declares_simulated_nodes_beside_process_nodes() -> None:
    nodes = parse_node_spec("1000x{gpu:8,cpu:96,memory:1Ti,sim:true};cpu{cpu:4,sim:false}")
    assert len(nodes) == 1001
    assert all(n["metadata"]["labels"][SIM_LABEL] == "true" for n in nodes[:1000])
    assert nodes[0]["status"]["capacity"] == {"cpu": "96", "memory": "1Ti", "pods": "1000", "nvidia.com/gpu": "8"}
    assert SIM_LABEL not in nodes[-1]["metadata"]["labels"]


@pytest.mark.parametrize(("spec", "says"), [
    ("2x{gpu:8,sim:yes}", "sim:yes must be sim:true or sim:false"),
    ("2x{gpu:8,sim}", "'sim' needs a value"),
    ("2x{gpu:8,simulated:true}", "unknown key 'simulated'"),
])
def test_a_bad_sim_key_is_refused_naming_it(spec: str, says: str) -> None:
    with pytest.raises(NodeSpecError, match=says.replace("(", r"\(")):
        parse_node_spec(spec)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("1.5", 1.5), ("90s", 90.0), ("5m", 300.0),
                                               ("1h30m", 5400.0), ("250ms", 0.25), ("0", 0.0)])
def test_durations_read_as_seconds_or_go_durations(text: str, seconds: float) -> None:
    assert parse_seconds("where", text) == seconds


@pytest.mark.parametrize("text", ["ten", "-5", "5d", "inf", "nan", ""])
def test_a_bad_duration_is_refused_naming_where_it_was_set(text: str) -> None:
    with pytest.raises(SimConfigError, match=r"^pod annotation kubelocal\.dev/sim-duration: "):
        parse_seconds("pod annotation kubelocal.dev/sim-duration", text)


def test_plans_take_env_first_then_annotations_then_defaults() -> None:
    pod = {"metadata": {"annotations": {"kubelocal.dev/sim-duration": "10m", "kubelocal.dev/sim-start-delay": "5"}},
           "spec": {"containers": [{"name": "a"}]}}
    assert container_plan(pod, {"name": "a"}).duration == 600.0
    assert container_plan(pod, {"name": "a", "env": [{"name": "KUBELOCAL_SIM_DURATION", "value": "1m"}]}) \
        .duration == 60.0
    assert container_plan({"metadata": {}}, {"name": "a"}).duration is None  # runs until deleted
    assert container_plan(pod, {"name": "init"}, init=True).duration == 0.0  # init: env only, done at once
    assert start_delay(pod) == 5.0
    with pytest.raises(SimConfigError, match='container "a" env KUBELOCAL_SIM_EXIT_CODE: \'256\''):
        container_plan(pod, {"name": "a", "env": [{"name": "KUBELOCAL_SIM_EXIT_CODE", "value": "256"}]})


def test_a_status_write_that_failed_five_times_is_sent_again_later(cluster: LocalClusterThread, core: Core) -> None:
    """Under load a status write can fail five times in a row (timeouts, 5xx, a dropped keep-alive). A simulated
    pod running until deleted changes no more, so nothing marks its status again: the kubelet sends it anyway
    within its 10 s resync, as the kubelet's status manager does, instead of leaving the pod Pending for good."""
    name = unique("resent")
    cluster.apiserver.faults.fail("PATCH", f"/pods/{name}/status$", 500, count=5)
    create(core, sim_pod(name))
    running = wait_until(phase_is(core, name, "Running"), timeout=30, what=f"{name} Running")
    assert main_status(running)["state"]["running"]
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
