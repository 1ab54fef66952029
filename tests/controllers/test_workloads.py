"""Deployments, ReplicaSets and Jobs run pods, through the API and kubectl: rollouts that
`kubectl rollout status` follows, revision history, Job completion and failure."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes
from controller_helpers import kubectl, read, sleeper, unique
from polling import wait_for

from kubelocal.apiserver.thread import write_kubeconfig
from kubelocal.cluster import LocalClusterThread

NS = "default"
Apps = kubernetes.client.AppsV1Api
Core = kubernetes.client.CoreV1Api
Batch = kubernetes.client.BatchV1Api


def _deployment(name: str, replicas: int = 2, **spec: Any) -> dict[str, Any]:
    template = sleeper()
    template["metadata"]["labels"] = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template, **spec}}


def _kubeconfig(cluster: LocalClusterThread, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    write_kubeconfig(path, cluster.url)
    return path


def _running_pods(core: Core, app: str) -> list[dict[str, Any]]:
    pods = core.list_namespaced_pod(NS, label_selector=f"app={app}").items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def test_a_deployment_rolls_out_and_kubectl_rollout_status_sees_it_finish(
        cluster: LocalClusterThread, apps: Apps, core: Core, tmp_path: Path) -> None:
    name = unique("web")
    apps.create_namespaced_deployment(NS, _deployment(name))
    out = kubectl(_kubeconfig(cluster, tmp_path), "rollout", "status", f"deployment/{name}", "--timeout=60s").stdout
    assert f'deployment "{name}" successfully rolled out' in out
    d = read(apps.read_namespaced_deployment, name, NS)
    assert d is not None
    assert d["status"]["observedGeneration"] == d["metadata"]["generation"]
    assert (d["status"]["replicas"], d["status"]["updatedReplicas"], d["status"]["availableReplicas"]) == (2, 2, 2)
    assert {c["type"]: c["reason"] for c in d["status"]["conditions"]} == {
        "Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}
    assert len(_running_pods(core, name)) == 2
    row = kubectl(_kubeconfig(cluster, tmp_path), "get", "deployment", name, "--no-headers").stdout.split()
    assert row[:4] == [name, "2/2", "2", "2"], "NAME READY UP-TO-DATE AVAILABLE"
    sets = kubectl(_kubeconfig(cluster, tmp_path), "get", "rs", "-l", f"app={name}", "--no-headers").stdout.split()
    assert sets[1:4] == ["2", "2", "2"], "DESIRED CURRENT READY"


def test_changing_the_template_rolls_to_a_new_replicaset_and_keeps_history(
        cluster: LocalClusterThread, apps: Apps, core: Core, tmp_path: Path) -> None:
    name = unique("roll")
    kubeconfig = _kubeconfig(cluster, tmp_path)
    apps.create_namespaced_deployment(NS, _deployment(name, revisionHistoryLimit=1))
    kubectl(kubeconfig, "rollout", "status", f"deployment/{name}", "--timeout=60s")
    first = {p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=f"app={name}").items}
    for value in ("1", "2"):
        kubectl(kubeconfig, "set", "env", f"deployment/{name}", f"ROUND={value}")
        out = kubectl(kubeconfig, "rollout", "status", f"deployment/{name}", "--timeout=60s").stdout
        assert "successfully rolled out" in out
    pods = _running_pods(core, name)
    assert len(pods) == 2 and not first & {p.metadata.name for p in pods}
    assert all(p.spec.containers[0].env[0].value == "2" for p in pods)
    sets = apps.list_namespaced_replica_set(NS, label_selector=f"app={name}").items
    revisions = sorted(int(rs.metadata.annotations["deployment.kubernetes.io/revision"]) for rs in sets)
    assert revisions == [2, 3], "revisionHistoryLimit 1 keeps one old ReplicaSet besides the current one"
    d = read(apps.read_namespaced_deployment, name, NS)
    assert d is not None and d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"


def test_scaling_a_deployment_down_removes_pods(apps: Apps, core: Core) -> None:
    name = unique("scale")
    apps.create_namespaced_deployment(NS, _deployment(name, replicas=3))
    wait_for(lambda: len(_running_pods(core, name)) == 3, what="three pods")
    apps.patch_namespaced_deployment(name, NS, {"spec": {"replicas": 1}})
    wait_for(lambda: len(_running_pods(core, name)) == 1, what="one pod left")
    d = wait_for(lambda: (d := read(apps.read_namespaced_deployment, name, NS)) and d["status"].get("replicas") == 1
                 and d, what="the status to say 1 replica")
    assert d["status"]["availableReplicas"] == 1


def _job(name: str, code: str, **spec: Any) -> dict[str, Any]:
    template = copy.deepcopy(sleeper())
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["containers"][0]["command"] = ["python", "-c", code]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": template, **spec}}


def _job_condition(batch: Batch, name: str, ctype: str) -> dict[str, Any] | None:
    job = read(batch.read_namespaced_job, name, NS) or {}
    conds = [c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == ctype]
    return job if conds and conds[0]["status"] == "True" else None


def test_a_job_runs_its_completions_and_kubectl_wait_sees_it_complete(
        cluster: LocalClusterThread, batch: Batch, core: Core, tmp_path: Path) -> None:
    name = unique("job")
    batch.create_namespaced_job(NS, _job(name, "print('done')", completions=2, parallelism=1))
    out = kubectl(_kubeconfig(cluster, tmp_path), "wait", "--for=condition=complete", f"job/{name}",
                  "--timeout=60s").stdout
    assert "condition met" in out
    row = kubectl(_kubeconfig(cluster, tmp_path), "get", "job", name, "--no-headers").stdout.split()
    assert row[:3] == [name, "Complete", "2/2"], "NAME STATUS COMPLETIONS"
    job = read(batch.read_namespaced_job, name, NS)
    assert job is not None and job["status"]["succeeded"] == 2 and job["status"].get("completionTime")
    pods = core.list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={name}").items
    assert sorted(p.status.phase for p in pods) == ["Succeeded", "Succeeded"]


def test_a_job_whose_pods_keep_failing_fails_past_its_backoff_limit(batch: Batch) -> None:
    name = unique("fails")
    batch.create_namespaced_job(NS, _job(name, "raise SystemExit(3)", backoffLimit=1))
    job = wait_for(lambda: _job_condition(batch, name, "Failed"), what="the Job to fail")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2
