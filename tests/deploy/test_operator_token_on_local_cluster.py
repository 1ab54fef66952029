"""The chart's operator on the local control plane under exactly the chart's RBAC, as on a cluster.

The kubelet gives the operator's pod a token of the chart's ServiceAccount, bound to the pod (TokenRequest),
and the API server authenticates every call the operator makes with it and judges it by the chart's Role and
ClusterRole (rendered by Helm, applied with kubectl). A job runs to its pods; with one rule taken out of the
chart's RBAC, the operator's log and the job's status show kube-apiserver's 403.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deployhelpers import chart_cluster, kubectl, renderer, whoami
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


def strings(value: Any) -> str:
    """Every string in a JSON value, one a line (a message is found as written, not JSON-escaped)."""
    if isinstance(value, dict):
        return "\n".join(strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(strings(v) for v in value)
    return value if isinstance(value, str) else ""


def logs(config: Path) -> str:
    return kubectl(config, "logs", "-n", NS, "deployment/tfjob-operator", "--tail=-1").stdout


def without_verb(objects: list[dict[str, Any]], resource: str, verb: str) -> dict[str, Any]:
    """The chart's ClusterRole with `verb` taken out of the one rule on `resource`."""
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    (rule,) = [r for r in role["rules"] if r["resources"] == [resource]]
    assert verb in rule["verbs"]
    cut = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
    return {**role, "rules": [cut if r is rule else r for r in role["rules"]]}


def test_a_permission_taken_out_of_the_charts_rbac_gives_the_operator_kube_apiservers_403(
    cluster: tuple[Path, Path],
) -> None:
    config, _ = cluster
    objects = renderer.render_chart({})
    (whole,) = [o for o in objects if o["kind"] == "ClusterRole"]
    # Pod creation: a refusal the operator cannot retry its way out of, so the job fails and says why.
    kubectl(config, "apply", "-f", "-", stdin=yaml.safe_dump(without_verb(objects, "pods", "create")))
    try:
        kubectl(config, "apply", "-f", "-", stdin=tfjob("denied", 2))
        message = (f'pods is forbidden: User "{OPERATOR}" cannot create resource "pods" in API group "" '
                   'in the namespace "default"')
        status = wait_for(lambda: (s := job_status(config, "denied")) and message in strings(s) and s, 90,
                          what="the job's status to show the 403")
        assert message in logs(config), logs(config)[-3000:]
        assert status.get("state") == "Failed"
        assert get(config, "pods", "-l", "tfjob.dev/job-name=denied")["items"] == []
    finally:
        kubectl(config, "apply", "-f", "-", stdin=yaml.safe_dump(whole))
