"""The chart's operator on the local control plane, as on a cluster: its Deployment becomes a pod on the
process kubelet running `tfjob operator` (the operator image maps to the installed command), it rolls out,
and the API server calls its validating webhook over TLS with the CA the operator patched in.

The chart is rendered by Helm (helm-python-sdk) and applied client-side with kubectl, as a user without Helm
would; test_helm_on_local_cluster.py installs it with Helm itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deployhelpers import chart_cluster, kubectl, renderer
from polling import wait_for

pytestmark = pytest.mark.timeout(240)
NS = "tfjob-system"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with chart_cluster(Path(tmp_path_factory.mktemp("chart"))) as path:
        yield path


def _tfjob(name: str, replicas: Any) -> str:
    return yaml.safe_dump({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": {
        "tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "local", "command": ["python", "-c", "print('ok')"]}]}}}}}})


def test_the_charts_operator_runs_as_a_pod_and_its_webhook_serves_the_api_server(kubeconfig: Path) -> None:
    manifests = yaml.safe_dump_all(renderer.render_chart({}))
    kubectl(kubeconfig, "apply", "-f", "-", stdin=f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n")
    kubectl(kubeconfig, "apply", "-f", "-", stdin=manifests)
    out = kubectl(kubeconfig, "rollout", "status", "-n", NS, "deployment/tfjob-operator", "--timeout=120s").stdout
    assert "successfully rolled out" in out
    pod = json.loads(kubectl(kubeconfig, "get", "pods", "-n", NS, "-o", "json").stdout)["items"][0]
    assert pod["spec"]["containers"][0]["args"][0] == "operator" and not pod["spec"]["containers"][0].get("command")

    def ca_patched() -> bool:
        config = json.loads(kubectl(kubeconfig, "get", "validatingwebhookconfigurations", "-o", "json").stdout)
        return all(hook.get("clientConfig", {}).get("caBundle") for c in config["items"] for hook in c["webhooks"])

    wait_for(ca_patched, 60, what="the operator to patch its CA into the webhook configuration")
    refused = wait_for(lambda: (p := kubectl(kubeconfig, "apply", "-f", "-", stdin=_tfjob("bad", 0), check=False))
                       .returncode and "denied the request" in p.stderr and p, 60,
                       what="the webhook to refuse a job with 0 workers")
    assert 'admission webhook' in refused.stderr and "replicas" in refused.stderr
    kubectl(kubeconfig, "apply", "-f", "-", stdin=_tfjob("good", 2))
    wait_for(lambda: json.loads(kubectl(kubeconfig, "get", "tfjob", "good", "-o", "json").stdout)
             .get("status", {}).get("state") == "Succeeded", 90, what="the operator pod to run the job to Succeeded")
