"""Kueue v0.17.0 itself (built with `make upstream`) in front of the operator serving `kubeflow.org/v1`, on the
upstream plane: its webhook suspends a queued TFJob, its ClusterQueue's quota admits one job at a time (the
other waits with Kueue's own reason), and a higher-priority workload preempts a training job, whose workers
save at the step they stop and resume there when Kueue admits the job again.

Kueue runs on the host (`kubelocal.upstream.kueue`): installed from its module's manifests, reached through its
webhook Service by kube-apiserver. Skips, saying what to build, when Kueue or the plane is not built."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes.client.exceptions import ApiException
from operator_harness import REPO, Cluster, running_operator
from polling import wait_for

from kubelocal.upstream import kueue
from kubelocal.upstream.cluster import UpstreamClusterThread
from tfjob_operator.api.crd import CRD_PATH, KUBEFLOW_CRD_PATH
from tfjob_operator.client.local.image import worker_image_defaults

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("upstream-kueue")]
KF = "kubeflow.org"
KQ = "kueue.x-k8s.io"
#: One job's two workers of 500m fill the ClusterQueue: a second job waits, or preempts if it ranks higher.
QUOTA_CPU = "1"


@pytest.fixture(scope="module")
def kueue_parts() -> tuple[Path, Path]:
    try:
        return kueue.find_binary(), kueue.module_dir()
    except kueue.KueueMissing as exc:
        pytest.skip(f"Kueue is not built: {exc}")


def create(cluster: Cluster, group: str, plural: str, body: dict[str, Any], namespace: str | None = None) -> Any:
    version = body["apiVersion"].rpartition("/")[2]
    if namespace is None:
        return cluster.custom.create_cluster_custom_object(group, version, plural, body)
    return cluster.custom.create_namespaced_custom_object(group, version, namespace, plural, body)


def queues(cluster: Cluster) -> None:
    """A flavor, a ClusterQueue with room for one job that preempts lower priorities, its LocalQueue, and two
    WorkloadPriorityClasses."""
    create(cluster, KQ, "resourceflavors", {"apiVersion": f"{KQ}/v1beta2", "kind": "ResourceFlavor",
                                            "metadata": {"name": "default"}})
    create(cluster, KQ, "clusterqueues", {
        "apiVersion": f"{KQ}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team"},
        "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                     {"name": "default", "resources": [{"name": "cpu", "nominalQuota": QUOTA_CPU},
                                                       {"name": "memory", "nominalQuota": "8Gi"}]}]}]}})
    create(cluster, KQ, "localqueues", {"apiVersion": f"{KQ}/v1beta2", "kind": "LocalQueue",
                                        "metadata": {"name": "team", "namespace": "default"},
                                        "spec": {"clusterQueue": "team"}}, "default")
    for name, value in (("low", 10), ("high", 1000)):
        create(cluster, KQ, "workloadpriorityclasses", {"apiVersion": f"{KQ}/v1beta2",
                                                        "kind": "WorkloadPriorityClass",
                                                        "metadata": {"name": name}, "value": value})


@pytest.fixture(scope="module")
def plane(upstream_binaries: dict[str, Path], kueue_parts: tuple[Path, Path],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamClusterThread]:
    """The plane, once both builds are known to be there (a missing Kueue skips before anything starts)."""
    with UpstreamClusterThread(workdir=tmp_path_factory.mktemp("kueue"), nodes="node-0{cpu:8,memory:16Gi}",
                               crds=(CRD_PATH, KUBEFLOW_CRD_PATH), max_grace_seconds=15.0,
                               image=worker_image_defaults(), binaries=upstream_binaries) as up:
        yield up


@pytest.fixture(scope="module")
def manager(plane: UpstreamClusterThread, kueue_parts: tuple[Path, Path]) -> Iterator[kueue.Kueue]:
    binary, module = kueue_parts
    # `pod` too: the operator's own `kueue` gang backend makes a tfjob.dev job's pods a Kueue plain pod group.
    running = kueue.Kueue(plane.cluster.plane, plane.cluster.workdir / "kueue", binary=binary, module=module,
                          frameworks=(*kueue.FRAMEWORKS, "pod"))
    plane.call(running.start(), timeout=kueue.START_TIMEOUT + 30)
    try:
        yield running
    finally:
        plane.call(running.stop())


@pytest.fixture(scope="module")
def cluster(plane: UpstreamClusterThread, manager: kueue.Kueue) -> Iterator[Cluster]:
    kubeconfig = plane.cluster.workdir / "kubeconfig"
    plane.write_kubeconfig(kubeconfig)
    c = Cluster(plane, kubeconfig, plane.cluster.workdir)
    queues(c)
    with running_operator(c, TFJOB_KUBEFLOW_API="all"):
        yield c


def tfjob(name: str, command: list[str], *, priority: str | None = None,
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """A kubeflow.org/v1 TFJob of two workers (500m each) submitted to the LocalQueue `team`."""
    container = {"name": "tensorflow", "image": "ghcr.io/tfjob-operator/tfjob-worker:0.1.0", "command": command,
                 "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}
    labels = {f"{KQ}/queue-name": "team", **({f"{KQ}/priority-class": priority} if priority else {})}
    return {"apiVersion": f"{KF}/v1", "kind": "TFJob", "metadata": {"name": name, "labels": labels},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                                                   "template": {"spec": {"containers": [container]}}}}}}


def submit(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = cluster.custom.create_namespaced_custom_object(KF, "v1", "default", "tfjobs", body)
    return created


def state(cluster: Cluster, name: str) -> str | None:
    """The Kubeflow state: the type of the last condition that is True (its `State` column)."""
    conditions = [c for c in cluster.status(name, KF).get("conditions") or [] if c["status"] == "True"]
    return conditions[-1]["type"] if conditions else None


def workload(cluster: Cluster, job: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the job (owned by it)."""
    items = cluster.custom.list_namespaced_custom_object(KQ, "v1beta2", "default", "workloads")["items"]
    return next((w for w in items if any(o["name"] == job and o["kind"] == "TFJob"
                                         for o in w["metadata"].get("ownerReferences") or [])), None)


def wl_condition(cluster: Cluster, job: str, ctype: str) -> dict[str, Any] | None:
    wl = workload(cluster, job) or {}
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def kubeflow_pods(cluster: Cluster, job: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod("default", label_selector=f"training.kubeflow.org/job-name={job}")
                .items)


def wait_file(path: Path) -> list[str]:
    """A worker that runs until the test creates `path`, then succeeds."""
    return ["python", "-c", f"import os, time\nwhile not os.path.exists({str(path)!r}): time.sleep(0.1)"]


def test_kueue_suspends_admits_by_quota_and_queues_the_second_job_until_the_first_finishes(
        cluster: Cluster, tmp_path: Path) -> None:
    release = tmp_path / "release-first"
    first = submit(cluster, tfjob("first", wait_file(release)))
    # Kueue's mutating webhook suspended it at creation: the operator creates no pod until Kueue admits it.
    assert first["spec"]["runPolicy"]["suspend"] is True
    wait_for(lambda: (c := wl_condition(cluster, "first", "Admitted")) and c["status"] == "True", 60,
             what="the first job's Workload admitted")
    wait_for(lambda: state(cluster, "first") == "Running", 90, what="the first job Running")
    assert cluster.job("first", KF)["spec"]["runPolicy"]["suspend"] is False  # type: ignore[index]

    second = submit(cluster, tfjob("second", wait_file(tmp_path / "never-needed")))
    assert second["spec"]["runPolicy"]["suspend"] is True
    pending = wait_for(lambda: (c := wl_condition(cluster, "second", "QuotaReserved")) and c["reason"] == "Pending"
                       and c, 60, what="the second Workload pending on quota")
    assert pending["status"] == "False" and "insufficient unused quota for cpu" in pending["message"], pending
    # Until then the operator keeps it suspended, as Kueue asks: no pods, Kubeflow's state Suspended.
    assert kubeflow_pods(cluster, "second") == [] and state(cluster, "second") == "Suspended"

    # The builtin gang steps aside for a job Kueue manages: its pods carry no scheduling gate at all.
    pods = kubeflow_pods(cluster, "first")
    assert len(pods) == 2 and all(not p.spec.scheduling_gates for p in pods), [p.spec.scheduling_gates for p in pods]

    release.touch()
    wait_for(lambda: state(cluster, "first") == "Succeeded", 90, what="the first job Succeeded")
    wait_for(lambda: (c := wl_condition(cluster, "first", "Finished")) and c["status"] == "True", 60,
             what="Kueue saw the first job finish")
    wait_for(lambda: (c := wl_condition(cluster, "second", "Admitted")) and c["status"] == "True", 60,
             what="the second job's Workload admitted once the quota is free")
    (tmp_path / "never-needed").touch()
    wait_for(lambda: state(cluster, "second") == "Succeeded", 120, what="the second job Succeeded")


def test_a_tfjob_dev_job_is_admitted_by_kueue_as_a_plain_pod_group_sharing_the_quota(
        cluster: Cluster, tmp_path: Path) -> None:
    """Kueue has no tfjob.dev integration; the operator's `kueue` gang backend labels the pods as one pod group,
    which Kueue's pod integration gates (`kueue.x-k8s.io/admission`) until its quota admits the group whole."""
    release = tmp_path / "release-holder"
    submit(cluster, tfjob("holder", wait_file(release)))
    wait_for(lambda: state(cluster, "holder") == "Running", 90, what="the kubeflow.org job holding the quota")
    container = {"name": "tensorflow", "image": "local", "command": ["python", "-c", "print('grouped done')"],
                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}
    cluster.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", {
        "apiVersion": "tfjob.dev/v1", "kind": "TFJob",
        "metadata": {"name": "grouped", "annotations": {"tfjob.dev/gang-backend": "kueue"}},
        "spec": {"runPolicy": {"schedulingPolicy": {"queue": "team"}},
                 "tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                                               "template": {"spec": {"containers": [container]}}}}}})
    queued = wait_for(lambda: (c := cluster.condition("grouped", "Queued")) and c["status"] == "True" and c, 60,
                      what="the operator reporting the pod group queued by Kueue")
    assert queued["message"] == "waiting for Kueue to admit the workload (LocalQueue team; 2 of 2 pods gated)"
    gates = {p.metadata.name: [g.name for g in p.spec.scheduling_gates or []] for p in cluster.pods("grouped")}
    # Kueue 0.17's pod webhook adds its topology gate beside the admission gate (the replay had only the latter);
    # it takes both out when it admits the group.
    both = ["kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"]
    assert gates == {"grouped-worker-0": both, "grouped-worker-1": both}, gates
    pending = wait_for(lambda: (c := group_condition(cluster, "grouped-0", "QuotaReserved")) and c, 60,
                       what="Kueue's Workload of the pod group")
    assert pending["status"] == "False" and "insufficient unused quota for cpu" in pending["message"], pending

    release.touch()
    wait_for(lambda: state(cluster, "holder") == "Succeeded", 90, what="the holder Succeeded")
    cluster.wait_state("grouped", "Succeeded", timeout=120)
    assert (group_condition(cluster, "grouped-0", "Admitted") or {}).get("status") == "True"


def workload_over(cluster: Cluster, group: str) -> bool:
    try:
        cluster.custom.get_namespaced_custom_object(KQ, "v1beta2", "default", "workloads", group)
    except ApiException as exc:
        return exc.status == 404
    return (group_condition(cluster, group, "Finished") or {}).get("status") == "True"


def group_condition(cluster: Cluster, group: str, ctype: str) -> dict[str, Any] | None:
    """A condition of the Workload Kueue made for a plain pod group (named after the group)."""
    try:
        wl = cluster.custom.get_namespaced_custom_object(KQ, "v1beta2", "default", "workloads", group)
    except Exception:  # not made yet
        return None
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


STEPS = 12  # one epoch; after the resume at HOLD the 4 left never reach HOLD again (the hold counts this run's steps)
HOLD = 8


def test_a_higher_priority_job_preempts_a_training_job_which_saves_at_the_step_and_resumes_there(
        cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    train = ["python", "-m", "tfjob_worker", "--epochs", "1", "--steps-per-epoch", str(STEPS),
             "--log-every-steps", "4", "--output-dir", str(out)]
    env = {"PYTHONPATH": str(REPO / "worker_image"), "TFJOB_FAULT_HOLD_AT_STEP": f"{HOLD} task=worker:1",
           "TFJOB_STOP_CHECK_EVERY_STEPS": "1"}
    submit(cluster, tfjob("low", train, priority="low", env=env))
    wait_for(lambda: f"[tfjob] fault: holding after step {HOLD}" in log(cluster, "low-worker-1"), 240,
             interval=0.5, what=f"worker 1 of the low job holding after step {HOLD}")
    chief_log = follow(cluster, "low-worker-0")

    submit(cluster, tfjob("high", ["python", "-c", "print('high priority done')"], priority="high"))
    evicted = wait_for(lambda: (c := wl_condition(cluster, "low", "Evicted")) and c["status"] == "True" and c, 60,
                       what="Kueue evicting the low job's Workload")
    assert evicted["reason"] == "Preempted", evicted
    wait_for(lambda: cluster.job("low", KF)["spec"]["runPolicy"]["suspend"] is True, 30,  # type: ignore[index]
             what="Kueue suspending the low job")
    # The operator deletes the pods; each worker's SIGTERM makes the gang agree on a step and the chief save.
    stopped = wait_for(lambda: re.search(r"preempted: stopped after epoch 1 step (\d+) \(samples (\d+)\); saving",
                                         "".join(chief_log)), 60, interval=0.3,
                       what="the low job's chief stopping at the agreed step and saving")
    step, samples = int(stopped[1]), int(stopped[2])
    assert step == HOLD

    wait_for(lambda: state(cluster, "high") == "Succeeded", 120, what="the high-priority job Succeeded")
    wait_for(lambda: state(cluster, "low") == "Succeeded", 240, what="the low job, admitted again, Succeeded")
    resumed = log(cluster, "low-worker-0")
    assert f"[tfjob] resumed from backup at epoch 1 step {step} samples {samples}" in resumed, resumed


def test_kueue_preempting_a_pod_group_stops_the_gang_at_a_step_and_the_next_attempt_resumes_there(
        cluster: Cluster, tmp_path: Path) -> None:
    """A tfjob.dev job under the `kueue` backend: Kueue preempts its pod group by deleting the pods (marked
    `TerminationTarget`, reason `WorkloadEvictedDueToPreempted`); the workers save at the agreed step, and the
    operator recreates the gang as the next attempt, a new pod group that Kueue admits once the quota frees."""
    out = tmp_path / "out"
    container = {"name": "tensorflow", "image": "local",
                 "command": ["python", "-m", "tfjob_worker", "--epochs", "1", "--steps-per-epoch", str(STEPS),
                             "--log-every-steps", "4", "--output-dir", str(out)],
                 "env": [{"name": "PYTHONPATH", "value": str(REPO / "worker_image")},
                         {"name": "TFJOB_FAULT_HOLD_AT_STEP", "value": f"{HOLD} task=worker:1 attempt=0"},
                         {"name": "TFJOB_STOP_CHECK_EVERY_STEPS", "value": "1"}],
                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}
    cluster.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", {
        "apiVersion": "tfjob.dev/v1", "kind": "TFJob",
        "metadata": {"name": "gp", "annotations": {"tfjob.dev/gang-backend": "kueue"}},
        "spec": {"runPolicy": {"schedulingPolicy": {"queue": "team"}},
                 "tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": {
                     "metadata": {"labels": {f"{KQ}/priority-class": "low"}},
                     "spec": {"containers": [container]}}}}}})
    wait_for(lambda: f"[tfjob] fault: holding after step {HOLD}" in log(cluster, "gp-worker-1"), 240,
             interval=0.5, what=f"worker 1 of the pod group holding after step {HOLD}")
    chief_log = follow(cluster, "gp-worker-0")

    submit(cluster, tfjob("urgent", ["python", "-c", "print('urgent done')"], priority="high"))
    stopped = wait_for(lambda: re.search(r"preempted: stopped after epoch 1 step (\d+) \(samples (\d+)\); saving",
                                         "".join(chief_log)), 90, interval=0.3,
                       what="the pod group's chief stopping at the agreed step and saving")
    step, samples = int(stopped[1]), int(stopped[2])
    assert step == HOLD
    restarting = wait_for(lambda: (c := cluster.condition("gp", "Restarting")) and c["status"] == "True" and c, 60,
                          what="the operator restarting the gang Kueue stopped")
    assert restarting["reason"] == "PodPreempted", restarting
    assert (group_condition(cluster, "gp-0", "Evicted") or {}).get("reason") == "Preempted"

    wait_for(lambda: state(cluster, "urgent") == "Succeeded", 120, what="the high-priority job Succeeded")
    done = cluster.wait_state("gp", "Succeeded", timeout=240)
    assert done["restartCount"] == 1 and done.get("failureRestarts", 0) == 0, done  # not counted as a failure
    # attempt 0's group ended once its pods stopped (they may not be replaced in it), so Kueue let them go;
    # attempt 1's pods, under the same names, are a group of their own, which Kueue admitted
    assert {(p.metadata.labels["tfjob.dev/attempt"], p.metadata.labels[f"{KQ}/pod-group-name"])
            for p in cluster.pods("gp")} == {("1", "gp-1")}
    # and attempt 0's Workload is over: Finished, or (its pods gone) deleted by Kueue
    assert workload_over(cluster, "gp-0")
    resumed = log(cluster, "gp-worker-0")
    assert f"[tfjob] resumed from backup at epoch 1 step {step} samples {samples}" in resumed, resumed


def test_stopping_kueue_leaves_no_process_and_takes_its_webhooks_out(
        cluster: Cluster, manager: kueue.Kueue, plane: UpstreamClusterThread) -> None:
    """Last in the module: Kueue's pod webhook fails closed, so a Kueue gone with its webhooks left would refuse
    every pod of the namespace."""
    assert manager.process is not None
    pid = manager.process.pid
    plane.call(manager.stop())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    left = cluster.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name")
    assert "kueue" not in left, left
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-kueue"},
           "spec": {"containers": [{"name": "main", "image": "local", "command": ["true"]}]}}
    cluster.core.create_namespaced_pod("default", pod, dry_run="All")  # no webhook left to refuse it


def log(cluster: Cluster, pod: str) -> str:
    try:
        return str(cluster.core.read_namespaced_pod_log(pod, "default"))
    except Exception:  # not created yet, or being replaced
        return ""


def follow(cluster: Cluster, pod: str) -> list[str]:
    """`kubectl logs -f POD`, gathered in the background until the container ends (Kueue's suspend deletes the
    pod, and with it the log)."""
    lines: list[str] = []
    stream = cluster.core.read_namespaced_pod_log(pod, "default", follow=True, _preload_content=False)

    def gather() -> None:
        for chunk in stream.stream(amt=None):
            lines.append(chunk.decode(errors="replace"))

    threading.Thread(target=gather, daemon=True).start()
    return lines
