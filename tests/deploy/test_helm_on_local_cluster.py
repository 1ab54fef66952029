"""Helm itself (helm-python-sdk, Helm 4 defaults: server-side apply, `--wait`) installs, upgrades and uninstalls
the chart on the local control plane `tfjob local up` runs: the operator's Deployment becomes a pod on the
process kubelet running `tfjob operator`, its webhook serves the API server, a job trains to Succeeded, an
upgrade with a changed value rolls the operator, and an uninstall leaves nothing of the release behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from deployhelpers import chart_cluster, kubectl, release_left
from polling import wait_for

pytestmark = pytest.mark.timeout(240)
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tfjob-operator"
NS = "tfjob-system"


@pytest.fixture()
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    with chart_cluster(tmp_path) as path:
        yield path


def get(kubeconfig: Path, *args: str) -> Any:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def _tfjob(name: str, replicas: int) -> str:
    return yaml.safe_dump({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": {
        "tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "local", "command": ["python", "-c", "print('ok')"]}]}}}}}})


def _operator_pods(kubeconfig: Path) -> list[str]:
    pods = get(kubeconfig, "pods", "-n", NS, "-l", "app.kubernetes.io/name=tfjob-operator")["items"]
    return sorted(p["metadata"]["name"] for p in pods)


def test_helm_installs_upgrades_and_uninstalls_the_charts_operator_on_the_local_cluster(kubeconfig: Path) -> None:
    with helm.Config(kubeconfig_path=kubeconfig, namespace=NS) as cluster, helm.Chart.load(CHART) as chart:
        cluster.install(chart, "tfjob-operator", namespace=NS, create_namespace=True, wait="watcher", timeout=120)
        assert "successfully rolled out" in kubectl(
            kubeconfig, "rollout", "status", "-n", NS, "deployment/tfjob-operator", "--timeout=60s").stdout
        [pod] = get(kubeconfig, "pods", "-n", NS)["items"]
        assert pod["spec"]["containers"][0]["args"][0] == "operator"
        assert pod["status"]["phase"] == "Running"
        assert all(c["status"] == "True" for c in pod["status"]["conditions"] if c["type"] == "Ready")

        refused = wait_for(lambda: (p := kubectl(kubeconfig, "apply", "-f", "-", stdin=_tfjob("bad", 0),
                                                 check=False)).returncode and "denied the request" in p.stderr
                           and p, 60, what="the chart's webhook to refuse a job with 0 workers")
        assert "admission webhook" in refused.stderr and "replicas" in refused.stderr
        kubectl(kubeconfig, "apply", "-f", "-", stdin=_tfjob("good", 2))
        wait_for(lambda: get(kubeconfig, "tfjob", "good").get("status", {}).get("state") == "Succeeded", 90,
                 what="the helm-installed operator to run the job to Succeeded")

        before_rs = {rs["metadata"]["name"] for rs in get(kubeconfig, "replicasets", "-n", NS)["items"]}
        before_pods = _operator_pods(kubeconfig)
        cluster.upgrade(chart, "tfjob-operator", {"logLevel": "DEBUG"}, namespace=NS, wait="watcher", timeout=120)
        assert "successfully rolled out" in kubectl(
            kubeconfig, "rollout", "status", "-n", NS, "deployment/tfjob-operator", "--timeout=60s").stdout
        after_rs = get(kubeconfig, "replicasets", "-n", NS)["items"]
        new_rs = [rs for rs in after_rs if rs["metadata"]["name"] not in before_rs]
        assert len(new_rs) == 1 and new_rs[0]["status"].get("readyReplicas") == 1
        wait_for(lambda: not set(_operator_pods(kubeconfig)) & set(before_pods), 60,
                 what="the old operator pod to be gone after the upgrade")
        [pod] = get(kubeconfig, "pods", "-n", NS)["items"]
        assert "DEBUG" in json.dumps(pod["spec"]["containers"][0])

        cluster.uninstall("tfjob-operator", wait="watcher", timeout=120)
        assert [r["name"] for r in cluster.list(all_states=True)] == []

    wait_for(lambda: not release_left(kubeconfig), 60, what="everything the release installed to be gone")
