"""The Helm chart on the real control plane (kube-apiserver, kube-controller-manager, kube-scheduler v1.37.2,
etcd), as a platform team meets it: Helm 4's engine (helm-python-sdk) installs deploy/helm/tfjob-operator with
its default values, the operator runs as a pod on the process kubelet under the chart's ServiceAccount (a
TokenRequest token, judged by the real RBAC authorizer), kube-apiserver calls its webhooks at the pod's IP (it
runs with --enable-aggregator-routing: the webhook Service's EndpointSlice, dialled through the plane's egress
proxy into the pod network; the ClusterIP is not routed anywhere), the real kubectl trains examples/mnist-cpu.yaml.
`kubectl auth can-i` agrees with the chart's rules; one rule taken out gives the real 403, which the operator
tells on the job; two replicas fail over; an upgrade leaves no stale pod and an uninstall nothing of the release.

One plane and one release for the module (the tests run in order; the last uninstalls). Needs the binaries
(`make upstream`) and the pod network (root on Linux); skips otherwise, saying which.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import rbac
import yaml
from deployhelpers import ROOT, kubectl, operator_logs, refused_until_granted, release_left, renderer
from polling import wait_for

from kubelocal.network import pod_network_available
from kubelocal.upstream.cluster import UpstreamClusterThread
from tfjob_operator.api.crd import CRD_PATH
from tfjob_operator.client.local.image import local_images, worker_image_defaults

AVAILABLE, WHY_NOT = pod_network_available()
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=f"pod network unavailable: {WHY_NOT}"),
              pytest.mark.timeout(300)]
CHART = ROOT / "deploy" / "helm" / "tfjob-operator"
NS = renderer.NAMESPACE
RELEASE = "tfjob-operator"
SA = "tfjob-operator"
OPERATOR = f"system:serviceaccount:{NS}:{SA}"
TRAINING = 300  # seconds mnist-cpu may take from apply to Succeeded (about 30 s alone, more on a busy machine)


@pytest.fixture(scope="module")
def upstream(upstream_binaries: dict[str, Path],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamClusterThread]:
    """What `tfjob local up --control-plane upstream` starts: the image table maps the chart's operator image to
    the installed `tfjob`, the pod network gives each pod its IP and the cluster DNS."""
    with UpstreamClusterThread(workdir=tmp_path_factory.mktemp("chart-upstream"), crds=(CRD_PATH,),
                               image=worker_image_defaults(), images=local_images(), pod_network="auto",
                               max_grace_seconds=5.0, binaries=upstream_binaries) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def release(kubeconfig: Path) -> Path:
    """The chart installed with its default values (Helm 4: server-side apply, waiting for the rollout)."""
    helm_do(kubeconfig, "install")
    return kubeconfig


def helm_do(kubeconfig: Path, action: str, values: dict[str, Any] | None = None) -> None:
    with helm.Config(kubeconfig_path=kubeconfig, namespace=NS) as cluster, helm.Chart.load(CHART) as chart:
        if action == "install":
            cluster.install(chart, RELEASE, namespace=NS, create_namespace=True, wait="watcher", timeout=120)
        elif action == "upgrade":
            cluster.upgrade(chart, RELEASE, values or {}, namespace=NS, wait="watcher", timeout=120)
        else:
            cluster.uninstall(RELEASE, wait="watcher", timeout=120)
            assert [r["name"] for r in cluster.list(all_states=True)] == []


def get(kubeconfig: Path, *args: str) -> Any:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def operator_pods(kubeconfig: Path) -> list[dict[str, Any]]:
    return list(get(kubeconfig, "pods", "-n", NS, "-l", "app.kubernetes.io/name=tfjob-operator")["items"])


def webhook_endpoints(kubeconfig: Path) -> list[str]:
    """The ready addresses of the webhook Service's EndpointSlices (what kube-apiserver dials)."""
    slices = get(kubeconfig, "endpointslices", "-n", NS, "-l", f"kubernetes.io/service-name={RELEASE}-webhook")
    return sorted(a for s in slices["items"] for e in s.get("endpoints") or []
                  if (e.get("conditions") or {}).get("ready") for a in e["addresses"])


def tfjob(name: str, replicas: int) -> str:
    return yaml.safe_dump({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": {
        "successPolicy": "AllWorkers", "tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "local", "command": ["python", "-c", "print('ok')"]}]}}}}}})


def refused_by_webhook(kubeconfig: Path) -> str:
    """Apply a job with no pods: the chart's validating webhook must refuse it, naming the field."""
    done = kubectl(kubeconfig, "apply", "-f", "-", stdin=tfjob("no-pods", 0), check=False)
    assert done.returncode != 0, "a TFJob with 0 workers was accepted"
    return done.stderr


def succeeds(kubeconfig: Path, name: str, timeout: float = 90) -> dict[str, Any]:
    status = wait_for(lambda: (s := get(kubeconfig, "tfjob", name).get("status") or {}).get("state")
                      in ("Succeeded", "Failed") and s, timeout, what=f"TFJob {name} to finish")
    assert status["state"] == "Succeeded", operator_logs(kubeconfig)[-3000:]
    return dict(status)


def test_helm_installs_the_operator_as_a_pod_whose_webhooks_kube_apiserver_calls_at_the_pods_ip(
    release: Path,
) -> None:
    [pod] = operator_pods(release)
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == "node-0"
    assert pod["spec"]["serviceAccountName"] == SA
    assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])  # ServiceAccount admission
    wait_for(lambda: webhook_endpoints(release) == [pod["status"]["podIP"]], 60,
             what="the webhook Service's EndpointSlice to hold the operator pod's IP")
    service = get(release, "service", "-n", NS, f"{RELEASE}-webhook")["spec"]
    assert not service["clusterIP"].startswith("10.244.")  # a Service address, which nothing routes here

    refusal = wait_for(lambda: "denied the request" in (e := refused_by_webhook(release)) and e, 60,
                       what="the chart's webhook to answer kube-apiserver")
    assert 'admission webhook "validate-tfjob.tfjob-operator.tfjob.dev" denied the request' in refusal
    assert "spec.tfReplicaSpecs" in refusal and "replicas" in refusal
    # kube-apiserver itself made the call, from the pod network's gateway (its egress proxy), to the pod.
    assert '"POST /validate-tfjob?timeout=30s HTTP/1.1" 200' in operator_logs(release)
    assert '"kube-apiserver-admission"' in operator_logs(release)
    # its node's probes introduce themselves as a v1.37 kubelet's do
    wait_for(lambda: '"GET /healthz HTTP/1.1" 200' in (logs := operator_logs(release)) and '"kube-probe/1.37"' in logs,
             30, what="the kubelet's readiness probe in the operator's access log")
    assert get(release, "tfjobs")["items"] == []


def test_kubectl_auth_can_i_agrees_with_the_charts_rules(release: Path) -> None:
    """Every permission the chart grants the operator (exactly those the operator was seen to use:
    tests/deploy/test_rbac_evidence.py) is allowed by the real authorizer for its ServiceAccount, and every other
    RBAC verb on the same resources is refused."""
    granted = rbac.grants(renderer.render_chart({}), SA, NS)
    for g in sorted(granted, key=lambda g: (g.namespace or "", g.group, g.resource, g.verb)):
        answer = kubectl(release, "auth", "can-i", *can_i_args(g), f"--as={OPERATOR}", check=False).stdout.strip()
        assert answer == "yes", f"{g}: kubectl auth can-i says {answer!r}"
    refused = [(g, verb) for g in granted for verb in sorted(rbac.RESOURCE_VERBS)
               if not any(o.covers(rbac.Permission(g.group, g.resource, verb, g.namespace, g.name)) for o in granted)]
    reviews = {"apiVersion": "v1", "kind": "List", "items": [access_review(g, verb) for g, verb in refused]}
    answers = documents(kubectl(release, "create", "-f", "-", "-o", "json", stdin=json.dumps(reviews)).stdout)
    allowed = [f"{verb} {g.resource} in {g.namespace or 'every namespace'}"
               for (g, verb), review in zip(refused, answers, strict=True) if review["status"]["allowed"]]
    assert len(refused) > 40 and allowed == []
    # and nothing of what the chart leaves out on purpose
    assert kubectl(release, "auth", "can-i", "get", "secrets", "-A", f"--as={OPERATOR}",
                   check=False).stdout.strip() == "no"


def documents(text: str) -> list[dict[str, Any]]:
    """kubectl's output for several created objects: one JSON document after another."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)
    return out


def can_i_args(g: rbac.Grant) -> list[str]:
    resource, _, sub = g.resource.partition("/")
    target = f"{resource}.{g.group}" if g.group else resource
    return [g.verb, f"{target}/{g.name}" if g.name else target, *([f"--subresource={sub}"] if sub else []),
            *(["-n", g.namespace] if g.namespace else ["-A"])]


def access_review(g: rbac.Grant, verb: str) -> dict[str, Any]:
    """A SubjectAccessReview of the operator's ServiceAccount (its user and groups, as its token authenticates)."""
    resource, _, sub = g.resource.partition("/")
    attributes = {"verb": verb, "group": g.group, "resource": resource, "subresource": sub,
                  "namespace": g.namespace or "", "name": g.name or ""}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": OPERATOR, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
        "resourceAttributes": attributes}}


def test_kubectl_apply_of_mnist_cpu_trains_to_succeeded_with_the_charts_operator(
    release: Path, upstream: UpstreamClusterThread,
) -> None:
    started = time.monotonic()
    kubectl(release, "apply", "-f", str(ROOT / "examples" / "claims" / "tfjob-shared.yaml"))
    kubectl(release, "apply", "-f", str(ROOT / "examples" / "mnist-cpu.yaml"))
    worker = wait_for(lambda: (p := get(release, "pods", "-l", "tfjob.dev/job-name=mnist-cpu")["items"]) and p[0],
                      60, what="the operator pod to create the workers")
    tf_config = json.loads({e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}["TF_CONFIG"])
    assert tf_config["cluster"]["worker"] == [f"mnist-cpu-worker-{i}.mnist-cpu.default.svc:2222" for i in (0, 1)]
    succeeds(release, "mnist-cpu", TRAINING)
    result = json.loads((upstream.cluster.workdir / "volumes/default/tfjob-shared/mnist-cpu/result.json").read_text())
    assert result["world_size"] == 2 and result["test_accuracy"] >= 0.9
    assert "forbidden" not in operator_logs(release)
    print(f"mnist-cpu: apply to Succeeded {time.monotonic() - started:.1f}s")
    kubectl(release, "delete", "-f", str(ROOT / "examples" / "mnist-cpu.yaml"), "--wait=true")


def test_a_rule_taken_out_of_the_charts_cluster_role_gives_the_real_403_which_the_operator_tells_on_the_job(
    release: Path,
) -> None:
    refused_until_granted(release, tfjob("denied", 1), "denied")
    kubectl(release, "delete", "tfjob", "denied")


@pytest.mark.xfail(strict=False, reason=(
    "open (2026-11-28 18:30 and 18:46): on the upstream plane the standby did not take the Lease within 60 s of "
    "the leader's clean stop, its log empty; it passed three times at 17:00 (1.2-2.3 s). Not yet known whether "
    "the operator's standby or the plane's pod network is at fault; kubelocal's test_leader_election passes"))
def test_with_two_replicas_the_standby_takes_over_when_the_leaders_pod_is_deleted(release: Path) -> None:
    helm_do(release, "upgrade", {"replicas": 2})
    wait_for(lambda: len([p for p in operator_pods(release) if p["status"].get("phase") == "Running"
                          and "deletionTimestamp" not in p["metadata"]]) == 2, 60, what="two operator pods")

    def holder() -> str:
        return str(get(release, "lease", "-n", NS, RELEASE)["spec"].get("holderIdentity") or "")

    leader = wait_for(holder, 30, what="a leader")
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in operator_pods(release)}
    [standby] = [name for name in ips if name != leader]
    assert webhook_endpoints(release) == [ips[leader]]  # only the leader serves the webhooks
    started = time.monotonic()
    kubectl(release, "delete", "pod", "-n", NS, leader, "--wait=false")
    wait_for(lambda: holder() == standby, 60, what=f"the standby {standby} to take the Lease")
    took_over = time.monotonic() - started
    wait_for(lambda: webhook_endpoints(release) == [ips[standby]], 60,
             what="the webhook Service's endpoints to follow the new leader")
    refusal = wait_for(lambda: "denied the request" in (e := refused_by_webhook(release)) and e, 60,
                       what="the new leader's webhook to answer kube-apiserver")
    assert "spec.tfReplicaSpecs" in refusal
    kubectl(release, "apply", "-f", "-", stdin=tfjob("after-failover", 2))
    succeeds(release, "after-failover")
    print(f"failover: Lease taken {took_over:.1f}s after the leader's pod was deleted")
    kubectl(release, "delete", "tfjob", "after-failover")


def test_an_upgrade_leaves_no_stale_pod_and_an_uninstall_nothing_of_the_release(release: Path) -> None:
    before = {p["metadata"]["name"] for p in operator_pods(release)}
    helm_do(release, "upgrade", {"logLevel": "DEBUG"})  # back to one replica, and a changed value: a rollout
    wait_for(lambda: not {p["metadata"]["name"] for p in operator_pods(release)} & before, 90,
             what="the operator pods from before the upgrade to be gone")
    [pod] = operator_pods(release)
    assert "DEBUG" in json.dumps(pod["spec"]["containers"][0])
    replica_sets = get(release, "replicasets", "-n", NS)["items"]
    assert [rs["spec"]["replicas"] for rs in replica_sets].count(0) == len(replica_sets) - 1
    wait_for(lambda: webhook_endpoints(release) == [pod["status"]["podIP"]], 60,
             what="the webhook endpoints to name the upgraded pod")

    helm_do(release, "uninstall")
    wait_for(lambda: not release_left(release), 60, what="everything the release installed to be gone")
