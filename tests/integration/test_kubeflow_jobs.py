"""The operator serving Kubeflow's `kubeflow.org/v1` TFJobs (TFJOB_KUBEFLOW_API=all) beside its own, against
the local control plane with Kubeflow's published CRD (which prunes any status field outside its schema)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from operator_harness import Cluster, Operator, py, replica
from polling import wait_for

from tfjob_operator.api import apigroups
from tfjob_operator.client import cli

KF = "kubeflow.org"
QUICK = py("import time; time.sleep(0.3)")
EXIT_130_THEN_0 = py("import os, sys, time; time.sleep(0.3); "
                     "sys.exit(130 if os.environ['TFJOB_ATTEMPT'] == '0' else 0)")
FOREVER = py("import time; time.sleep(600)")
CRASH = py("import sys; print('Traceback (most recent call last):'); sys.stderr.write('ValueError: bad batch\\n');"
           " sys.exit(1)")


#: The harness's cluster and operator (tests/integration/conftest.py) with Kubeflow's CRD and API served.
KUBEFLOW_CRD = True
OPERATOR_SETTINGS = {"TFJOB_KUBEFLOW_API": "all"}


def wait_kubeflow_state(cluster: Cluster, name: str, state: str, timeout: float = 40) -> dict:
    """Kubeflow's state is its last condition (the CRD's State column: .status.conditions[-1:].type)."""
    def reached() -> dict | None:
        status = cluster.status(name, KF)
        conditions = status.get("conditions") or []
        return status if conditions and conditions[-1]["type"] == state and conditions[-1]["status"] == "True" else None
    return wait_for(reached, timeout, what=f"{name} {state}")


def test_kubeflow_job_runs_and_its_status_stays_inside_kubeflows_schema(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 2)}, group=KF)
    status = wait_kubeflow_state(cluster, name, "Succeeded")
    assert set(status) <= set(apigroups.KUBEFLOW_STATUS_FIELDS)
    assert {"conditions", "replicaStatuses", "startTime", "completionTime", "lastReconcileTime"} <= set(status)
    assert status["replicaStatuses"]["Worker"]["succeeded"] >= 1  # worker 0 decides; worker 1 may be stopped
    assert status["replicaStatuses"]["Worker"]["selector"] == f"tfjob.dev/job-name={name},tfjob.dev/replica-type=worker"
    assert "Succeeded" in cluster.kubectl("get", f"tfjobs.{KF}", name)
    refs = {r.api_version for p in cluster.pods(name) for r in p.metadata.owner_references}
    assert refs == {"kubeflow.org/v1"}
    assert [e for e in cluster.core.list_namespaced_event("default").items
            if e.involved_object.name == name and e.involved_object.api_version == "kubeflow.org/v1"]


def test_a_gang_restart_of_a_kubeflow_job_counts_in_annotations(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(EXIT_130_THEN_0, 2)}, group=KF)
    wait_kubeflow_state(cluster, name, "Succeeded")
    annotations = (cluster.job(name, KF) or {})["metadata"]["annotations"]
    assert annotations[apigroups.ANNOTATION_RESTART_COUNT] == "1"
    assert annotations[apigroups.ANNOTATION_FAILURE_RESTARTS] == "1"
    assert {p.metadata.labels["tfjob.dev/attempt"] for p in cluster.pods(name)} == {"1"}


def test_a_replicas_change_on_a_running_kubeflow_job_is_refused_by_the_operator(
        cluster: Cluster, operator: Operator) -> None:
    """Kubeflow's CRD, vendored as published, takes the change (tfjob.dev/v1's refuses it at apply time): the
    operator keeps the gang at its size, says so on the state condition, and still does after a gang restart."""
    name = cluster.submit({"Worker": replica(FOREVER, 2)}, group=KF)
    wait_kubeflow_state(cluster, name, "Running")
    cluster.custom.patch_namespaced_custom_object(KF, "v1", "default", "tfjobs", name,
                                                  {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}})
    running = wait_for(lambda: (c := cluster.condition(name, "Running", KF)) and c["reason"] == "ReplicasChangeRefused"
                       and c, 20, what="the refusal on the Running condition")
    assert "Worker.replicas 2→3" in running["message"] and "suspend" in running["message"]
    cluster.wait_events(name, "ReplicasChangeRefused")
    cluster.core.delete_namespaced_pod(f"{name}-worker-0", "default")
    wait_for(lambda: (cluster.job(name, KF) or {})["metadata"]["annotations"].get(
        apigroups.ANNOTATION_RESTART_COUNT) == "1", 30, what="the whole-gang restart")
    wait_for(lambda: sorted(p.metadata.name for p in cluster.pods(name) if p.status.phase == "Running") == [
        f"{name}-worker-0", f"{name}-worker-1"], 30, what="the gang running again at its size")


def test_a_crash_looping_worker_fails_the_job_once_restarts_exceed_backoff_limit(
        cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(CRASH, 1, "OnFailure",
                                            **{"restartPolicy": "OnFailure"})}, group=KF, backoffLimit=1)
    status = wait_kubeflow_state(cluster, name, "Failed", timeout=60)
    failed = status["conditions"][-1]
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "restarted in place" in failed["message"] and "backoffLimit 1" in failed["message"]


def test_jobs_managed_by_another_controller_are_never_touched(cluster: Cluster, operator: Operator) -> None:
    theirs = cluster.submit({"Worker": replica(QUICK, 1)}, group=KF, managedBy=apigroups.MANAGED_BY_MULTIKUEUE)
    ours = cluster.submit({"Worker": replica(QUICK, 1)}, group=KF)
    wait_kubeflow_state(cluster, ours, "Succeeded")  # the operator saw both, in order
    assert cluster.status(theirs, KF) == {} and cluster.pods(theirs) == []


def test_tfjob_dev_job_naming_kubeflows_controller_is_ours_with_an_event(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 1)}, managedBy=apigroups.MANAGED_BY_KUBEFLOW)
    cluster.wait_state(name, "Succeeded")
    cluster.wait_events(name, "ManagedByKubeflowValue")


def test_unknown_managed_by_fails_a_kubeflow_job_as_invalid_spec(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 1)}, group=KF, managedBy="example.com/mine")
    failed = wait_kubeflow_state(cluster, name, "Failed")["conditions"][-1]
    assert failed["reason"] == "InvalidSpec" and "spec.runPolicy.managedBy: 'example.com/mine'" in failed["message"]


# --- the CLI's job helpers find kubeflow.org/v1 jobs by name -------------------------------------------------

SAYS_HELLO = py("print('hello from', __import__('os').environ['HOSTNAME'], flush=True)")


def tfjob_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`tfjob ARGS`: its exit code and what it printed. `status` and `wait` run the command's main here (each
    `tfjob` process spends over a CPU-second importing the client before its one request); `logs` runs as the
    command, since its writer holds the stdout of the process that imported it."""
    argv = [*args, "--kubeconfig", str(cluster.kubeconfig)]
    if args[0] == "logs":
        return subprocess.run([sys.executable, "-m", "tfjob_operator", *argv], capture_output=True, text=True,
                              timeout=60)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def test_status_wait_and_logs_find_a_kubeflow_job_by_its_name(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(SAYS_HELLO, 1)}, group=KF, cleanPodPolicy="None")
    waited = tfjob_cli(cluster, "wait", name, "--timeout", "40")
    assert (waited.returncode, waited.stdout) == (0, f"tfjobs.kubeflow.org/{name} condition met: Succeeded\n")
    status = tfjob_cli(cluster, "status", name)
    assert status.returncode == 0, status.stderr
    header = status.stdout.splitlines()[0]
    assert header == f"TFJob default/{name} (kubeflow.org/v1): Succeeded  workers 0/1  restarts 0"
    assert f"  {name}-worker-0 " in status.stdout and "exit 0" in status.stdout
    logs = tfjob_cli(cluster, "logs", name)
    assert (logs.returncode, logs.stdout) == (0, f"hello from {name}-worker-0\n")


def test_a_name_in_both_apis_is_tfjob_devs_unless_api_kubeflow_org(cluster: Cluster, operator: Operator) -> None:
    name = cluster.submit({"Worker": replica(QUICK, 1)})
    cluster.wait_state(name, "Succeeded")
    # The same name in Kubeflow's API, a job another controller manages (the operator keys jobs by name, so two
    # jobs of one name would share its bookkeeping; the CLI must still tell them apart).
    cluster.submit({"Worker": replica(QUICK, 1)}, name, group=KF, managedBy=apigroups.MANAGED_BY_MULTIKUEUE)
    assert tfjob_cli(cluster, "status", name).stdout.startswith(f"TFJob default/{name}: Succeeded")
    theirs = tfjob_cli(cluster, "status", name, "--api", "kubeflow.org").stdout
    assert theirs.startswith(f"TFJob default/{name} (kubeflow.org/v1): Pending  workers 0/1  restarts 0")
    assert theirs.endswith("pods:\n  (none)\n")  # tfjob.dev's pod of that name is not this job's
    waited = tfjob_cli(cluster, "wait", name, "--api", "kubeflow.org", "--for", "created", "--timeout", "1")
    assert (waited.returncode, waited.stderr) == (
        124, f"timed out after 1s waiting for tfjobs.kubeflow.org/{name} to be Created\n")


def test_a_name_in_neither_api_is_one_error_line_naming_both(cluster: Cluster, operator: Operator) -> None:
    for args in (("status", "nope"), ("wait", "nope", "--timeout", "5"), ("logs", "nope")):
        done = tfjob_cli(cluster, *args)
        assert (done.returncode, done.stdout, "Traceback" in done.stderr) == (1, "", False)
        assert done.stderr.startswith('error: get tfjob/nope: HTTP 404 Not Found: tfjobs.tfjob.dev "nope" not found; ')
        assert done.stderr.endswith("no kubeflow.org/v1 TFJob of that name either\n")
    only_kubeflow = tfjob_cli(cluster, "status", "nope", "--api", "kubeflow.org").stderr
    assert only_kubeflow.startswith("error: get tfjobs.kubeflow.org/nope: HTTP 404 Not Found: ")
