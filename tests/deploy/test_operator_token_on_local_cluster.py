"""The chart's operator on the local control plane under exactly the chart's RBAC, as on a cluster.

The kubelet gives the operator's pod a token of the chart's ServiceAccount, bound to the pod (TokenRequest),
and the API server authenticates every call the operator makes with it and judges it by the chart's Role and
ClusterRole (rendered by Helm, applied with kubectl). A job runs to its pods; with one rule taken out of the
chart's RBAC, the operator's log shows kube-apiserver's 403 and the job's condition and an Event say what to
grant; the job runs once it is granted again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deployhelpers import chart_cluster, kubectl, refused_until_granted, renderer, whoami
from polling import wait_for

pytestmark = pytest.mark.timeout(300)
NS = renderer.NAMESPACE
OPERATOR = f"system:serviceaccount:{NS}:tfjob-operator"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(kubeconfig, workdir) of a plane running the chart's operator as a pod, its rollout done."""
    workdir = Path(tmp_path_factory.mktemp("operator-token"))
    with chart_cluster(workdir) as config:
        kubectl(config, "apply", "-f", "-", stdin=f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n")
        kubectl(config, "apply", "-f", "-", stdin=yaml.safe_dump_all(renderer.render_chart({})))
        kubectl(config, "rollout", "status", "-n", NS, "deployment/tfjob-operator", "--timeout=120s")
        yield config, workdir


def get(config: Path, *args: str) -> dict[str, Any]:
    return dict(json.loads(kubectl(config, "get", *args, "-o", "json").stdout))


def tfjob(name: str, replicas: int) -> str:
    # AllWorkers: the job succeeds once every worker has (by default worker 0 decides, and the other may still run).
    return yaml.safe_dump({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": {
        "successPolicy": "AllWorkers", "tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "local", "command": ["python", "-c", "print('ok')"]}]}}}}}})


def job_status(config: Path, name: str) -> dict[str, Any]:
    return dict(get(config, "tfjob", name).get("status") or {})


def test_the_operator_pod_authenticates_with_its_service_account_token_and_runs_a_job(
    cluster: tuple[Path, Path],
) -> None:
    config, workdir = cluster
    (pod,) = get(config, "pods", "-n", NS)["items"]
    meta = pod["metadata"]
    pod_dir = workdir / "pods" / f"{NS}_{meta['name']}_{meta['uid']}"
    # The mounted token names the chart's ServiceAccount; the API server says so to whoever presents it.
    mount = pod_dir / "net" / "serviceaccount"  # the pod network's mount (`tfjob local up`'s default)
    assert (mount / "namespace").read_text() == NS
    info = whoami(config, (mount / "token").read_text())
    assert info["username"] == OPERATOR
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == [meta["name"]]

    kubectl(config, "apply", "-f", "-", stdin=tfjob("allowed", 2))
    status = wait_for(lambda: (s := job_status(config, "allowed")).get("state") == "Succeeded" and s, 90,
                      what="the operator (under the chart's RBAC) to run the job to Succeeded")
    assert status["replicaStatuses"]["Worker"]["succeeded"] == 2  # both pods created, run and seen to end
    assert "forbidden" not in logs(config)


def logs(config: Path) -> str:
    return kubectl(config, "logs", "-n", NS, "deployment/tfjob-operator", "--tail=-1").stdout


def test_a_permission_taken_out_of_the_charts_rbac_gives_the_operator_kube_apiservers_403(
    cluster: tuple[Path, Path],
) -> None:
    config, _ = cluster
    # Pod creation refused by the authorizer: the operator's own permission, which an admin can grant; the job
    # waits saying what to grant (not failed), and runs once it is granted.
    refused_until_granted(config, tfjob("denied", 2), "denied")
