"""Each lifecycle rule of docs/design.md §5, as a user sees it: `kubectl get tfj`, conditions, Events and pods."""

from __future__ import annotations

import json
import urllib.request

import kubernetes
import pytest
from operator_harness import Cluster, Operator, py, replica, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("operator")]

QUICK = py("import time; time.sleep(0.5)")
FOREVER = py("import time; time.sleep(600)")
EXIT_130_THEN_0 = py("import os, sys, time; time.sleep(0.3); "
                     "sys.exit(130 if os.environ['TFJOB_ATTEMPT'] == '0' else 0)")


def test_two_workers_succeed_and_kubectl_shows_the_job(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 2)})
    status = cluster.wait_state(name, "Succeeded")
    assert status["replicaStatuses"]["Worker"]["succeeded"] >= 1
    assert status["startTime"] and status["completionTime"] and status["observedGeneration"] == 1
    row = cluster.kubectl("get", "tfj", name, "--no-headers").split()
    # NAME STATE WORKERS RESTARTS AGE
    assert (row[0], row[1], row[2].split("/")[1], row[3]) == (name, "Succeeded", "2", "0")
    reasons = [r for r, _ in cluster.wait_events(name, "JobCreated", "WorkerSucceeded")]
    # The happy path posts two Events: created, and the outcome (Running shows in the STATE column).
    assert sorted(reasons) == ["JobCreated", "WorkerSucceeded"]
    service = cluster.core.read_namespaced_service(name, "default")
    assert service.spec.cluster_ip == "None" and service.metadata.owner_references[0].name == name


def test_chief_success_stops_the_parameter_server(cluster: Cluster) -> None:
    name = cluster.submit({"Chief": replica(QUICK), "Worker": replica(QUICK), "PS": replica(FOREVER)})
    cluster.wait_state(name, "Succeeded")
    assert cluster.condition(name, "Succeeded")["reason"] == "ChiefSucceeded"  # type: ignore[index]
    wait_for(lambda: f"{name}-ps-0" not in cluster.pod_phases(name), 20, what="the PS pod deleted (cleanPodPolicy)")


def test_retryable_exit_code_restarts_the_whole_gang_as_the_next_attempt(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(EXIT_130_THEN_0, 2)})
    status = cluster.wait_state(name, "Succeeded")
    assert (status["restartCount"], status["failureRestarts"]) == (1, 1)
    restarts = [m for r, m in cluster.wait_events(name, "RetryableExitCode") if r == "RetryableExitCode"]
    assert len(restarts) == 1 and "code 130" in restarts[0] and "attempt 1" in restarts[0]
    attempts = {p.metadata.labels["tfjob.dev/attempt"] for p in cluster.pods(name)}
    assert attempts <= {"1"}


def test_exit_code_1_fails_the_job_naming_pod_container_code_and_exception(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(py("print('epoch 1'); raise ValueError('bad layer size')"), 1)})
    cluster.wait_state(name, "Failed")
    failed = cluster.condition(name, "Failed")
    assert failed is not None and failed["reason"] == "NonRetryableExitCode"
    assert f"{name}-worker-0" in failed["message"] and "container tensorflow" in failed["message"]
    assert "exited with code 1: ValueError: bad layer size" in failed["message"]
    assert cluster.status(name)["restartCount"] == 0
    # The Event is posted right after the status it announces: wait for it rather than race it.
    events = wait_for(lambda: [m for r, m in cluster.events(name) if r == "NonRetryableExitCode"], 10,
                      what="the NonRetryableExitCode Event")
    assert events == [failed["message"]]


def test_a_crash_loop_under_on_failure_ends_once_restarts_exceed_backoff_limit_naming_the_exception(
        cluster: Cluster) -> None:
    bug = py("print('epoch 1'); raise KeyError('label')")
    name = cluster.submit({"Worker": replica(bug, 1, policy="OnFailure")}, backoffLimit=1)
    cluster.wait_state(name, "Failed")
    failed = cluster.condition(name, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert "exited with code 1: KeyError: 'label'" in failed["message"]


def test_restart_policy_never_fails_even_on_a_retryable_code(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(py("import sys; sys.exit(137)"), 1, policy="Never")})
    cluster.wait_state(name, "Failed")
    assert cluster.condition(name, "Failed")["reason"] == "RestartPolicyNever"  # type: ignore[index]


def test_backoff_limit_fails_the_job_after_that_many_failure_restarts(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(py("import sys; sys.exit(143)"), 1)}, backoffLimit=1)
    status = cluster.wait_state(name, "Failed")
    assert cluster.condition(name, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]
    assert (status["restartCount"], status["failureRestarts"]) == (1, 1)


def test_eviction_restarts_the_gang_without_consuming_the_backoff_limit(cluster: Cluster, tmp_path) -> None:
    # Attempt 0: worker-1 beats a heartbeat file; worker-0 exits 200 ("peer lost") once it stops.
    # Attempt 1: both exit 0. The eviction is the first failure, so it decides: one disruption restart.
    beat = tmp_path / "beat"
    code = ("import os, sys, time, pathlib\n"
            f"beat = pathlib.Path({str(beat)!r})\n"
            "if os.environ['TFJOB_ATTEMPT'] != '0': sys.exit(0)\n"
            "index = json_index = __import__('json').loads(os.environ['TF_CONFIG'])['task']['index']\n"
            "while True:\n"
            "    if index == 1: beat.write_text(str(time.time()))\n"
            "    elif beat.exists() and time.time() - float(beat.read_text() or 0) > 1.0: sys.exit(200)\n"
            "    time.sleep(0.1)\n")
    name = cluster.submit({"Worker": replica(py(code), 2)}, backoffLimit=0)
    cluster.wait_state(name, "Running")
    cluster.call(cluster.local.kubelet.evict("default", f"{name}-worker-1", "The node was low on resource: memory."))
    status = cluster.wait_state(name, "Succeeded")
    assert (status["restartCount"], status["failureRestarts"]) == (1, 0)
    reasons = [r for r, _ in cluster.wait_events(name, "PodEvicted")]
    assert "PodEvicted" in reasons and "RetryableExitCode" not in reasons


def test_parameter_server_failure_restarts_that_pod_alone(cluster: Cluster, tmp_path) -> None:
    # The PS dies with 137 on its first run; the worker finishes once the PS has started a second time.
    runs = tmp_path / "ps-runs"
    ps = py(f"import pathlib, sys, time; p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() "
            "else 0; p.write_text('x' * (n + 1)); time.sleep(0.5); sys.exit(137) if n == 0 else time.sleep(600)")
    worker = py(f"import pathlib, time\nwhile len(pathlib.Path({str(runs)!r}).read_text() if "
                f"pathlib.Path({str(runs)!r}).exists() else '') < 2: time.sleep(0.1)")
    name = cluster.submit({"Worker": replica(worker, 1), "PS": replica(ps, 1)})
    status = cluster.wait_state(name, "Succeeded")
    assert status["restartCount"] == 0 and runs.read_text() == "xx"
    cluster.wait_events(name, "ReplicaRestarting")


def test_active_deadline_fails_the_job_and_stops_its_pods(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(FOREVER, 2)}, activeDeadlineSeconds=3)
    cluster.wait_state(name, "Failed", timeout=30)
    assert cluster.condition(name, "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    wait_for(lambda: all(p.metadata.deletion_timestamp or p.status.phase != "Running" for p in cluster.pods(name)),
             20, what="pods stopped")


def test_ttl_deletes_the_finished_job_and_garbage_collection_its_pods(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 1)}, ttlSecondsAfterFinished=2, cleanPodPolicy="None")
    cluster.wait_state(name, "Succeeded")
    wait_for(lambda: cluster.job(name) is None, 15, what="the job deleted by its TTL")
    wait_for(lambda: not cluster.pods(name), 15, what="its pods garbage-collected")


def test_suspend_deletes_the_pods_and_resume_recreates_them(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(FOREVER, 2)})
    cluster.wait_state(name, "Running")
    cluster.patch_spec(name, {"runPolicy": {"suspend": True}})
    cluster.wait_state(name, "Suspended")
    wait_for(lambda: not cluster.pods(name), 20, what="pods deleted while suspended")
    assert cluster.job(name) is not None
    cluster.patch_spec(name, {"runPolicy": {"suspend": False}})
    status = cluster.wait_state(name, "Running")
    assert status["restartCount"] == 0
    cluster.wait_events(name, "JobSuspended", "JobResumed")


def test_invalid_spec_fails_with_reason_invalid_spec_and_creates_no_pods(cluster: Cluster) -> None:
    two = {"replicas": 1, "template": {"spec": {"containers": [{"name": "main", "image": "x"},
                                                              {"name": "side", "image": "y"}]}}}
    name = cluster.submit({"Worker": two})
    cluster.wait_state(name, "Failed")
    failed = cluster.condition(name, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec" and 'no container named "tensorflow"' in failed[
        "message"]
    assert cluster.pods(name) == []


def test_replicas_change_on_a_running_job_is_refused_at_apply_time_naming_the_field(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(FOREVER, 2)})
    cluster.wait_state(name, "Running")
    with pytest.raises(kubernetes.client.ApiException) as refused:
        cluster.patch_spec(name, {"tfReplicaSpecs": {"Worker": {"replicas": 3}}})
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 422
    assert "spec.tfReplicaSpecs.Worker.replicas cannot change unless the job is suspended" in message
    assert (cluster.status(name).get("state"), len(cluster.pods(name))) == ("Running", 2)


def test_deleting_the_job_removes_its_pods_and_service_without_finalizers(cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(FOREVER, 2)})
    cluster.wait_state(name, "Running")
    assert not (cluster.job(name) or {})["metadata"].get("finalizers")
    cluster.custom.delete_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", name)
    wait_for(lambda: cluster.job(name) is None, 10, what="the job gone at once (no blocking finalizer)")
    wait_for(lambda: not cluster.pods(name), 20, what="pods garbage-collected")
    services = cluster.core.list_namespaced_service("default").items
    wait_for(lambda: name not in {s.metadata.name for s in cluster.core.list_namespaced_service("default").items},
             10, what="service garbage-collected")
    assert services is not None


def test_loopback_mode_gives_every_pod_its_own_recorded_tf_and_metrics_ports(cluster: Cluster) -> None:
    names = [cluster.submit({"Worker": replica(FOREVER, 2)}) for _ in range(2)]
    ports: list[int] = []
    for name in names:
        cluster.wait_state(name, "Running")
        for pod in cluster.pods(name):
            # Every pod records its gang's ports (a restarted operator reuses them for pods still to create).
            recorded = json.loads(pod.metadata.annotations["tfjob.dev/loopback-ports"])
            env = {e.name: e.value for e in pod.spec.containers[0].env}
            tf_config = json.loads(env["TF_CONFIG"])
            mine = tf_config["cluster"]["worker"][tf_config["task"]["index"]]
            assert mine == f"127.0.0.1:{recorded[pod.metadata.name]}"
            metrics_port = recorded[f"{pod.metadata.name}/metrics"]
            assert env["TFJOB_WORKER_METRICS_PORT"] == str(metrics_port)
            assert {(p.name, p.container_port) for p in pod.spec.containers[0].ports} >= {("tfjob-metrics",
                                                                                           metrics_port)}
        ports.extend(recorded.values())
        cluster.custom.delete_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", name)
    assert len(ports) == len(set(ports)) == 8  # a TF port and a metrics port per pod, none shared


def test_metrics_endpoint_counts_jobs_and_pods(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 1)})
    cluster.wait_state(name, "Succeeded")
    url = f"http://127.0.0.1:{operator.env['TFJOB_METRICS_PORT']}/metrics"
    text = wait_for(lambda: (t := urllib.request.urlopen(url, timeout=5).read().decode())
                    and "tfjob_jobs_succeeded_total" in t and t, 10, what="metrics")
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["tfjob_jobs_created_total"] >= 1 and values["tfjob_jobs_succeeded_total"] >= 1
    assert values["tfjob_pods_created_total"] >= 1
    assert values["tfjob_reconcile_duration_seconds_count"] >= 1


def test_liveness_endpoint_answers(operator: Operator) -> None:
    url = f"http://127.0.0.1:{operator.env['TFJOB_LIVENESS_PORT']}/healthz"

    def healthy() -> bool:
        try:
            return urllib.request.urlopen(url, timeout=5).status == 200
        except OSError:
            return False

    wait_for(healthy, 20, what="/healthz answering 200")
