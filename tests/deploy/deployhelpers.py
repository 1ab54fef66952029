"""Shared helpers for the deploy tests: the chart renderer from deploy/render_manifests.py."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load_renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_manifests", ROOT / "deploy" / "render_manifests.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["render_manifests"] = module
    spec.loader.exec_module(module)
    return module


renderer = _load_renderer()


def chart_env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator container's env as rendered: plain values as strings, downward-API entries as their source."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


KUBECTL = Path(sys.executable).parent / "kubectl"


@contextlib.contextmanager
def chart_cluster(workdir: Path) -> Iterator[Path]:
    """What `tfjob local up` starts (the CRD, the controllers, the image table mapping the chart's operator image
    to the installed `tfjob`, the pod network where namespaces can be made), as a kubeconfig path."""
    from kubelocal.apiserver import write_kubeconfig
    from kubelocal.cluster import LocalClusterThread
    from tfjob_operator.api.crd import CRD_PATH
    from tfjob_operator.client.local.image import local_images, worker_image_defaults

    with LocalClusterThread(workdir=workdir, crds=(CRD_PATH,), image=worker_image_defaults(),
                            images=local_images(), pod_network="auto") as cluster:
        path = workdir / "kubeconfig"
        write_kubeconfig(path, cluster.url)
        yield path


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(KUBECTL), f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)
    if check and proc.returncode:
        raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
    return proc


def whoami(kubeconfig: Path, token: str) -> Any:
    """Who the API server (at kubeconfig's address) says presents `token`: a SelfSubjectReview's userInfo.
    (kubectl sends no bearer token to the plane's plain-HTTP address, so this is made with the Python client.)"""
    import kubernetes
    import yaml

    config = kubernetes.client.Configuration()
    config.host = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    config.api_key = {"authorization": f"Bearer {token}"}
    with kubernetes.client.ApiClient(config) as client:
        review = kubernetes.client.AuthenticationV1Api(client).create_self_subject_review({})
    return client.sanitize_for_serialization(review.status.user_info)


def without_verb(objects: list[dict[str, Any]], resource: str, verb: str) -> dict[str, Any]:
    """The chart's ClusterRole (as rendered) with `verb` taken out of the one rule on `resource`."""
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    (rule,) = [r for r in role["rules"] if r["resources"] == [resource]]
    assert verb in rule["verbs"]
    cut = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
    return {**role, "rules": [cut if r is rule else r for r in role["rules"]]}


def operator_logs(kubeconfig: Path, namespace: str = "tfjob-system") -> str:
    return kubectl(kubeconfig, "logs", "-n", namespace, "deployment/tfjob-operator", "--tail=-1").stdout


def refused_until_granted(kubeconfig: Path, job: str, name: str, *, timeout: float = 120) -> dict[str, Any]:
    """The chart's operator (installed, one replica) with 'create' on pods taken out of its ClusterRole: submitting
    `job` (TFJob `name` in namespace default) gets kube-apiserver's 403, and the operator says so where a user
    looks (the job's state condition and a Warning Event naming verb, resource, namespace and what to grant), backs
    off (2, 4, 8 s ...) without failing the job; with the ClusterRole restored the job runs to Succeeded and the
    condition says the refusal is over. Returns the job's final status."""
    from polling import wait_for

    objects = renderer.render_chart({})
    (whole,) = [o for o in objects if o["kind"] == "ClusterRole"]
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(without_verb(objects, "pods", "create")))
    try:
        kubectl(kubeconfig, "apply", "-f", "-", stdin=job)

        def condition() -> dict[str, Any] | None:
            got = json.loads(kubectl(kubeconfig, "get", "tfjob", name, "-o", "json").stdout).get("status") or {}
            return next((c for c in got.get("conditions") or [] if c["reason"] == "OperatorForbidden"), None)

        refused = wait_for(condition, 60, what="the job's condition to name the refused permission")
        operator = f"system:serviceaccount:{renderer.NAMESPACE}:tfjob-operator"
        assert refused["message"] == (
            f"forbidden: the operator ({operator}) cannot create pods in namespace default: its ServiceAccount "
            "lacks 'create' on 'pods'; add it to the chart's ClusterRole (or the namespace's Role): re-applying the "
            "chart restores its rules (Helm 4: `helm upgrade --force-conflicts` if another tool edited them)"), refused
        events = json.loads(kubectl(kubeconfig, "get", "events", "--field-selector",
                                    f"involvedObject.name={name},reason=OperatorForbidden", "-o", "json").stdout)
        assert [e["message"] for e in events["items"]] == [refused["message"]]
        # Backed off, not hot: each refusal waits twice as long as the one before (the first three: 2, 4, 8 s).
        pattern = re.compile(rf"reconcile default/{name}: forbidden: .* retrying in (\d+)s")
        delays = wait_for(lambda: (d := [int(m) for m in pattern.findall(operator_logs(kubeconfig))])
                          and len(d) >= 3 and d, 60, what="three refusals of the job's pods in the operator's log")
        assert delays[:3] == [2, 4, 8], delays
        raw = (f'pods is forbidden: User "{operator}" cannot create resource "pods" in API group "" in the '
               'namespace "default"')
        assert raw in operator_logs(kubeconfig)  # kube-apiserver's own words, for whoever reads the log
        status = json.loads(kubectl(kubeconfig, "get", "tfjob", name, "-o", "json").stdout)["status"]
        assert status.get("state") not in ("Failed", "Succeeded")
        assert json.loads(kubectl(kubeconfig, "get", "pods", "-l", f"tfjob.dev/job-name={name}",
                                  "-o", "json").stdout)["items"] == []
    finally:
        kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(whole))
    done = wait_for(lambda: (s := json.loads(kubectl(kubeconfig, "get", "tfjob", name, "-o", "json").stdout).get(
        "status") or {}).get("state") in ("Succeeded", "Failed") and s, timeout,
        what="the job to run once the ClusterRole grants 'create' on pods again")
    assert done["state"] == "Succeeded", done
    reasons = {c["type"]: c["reason"] for c in done["conditions"]}
    assert reasons["Created"] == "OperatorPermitted", done
    return dict(done)


def release_left(kubeconfig: Path, release: str = "tfjob-operator", namespace: str = "tfjob-system") -> list[str]:
    """Every object of the Helm release still there (by its instance label), and Helm's own release Secrets."""
    def items(*args: str) -> list[dict[str, Any]]:
        return list(json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)["items"])

    kinds = "deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,roles,rolebindings"
    left = items(kinds, "-n", namespace, "-l", f"app.kubernetes.io/instance={release}")
    left += items("clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations",
                  "-l", f"app.kubernetes.io/instance={release}")
    left += items("secrets", "-n", namespace, "-l", "owner=helm")
    return [f"{i['kind']}/{i['metadata']['name']}" for i in left]
