"""The upstream plane as a user sees it: kubectl against kube-apiserver v1.37.2, kubelocal's kubelet joined as real
nodes under the Node authorizer and NodeRestriction, pods run to completion with their logs and exec proxied by
the API server, ServiceAccount tokens from TokenRequest, simulated nodes beside process nodes."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from polling import wait_for
from ports import free_ports
from upstream_helpers import KUBECTL, Kubectl

from kubelocal.upstream.cluster import UpstreamClusterThread
from kubelocal.upstream.pki import kubeconfig as make_kubeconfig
from kubelocal.upstream.pki import write_kubeconfig

pytestmark = pytest.mark.timeout(300)


def pod(name: str, command: str, *, node: str = "node-0", restart: str = "Never", extra: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  containers:
  - name: main
    image: python:3.11
    command: [python, -c, {json.dumps(command)}]
{extra}"""


def phase(kubectl: Kubectl, name: str) -> str:
    return kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")


def test_kubectl_reports_the_server_as_v1_37_2(kubectl: Kubectl) -> None:
    version = json.loads(kubectl("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == "v1.37.2"


def test_nodes_join_ready_with_their_leases_and_admin_set_labels(kubectl: Kubectl) -> None:
    def ready() -> list[str]:
        nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
        return sorted(n["metadata"]["name"] for n in nodes
                      if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]))

    assert wait_for(lambda: ready() == ["node-0", "sim-0", "sim-1", "tagged"], timeout=60, what="four Ready nodes")
    leases = json.loads(kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json"))["items"]
    holders = {lease["metadata"]["name"]: lease["spec"]["holderIdentity"] for lease in leases}
    assert holders == {"node-0": "node-0", "tagged": "tagged", "sim-0": "sim-0", "sim-1": "sim-1"}
    assert all(lease["metadata"]["ownerReferences"][0]["kind"] == "Node" for lease in leases)
    # a label NodeRestriction keeps the kubelet from setting: the plane set it, as kubeadm does after a join
    labels = json.loads(kubectl("get", "node", "tagged", "-o", "json"))["metadata"]["labels"]
    assert labels["node-role.kubernetes.io/tagged"] == ""


def test_a_node_identity_may_not_touch_another_node(upstream: UpstreamClusterThread, tmp_path: Path) -> None:
    plane = upstream.cluster.plane
    path = write_kubeconfig(tmp_path / "node-0.kubeconfig",
                            make_kubeconfig(upstream.url, plane.ca_pem(), plane.pki.load("node-node-0")))
    as_node = Kubectl(path)
    refused = as_node.run("label", "node", "tagged", "stolen=yes")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    refused = as_node.run("label", "node", "node-0", "node-role.kubernetes.io/boss=")
    assert refused.returncode != 0 and "not allowed to modify labels" in refused.stderr


def test_a_pod_runs_to_succeeded_its_logs_come_through_the_api_server_and_it_is_deleted(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=pod("hello", "import os; print('hello from', os.environ['HOSTNAME'])"))
    wait_for(lambda: phase(kubectl, "hello") == "Succeeded", timeout=120, what="pod hello Succeeded")
    assert kubectl("logs", "hello") == "hello from hello\n"
    kubectl("delete", "pod", "hello", "--timeout=60s")
    assert kubectl("get", "pods", "-o", "name") .count("pod/hello") == 0


def test_kubectl_exec_runs_in_a_running_pod(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=pod("sleeper", "import time; time.sleep(600)", restart="Always"))
    wait_for(lambda: phase(kubectl, "sleeper") == "Running", timeout=120, what="pod sleeper Running")
    assert kubectl("exec", "sleeper", "--", "python", "-c", "print(6 * 7)").strip() == "42"
    kubectl("delete", "pod", "sleeper", "--timeout=60s")


def test_a_pod_calls_the_api_as_its_service_account_with_a_bound_token(kubectl: Kubectl) -> None:
    script = ("import kubernetes; kubernetes.config.load_incluster_config()\n"
              "try:\n"
              "    kubernetes.client.CoreV1Api().list_namespaced_secret('default')\n"
              "except kubernetes.client.ApiException as e:\n"
              "    print(e.status, e.body)")
    kubectl("apply", "-f", "-", stdin=pod("caller", script))
    wait_for(lambda: phase(kubectl, "caller") == "Succeeded", timeout=120, what="pod caller Succeeded")
    out = kubectl("logs", "caller")
    assert out.startswith("403") and "system:serviceaccount:default:default" in out
    volumes = json.loads(kubectl("get", "pod", "caller", "-o", "json"))["spec"]["volumes"]
    assert any(v["name"].startswith("kube-api-access-") for v in volumes)


def test_a_pod_on_a_simulated_node_runs_for_its_simulated_duration(kubectl: Kubectl) -> None:
    manifest = pod("simulated", "unused", node="sim-0").replace(
        "metadata:\n  name: simulated", "metadata:\n  name: simulated\n  annotations: {kubelocal.dev/sim-duration: 1s}")
    kubectl("apply", "-f", "-", stdin=manifest)
    wait_for(lambda: phase(kubectl, "simulated") == "Succeeded", timeout=120, what="pod simulated Succeeded")
    kubectl("delete", "pod", "simulated", "--timeout=60s")


def test_kubectl_port_forward_reaches_the_pods_own_port(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=pod("web", "import http.server as s; s.test(s.SimpleHTTPRequestHandler, "
                                                 "port=8000, bind='0.0.0.0')", restart="Always"))
    wait_for(lambda: phase(kubectl, "web") == "Running", timeout=120, what="pod web Running")
    (local,) = free_ports(1)
    forward = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubectl.kubeconfig), "port-forward", "pod/web",
                                f"{local}:8000"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def page() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=5) as resp:
                    return str(resp.read().decode())
            except OSError:
                return ""

        assert "Directory listing" in wait_for(page, timeout=60, interval=0.5, what="the page through the forward")
    finally:
        forward.terminate()
        forward.wait(timeout=30)
        kubectl("delete", "pod", "web", "--timeout=60s")


def test_a_watch_resumed_on_a_kube_apiserver_started_after_compaction_gets_410_gone(
        upstream: UpstreamClusterThread, kubectl: Kubectl) -> None:
    """What bench/operator_10k.py's watch expiry does on this plane: a client whose watch moves to a second
    kube-apiserver, started after etcd went past the client's resourceVersion and compacted, must list again."""
    plane = upstream.cluster.plane

    def get(url: str) -> Any:
        with urllib.request.urlopen(url, context=plane.tls(), timeout=30) as resp:
            return json.loads(resp.readline())

    configmaps = "/api/v1/namespaces/default/configmaps"
    listed = get(f"{upstream.url}{configmaps}")["metadata"]["resourceVersion"]
    kubectl("create", "configmap", "after-the-list")
    second = upstream.on_plane(plane.start_apiserver())
    assert upstream.on_plane(plane.compact()) > int(listed)
    event = get(f"{second}{configmaps}?watch=1&resourceVersion={listed}&timeoutSeconds=5")
    assert (event["type"], event["object"]["code"], event["object"]["reason"]) == ("ERROR", 410, "Expired")
    # the second kube-apiserver serves the same cluster: the change after the list is there
    assert get(f"{second}{configmaps}/after-the-list")["metadata"]["name"] == "after-the-list"
