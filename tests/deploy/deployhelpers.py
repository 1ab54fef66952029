"""Shared helpers for the deploy tests: the chart renderer from deploy/render_manifests.py."""

from __future__ import annotations

import contextlib
import importlib.util
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
