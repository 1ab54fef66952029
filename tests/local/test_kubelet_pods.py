"""The process kubelet, through the API as users see it: phases, exit codes, restarts, env, logs,
deletion, eviction, node loss and shared volumes."""

from __future__ import annotations

import json
import signal
import socket
import textwrap
import threading
from pathlib import Path
from typing import Any

import kubernetes
import psutil
import pytest
from local_helpers import condition, phase_is, pod_dict, python_pod, unique
from polling import wait_for as wait_until

from kubelocal.cluster import LocalClusterThread

pytestmark = pytest.mark.timeout(90)
Core = kubernetes.client.CoreV1Api


def create(core: Core, body: dict[str, Any]) -> str:
    core.create_namespaced_pod("default", body)
    return str(body["metadata"]["name"])


def main_status(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]


def test_pod_that_exits_zero_succeeds_with_exit_code_zero(core: Core) -> None:
    name = create(core, python_pod(unique("ok"), "print('done')"))
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    assert pod["status"]["phase"] == "Succeeded"
    terminated = main_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert pod["spec"]["nodeName"] in ("node-0", "node-1")
    assert condition(pod, "PodScheduled")["status"] == "True"
    assert condition(pod, "Ready") | {"lastTransitionTime": None} == {
        "type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": None}
    assert pod["status"]["podIP"] == "127.0.0.1" and pod["status"]["startTime"]


def test_pod_that_exits_three_fails_with_exit_code_three(core: Core) -> None:
    name = create(core, python_pod(unique("bad"), "import sys; sys.exit(3)"))
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    assert pod["status"]["phase"] == "Failed"
    terminated = main_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert main_status(pod)["restartCount"] == 0


def test_running_pod_is_ready_with_a_running_container(core: Core) -> None:
    name = create(core, python_pod(unique("run"), "import time; time.sleep(60)"))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    status = main_status(pod)
    assert "running" in status["state"] and status["ready"] and status["started"]
    wait_until(lambda: condition(pod_dict(core, name) or {"status": {}}, "Ready").get("status") == "True",
               what="Ready=True")
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


COUNTING = textwrap.dedent("""
    import os, sys
    n = int(open('count').read()) if os.path.exists('count') else 0
    open('count', 'w').write(str(n + 1))
    sys.exit(0 if n >= 2 else 1)
""")


def test_on_failure_restarts_until_success_and_counts_restarts(core: Core) -> None:
    name = create(core, python_pod(unique("retry"), COUNTING, restart="OnFailure"))
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    status = main_status(pod)
    assert pod["status"]["phase"] == "Succeeded"
    assert status["restartCount"] == 2
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["lastState"]["terminated"]["exitCode"] == 1


def test_always_restarts_a_crashing_container_with_crash_loop_back_off(cluster: LocalClusterThread,
                                                                        core: Core) -> None:
    name = unique("crash")
    seen: list[str] = []
    watcher = kubernetes.watch.Watch()
    done = threading.Event()

    def watch() -> None:
        for event in watcher.stream(core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}",
                                    timeout_seconds=60):
            for status in event["object"].status.container_statuses or []:
                if status.state.waiting:
                    seen.append(status.state.waiting.reason)
                # Back-offs are short here; under load one may pass between two status writes, so wait for both.
                if status.restart_count >= 2 and "CrashLoopBackOff" in seen:
                    done.set()
                    watcher.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    create(core, python_pod(name, "import sys; sys.exit(1)", restart="Always"))
    assert done.wait(60), f"no restart twice with a CrashLoopBackOff in between (waiting reasons seen: {seen})"
    pod = pod_dict(core, name)
    assert pod and pod["status"]["phase"] == "Running"
    assert "CrashLoopBackOff" in seen
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    thread.join(5)


ENV_DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def test_env_values_field_refs_and_config_maps_reach_the_process(core: Core, workdir: Path) -> None:
    name = unique("env")
    core.create_namespaced_config_map("default", {"metadata": {"name": f"{name}-cfg"}, "data": {"MODE": "fast"}})
    body = python_pod(name, ENV_DUMP, container={"env": [
        {"name": "PLAIN", "value": "v"},
        {"name": "DERIVED", "value": "$(PLAIN)-x"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": f"{name}-cfg", "key": "MODE"}}},
        {"name": "TF_CONFIG", "value": '{"cluster": {"worker": ["127.0.0.1:2222"]}}'},
    ]})
    body["metadata"]["annotations"] = {"note": "hello"}
    create(core, body)
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    env = json.loads(core.read_namespaced_pod_log(name, "default"))
    assert {k: env.get(k) for k in ("PLAIN", "DERIVED", "POD_NAME", "POD_NS", "POD_UID", "APP", "NOTE", "NODE",
                                     "IP", "MODE", "TF_CONFIG", "HOSTNAME")} == {
        "PLAIN": "v", "DERIVED": "v-x", "POD_NAME": name, "POD_NS": "default",
        "POD_UID": pod["metadata"]["uid"], "APP": "local-test", "NOTE": "hello", "NODE": pod["spec"]["nodeName"],
        "IP": "127.0.0.1", "MODE": "fast", "TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:2222"]}}',
        "HOSTNAME": name,
    }
    # not the kubelet's own KUBECONFIG: one presenting the pod's ServiceAccount token
    assert env["KUBECONFIG"] == str(workdir / "pods" / f"default_{name}_{pod['metadata']['uid']}" / "kubeconfig")


def test_missing_config_map_holds_the_container_in_create_container_config_error(core: Core) -> None:
    name = create(core, python_pod(unique("nocm"), ENV_DUMP, container={"env": [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]}))

    def waiting_reason() -> str | None:
        pod = pod_dict(core, name)
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
        return statuses and (statuses[0]["state"].get("waiting") or {}).get("reason")

    wait_until(lambda: waiting_reason() == "CreateContainerConfigError", what="CreateContainerConfigError")
    assert (pod_dict(core, name) or {})["status"]["phase"] == "Pending"
    core.delete_namespaced_pod(name, "default")
    wait_until(lambda: pod_dict(core, name) is None, what=f"{name} to be deleted")


FOLLOWED = textwrap.dedent("""
    import os, time
    print('first line')
    while not os.path.exists('/ctl/go'):
        time.sleep(0.02)
    print('second line')
""")


def test_logs_are_followed_through_the_official_client_as_lines_arrive(core: Core, tmp_path: Path) -> None:
    name = create(core, python_pod(
        unique("follow"), FOLLOWED,
        volumes=[{"name": "ctl", "hostPath": {"path": str(tmp_path)}}],
        container={"volumeMounts": [{"name": "ctl", "mountPath": "/ctl"}]}))
    wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    resp = core.read_namespaced_pod_log(name, "default", follow=True, _preload_content=False)
    received = b""
    chunks = resp.stream(amt=None, decode_content=False)
    while b"first line" not in received:
        received += next(chunks)
    assert b"second line" not in received
    assert (pod_dict(core, name) or {})["status"]["phase"] == "Running"
    (tmp_path / "go").touch()
    for chunk in chunks:  # ends when the container exits
        received += chunk
    assert received == b"first line\nsecond line\n"
    assert core.read_namespaced_pod_log(name, "default", tail_lines=1) == "second line\n"


def test_previous_logs_belong_to_the_restarted_container(core: Core) -> None:
    code = "import os; n = os.path.exists('seen'); open('seen', 'w'); print('run', int(n)); os._exit(0 if n else 1)"
    name = create(core, python_pod(unique("prev"), code, restart="OnFailure"))
    wait_until(phase_is(core, name, "Succeeded"), what=f"{name} to succeed")
    assert core.read_namespaced_pod_log(name, "default") == "run 1\n"
    assert core.read_namespaced_pod_log(name, "default", previous=True) == "run 0\n"


def test_logs_of_a_pod_the_kubelet_never_ran_are_refused(core: Core) -> None:
    name = create(core, python_pod(unique("gated"), "print(1)", schedulingGates=[{"name": "example.com/hold"}]))
    with pytest.raises(kubernetes.client.ApiException) as err:
        core.read_namespaced_pod_log(name, "default")
    assert err.value.status == 400
    core.delete_namespaced_pod(name, "default")


PIDS = textwrap.dedent("""
    import os, signal, subprocess, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(['sleep', '300'])
    open('pids', 'w').write(f'{os.getpid()} {child.pid}')
    time.sleep(300)
""")


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's zombie may wait for PID 1 to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pod_workdir(workdir: Path, pod: dict[str, Any]) -> Path:
    meta = pod["metadata"]
    return workdir / "pods" / f"default_{meta['name']}_{meta['uid']}" / "work"


def _pids(workdir: Path, pod: dict[str, Any]) -> list[int]:
    path = pod_workdir(workdir, pod) / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() and path.read_text() else []


def test_deletion_kills_the_whole_process_group_after_the_grace_period(core: Core, workdir: Path) -> None:
    name = create(core, python_pod(unique("del"), PIDS, terminationGracePeriodSeconds=1))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    pids = wait_until(lambda: _pids(workdir, pod), what="the pod to record its pids")
    assert all(alive(p) for p in pids)
    core.delete_namespaced_pod(name, "default")
    terminating = pod_dict(core, name)
    assert terminating and terminating["metadata"].get("deletionTimestamp")  # the kubelet confirms, not the server
    wait_until(lambda: pod_dict(core, name) is None, what=f"{name} to be gone", timeout=15)
    wait_until(lambda: not any(alive(p) for p in pids), what="no stray process", timeout=5)


def test_eviction_fails_the_pod_with_reason_evicted_and_a_disruption_target(
        cluster: LocalClusterThread, core: Core, workdir: Path) -> None:
    name = create(core, python_pod(unique("evict"), PIDS))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    pids = wait_until(lambda: _pids(workdir, pod), what="the pod to record its pids")
    cluster.call(cluster.kubelet.evict("default", name))
    pod = wait_until(phase_is(core, name, "Failed"), what=f"{name} to fail")
    assert (pod["status"]["reason"], pod["status"]["message"]) == ("Evicted", "The node was low on resource: memory. ")
    disruption = condition(pod, "DisruptionTarget")
    assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
    terminated = main_status(pod)["state"]["terminated"]
    # It ignores SIGTERM: the kubelet's own SIGKILL ended it, and the status says so (not OOMKilled, not the log).
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        137, "Killed", "Killed with SIGKILL by the kubelet: still running when the 0s grace period after SIGTERM ended")
    # SIGKILL went to the whole group before Failed was written; the kernel may take a moment to finish them.
    wait_until(lambda: not any(alive(p) for p in pids), what="the evicted pod's processes to be gone")


def test_a_container_a_fault_killed_says_who_killed_it_and_restarts(cluster: LocalClusterThread, core: Core,
                                                                    workdir: Path) -> None:
    code = "import os, time; first = not os.path.exists('ran'); open('ran', 'w'); time.sleep(60 if first else 0)"
    name = create(core, python_pod(unique("oom"), code, restart="OnFailure"))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    wait_until(lambda: (pod_workdir(workdir, pod) / "ran").exists(), what="the first run to start")
    cluster.call(cluster.kubelet.kill_container("default", name, signal.SIGKILL, why="a test"))
    pod = wait_until(phase_is(core, name, "Succeeded"), what=f"{name} to succeed after its restart")
    last = main_status(pod)["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"], last["message"]) == (137, "Killed", "Killed with SIGKILL by a test")
    assert main_status(pod)["restartCount"] == 1


def test_a_container_over_its_memory_limit_is_oom_killed_by_the_kernel_and_says_so(cluster: LocalClusterThread,
                                                                                   core: Core) -> None:
    memory = cluster.kubelet.memory
    if not memory.enforced:
        pytest.skip(f"memory limits {memory.why}")
    hog = "print('allocating', flush=True); block = bytearray(400 * 2**20); print('not reached')"
    limit = {"container": {"resources": {"limits": {"memory": "64Mi"}}}}
    name = create(core, python_pod(unique("oom"), hog, **limit))
    within = create(core, python_pod(unique("fits"), "block = bytearray(8 * 2**20)", **limit))
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    terminated = main_status(pod)["state"]["terminated"]
    assert (pod["status"]["phase"], terminated["exitCode"], terminated["reason"]) == ("Failed", 137, "OOMKilled")
    assert core.read_namespaced_pod_log(name, "default") == "allocating\n"
    assert wait_until(phase_is(core, within, "Succeeded", "Failed"), what=f"{within} to finish")["status"][
        "phase"] == "Succeeded"
    assert memory.base is not None and not list(memory.base.glob(f"{pod['metadata']['uid']}_*"))  # gone with it


@pytest.mark.parametrize("limits", [{}, {"memory": "64Mi"}], ids=["no-limit", "memory-limit"])
def test_a_command_that_does_not_exist_fails_to_start_as_start_error(core: Core, limits: dict[str, str]) -> None:
    container = {"command": ["no-such-trainer", "--epochs", "1"], "resources": {"limits": limits}}
    name = create(core, python_pod(unique("nocmd"), "", container=container))
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    terminated = main_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
    assert terminated["message"].startswith("failed to start container process: exec: 'no-such-trainer'")


def test_init_containers_run_first_and_share_the_pod_volumes(core: Core) -> None:
    body = python_pod(unique("init"), "print(open('/shared/init.txt').read())",
                      volumes=[{"name": "shared", "emptyDir": {}}],
                      container={"volumeMounts": [{"name": "shared", "mountPath": "/shared"}]})
    body["spec"]["initContainers"] = [{"name": "prepare", "image": "python:3.11", "command": [
        "python", "-c", "open('/shared/init.txt', 'w').write('prepared')"],
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}]
    name = create(core, body)
    pod = wait_until(phase_is(core, name, "Succeeded", "Failed"), what=f"{name} to finish")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert condition(pod, "Initialized")["status"] == "True"
    assert core.read_namespaced_pod_log(name, "default") == "prepared\n"


def test_a_persistent_volume_claim_is_shared_between_pods(core: Core, workdir: Path) -> None:
    claim = unique("claim")
    volume = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
              "container": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}}
    writer = create(core, python_pod(unique("writer"), "open('/data/msg', 'w').write('from writer')", **volume))
    wait_until(phase_is(core, writer, "Succeeded"), what="the writer to succeed")
    reader = create(core, python_pod(unique("reader"), "print(open('/data/msg').read())",
                                     volumes=volume["volumes"], container=dict(volume["container"])))
    wait_until(phase_is(core, reader, "Succeeded"), what="the reader to succeed")
    assert core.read_namespaced_pod_log(reader, "default") == "from writer\n"
    assert (workdir / "volumes" / "default" / claim / "msg").read_text() == "from writer"


LOSSY = {"tolerations": [{"key": "lossy", "operator": "Exists", "effect": "NoSchedule"}],
         "nodeSelector": {"kubernetes.io/hostname": "lossy"}}


def test_node_loss_kills_processes_and_leaves_pods_terminating_until_the_node_returns(
        cluster: LocalClusterThread, core: Core, workdir: Path) -> None:
    name = create(core, python_pod(unique("lost"), PIDS, **LOSSY))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run on the lossy node")
    assert pod["spec"]["nodeName"] == "lossy"
    pids = wait_until(lambda: _pids(workdir, pod), what="the pod to record its pids")
    cluster.call(cluster.kubelet.lose_node("lossy"))
    try:
        def unknown() -> Any:
            node = core.read_node("lossy")
            ready = next(c for c in node.status.conditions if c.type == "Ready")
            # The Ready condition and the taints are two writes: wait for the taints themselves (the node
            # carries its own `lossy` taint from the start).
            unreachable = {(t.key, t.effect) for t in node.spec.taints or []} >= {
                ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
            return node if ready.status == "Unknown" and unreachable else None

        wait_until(unknown, what="the node lifecycle controller to mark the silent node unreachable")
        wait_until(lambda: not any(alive(p) for p in pids), what="processes to die", timeout=5)
        terminating = wait_until(lambda: (p := pod_dict(core, name)) and p["metadata"].get("deletionTimestamp") and p,
                                 what="the taint manager to delete the pod")
        assert condition(terminating, "DisruptionTarget")["reason"] == "DeletionByTaintManager"
        assert condition(terminating, "Ready")["status"] == "False"
    finally:
        cluster.call(cluster.kubelet.restore_node("lossy"))
    wait_until(lambda: pod_dict(core, name) is None, what="the returning kubelet to confirm the deletion")
    ready = next(c for c in core.read_node("lossy").status.conditions if c.type == "Ready")
    assert ready.status == "True"
    wait_until(lambda: not any(t.key == "node.kubernetes.io/unreachable" for t in core.read_node("lossy").spec.taints
                               or []), what="the unreachable taints to be lifted")


def test_a_node_marked_unreachable_while_its_kubelet_lives_is_posted_ready_again_and_untainted(core: Core) -> None:
    # What the node lifecycle controller writes when a Lease renewal came late (e.g. under a burst of pods).
    core.patch_node_status("lossy", {"status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
         "message": "Kubelet stopped posting node status."}]}})
    taints = [t.to_dict() for t in core.read_node("lossy").spec.taints or []]
    core.patch_node("lossy", {"spec": {"taints": [*taints, {"key": "node.kubernetes.io/unreachable",
                                                             "effect": "NoSchedule"}]}})

    def ready_and_untainted() -> bool:
        node = core.read_node("lossy")
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        return ready.status == "True" and not any(t.key == "node.kubernetes.io/unreachable"
                                                  for t in node.spec.taints or [])

    wait_until(ready_and_untainted, timeout=20, what="the kubelet to post Ready and the controller to lift the taint")


def test_eviction_api_deletes_the_pod_gracefully_and_stops_its_processes(core: Core, workdir: Path) -> None:
    name = create(core, python_pod(unique("apievict"), PIDS, terminationGracePeriodSeconds=1))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    pids = wait_until(lambda: _pids(workdir, pod), what="the pod to record its pids")
    core.create_namespaced_pod_eviction(name, "default", {"metadata": {"name": name, "namespace": "default"}})
    wait_until(lambda: pod_dict(core, name) is None, what=f"{name} to be gone", timeout=15)
    wait_until(lambda: not any(alive(p) for p in pids), what="no stray process", timeout=5)


def test_pods_still_start_and_report_after_the_server_drops_every_watch(cluster: LocalClusterThread,
                                                                         core: Core) -> None:
    assert cluster.call(_drop_watches(cluster)) >= 4  # the scheduler's and the kubelet's pod and node watches
    name = create(core, python_pod(unique("rewatch"), "print('after drop')"))
    wait_until(phase_is(core, name, "Succeeded"), what=f"{name} to succeed after the watches were dropped")
    assert core.read_namespaced_pod_log(name, "default") == "after drop\n"


async def _drop_watches(cluster: LocalClusterThread) -> int:
    return cluster.apiserver.faults.drop_watches()


def test_a_failing_config_map_read_is_retried_until_the_pod_starts(cluster: LocalClusterThread, core: Core) -> None:
    name = unique("flaky")
    core.create_namespaced_config_map("default", {"metadata": {"name": f"{name}-cfg"}, "data": {"K": "v"}})
    cluster.apiserver.faults.fail("GET", f"/configmaps/{name}-cfg$", 500, count=2)
    create(core, python_pod(name, "import os; print(os.environ['K'])", container={"env": [
        {"name": "K", "valueFrom": {"configMapKeyRef": {"name": f"{name}-cfg", "key": "K"}}}]}))
    wait_until(phase_is(core, name, "Succeeded"), what=f"{name} to succeed once the reads work")
    assert core.read_namespaced_pod_log(name, "default") == "v\n"
    reads = [r.status_code for r in cluster.apiserver.requests if r.name == f"{name}-cfg" and r.verb == "get"]
    assert reads == [500, 500, 200]


def test_fallback_to_logs_on_error_puts_the_log_tail_in_the_termination_message(core: Core) -> None:
    code = "import sys; print('loading'); print('ValueError: bad input', file=sys.stderr); sys.exit(1)"
    policy = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    name = create(core, python_pod(unique("msg"), code, container=policy))
    pod = wait_until(phase_is(core, name, "Failed"), what=f"{name} to fail")
    assert main_status(pod)["state"]["terminated"]["message"] == "loading\nValueError: bad input\n"


def test_a_message_the_container_writes_to_its_termination_path_wins_over_the_log(core: Core) -> None:
    code = ("import sys; print('noise'); open(sys.argv[1], 'w').write('checkpoint dir is read-only'); "
            "sys.exit(3)")
    name = create(core, python_pod(unique("msgfile"), code, container={
        "args": ["/dev/termination-log"], "terminationMessagePolicy": "FallbackToLogsOnError"}))
    pod = wait_until(phase_is(core, name, "Failed"), what=f"{name} to fail")
    assert main_status(pod)["state"]["terminated"]["message"] == "checkpoint dir is read-only"


def _ready(core: Core, name: str) -> tuple[bool, str]:
    pod = pod_dict(core, name) or {"status": {}}
    statuses = pod["status"].get("containerStatuses") or [{}]
    return bool(statuses[0].get("ready")), str(condition(pod, "Ready").get("status"))


def test_exec_readiness_probe_decides_when_a_running_pod_is_ready(core: Core, tmp_path: Path) -> None:
    probe = {"exec": {"command": ["python", "-c", "import os, sys; sys.exit(not os.path.exists('/ctl/ready'))"]},
             "periodSeconds": 1}
    name = create(core, python_pod(
        unique("probe"), "import time; time.sleep(60)",
        volumes=[{"name": "ctl", "hostPath": {"path": str(tmp_path)}}],
        container={"readinessProbe": probe, "volumeMounts": [{"name": "ctl", "mountPath": "/ctl"}]}))
    wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    wait_until(lambda: (pod_dict(core, name) or {}).get("status", {}).get("containerStatuses"), what="statuses")
    assert _ready(core, name) == (False, "False")
    (tmp_path / "ready").touch()
    wait_until(lambda: _ready(core, name) == (True, "True"), what="the probe to pass", timeout=15)
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_http_readiness_probe_against_the_pods_own_server(core: Core, workdir: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ("import http.server as h; "
              f"h.test(h.SimpleHTTPRequestHandler, port={port}, bind='127.0.0.1')")
    probe = {"httpGet": {"path": "/ok", "port": "http"}, "periodSeconds": 1}
    name = create(core, python_pod(unique("http"), server, container={
        "readinessProbe": probe, "ports": [{"name": "http", "containerPort": port}]}))
    pod = wait_until(phase_is(core, name, "Running"), what=f"{name} to run")
    assert _ready(core, name)[0] is False  # GET /ok is 404 until the file exists
    (pod_workdir(workdir, pod) / "ok").write_text("yes")  # the server serves the pod's working directory
    wait_until(lambda: _ready(core, name) == (True, "True"), what="the HTTP probe to pass", timeout=15)
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
