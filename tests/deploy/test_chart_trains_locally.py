"""The chart, as it ships, trains on this machine: `tfjob local up` (its default pod network), Helm 4's engine
(helm-python-sdk) installs deploy/helm/tfjob-operator with its default values, and the real kubectl applies
examples/mnist-cpu.yaml, which real TensorFlow workers train to Succeeded.

As on a cluster: the operator is a pod reaching the API server only at https://10.96.0.1:443 with its
ServiceAccount's token (no host kubeconfig), judged by the chart's RBAC, and TF_CONFIG names peers by cluster
DNS on port 2222 (the chart sets no TFJOB_ADDRESSING: the operator follows the plane, which publishes dns). Needs
root on Linux; skips elsewhere, saying why.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import psutil
import pytest
from deployhelpers import ROOT, kubectl, whoami
from polling import wait_for

from kubelocal.network import pod_network_available

AVAILABLE, WHY_NOT = pod_network_available()
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=f"pod network unavailable: {WHY_NOT}"),
              pytest.mark.timeout(420)]
CHART = ROOT / "deploy" / "helm" / "tfjob-operator"
NS = "tfjob-system"
OPERATOR = f"system:serviceaccount:{NS}:tfjob-operator"
TRAINING = 300  # seconds mnist-cpu may take from apply to Succeeded (about 40 s alone, more on a busy machine)


@pytest.fixture()
def local_up(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """(kubeconfig, workdir, pid) of `tfjob local up` with its defaults, in its own process, once its banner is out."""
    kubeconfig = tmp_path / "kubeconfig"
    env = {k: v for k, v in os.environ.items() if k != "TFJOB_LOCAL_POD_NETWORK"} | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "local", "up", "--workdir", str(tmp_path),
                             "--kubeconfig", str(kubeconfig)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=ROOT)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    try:
        banner: list[str] = []
        deadline = time.monotonic() + 60
        while not banner or "Press Ctrl-C" not in banner[-1]:
            banner.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        assert any(line.startswith("Pod network: ") for line in banner), "".join(banner)
        yield kubeconfig, tmp_path, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def get(kubeconfig: Path, *args: str) -> Any:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def operator_process(plane: int) -> psutil.Process:
    """The operator pod's `tfjob operator` process: the plane's kubelet started it."""
    found = [p for p in psutil.Process(plane).children(recursive=True)
             if p.cmdline()[-3:] == ["-m", "tfjob_operator", "operator"]]
    assert len(found) == 1, [p.cmdline() for p in psutil.Process(plane).children(recursive=True)]
    return found[0]


def test_the_charts_defaults_train_mnist_cpu_on_the_local_plane(local_up: tuple[Path, Path, int]) -> None:
    kubeconfig, workdir, plane = local_up
    started = time.monotonic()
    with helm.Config(kubeconfig_path=kubeconfig, namespace=NS) as cluster, helm.Chart.load(CHART) as chart:
        cluster.install(chart, "tfjob-operator", namespace=NS, create_namespace=True, wait="watcher", timeout=120)
    [pod] = get(kubeconfig, "pods", "-n", NS)["items"]
    assert "TFJOB_ADDRESSING" not in json.dumps(pod["spec"])  # nothing to keep in step: it follows the plane
    wait_for(lambda: "addressing: dns, as the plane publishes (kube-public/pod-addressing" in kubectl(
        kubeconfig, "logs", "-n", NS, pod["metadata"]["name"]).stdout, 60,
        what="the operator to read the plane's addressing with its token, and address peers by cluster DNS")

    # The operator's only way to the API server is in-cluster config: the Service's address and the mounted token.
    operator = operator_process(plane).environ()
    assert "KUBECONFIG" not in operator and operator["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    meta = pod["metadata"]
    token = (workdir / "pods" / f"{NS}_{meta['name']}_{meta['uid']}" / "net/serviceaccount/token").read_text()
    assert whoami(kubeconfig, token)["username"] == OPERATOR

    installed = time.monotonic()
    kubectl(kubeconfig, "apply", "-f", str(ROOT / "examples" / "mnist-cpu.yaml"))
    worker = wait_for(lambda: (p := get(kubeconfig, "pods", "-l", "tfjob.dev/job-name=mnist-cpu")["items"])
                      and p[0], 60, what="the operator pod to create the workers")
    tf_config = json.loads({e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}["TF_CONFIG"])
    assert tf_config["cluster"]["worker"] == [f"mnist-cpu-worker-{i}.mnist-cpu.default.svc:2222" for i in (0, 1)]

    state = wait_for(lambda: (s := get(kubeconfig, "tfjob", "mnist-cpu").get("status", {}).get("state"))
                     in ("Succeeded", "Failed") and s, TRAINING, what="mnist-cpu to finish")
    assert state == "Succeeded", kubectl(kubeconfig, "logs", "-n", NS, "deployment/tfjob-operator").stdout[-3000:]
    result = json.loads((workdir / "volumes/default/tfjob-shared/mnist-cpu/result.json").read_text())
    assert result["world_size"] == 2 and result["test_accuracy"] >= 0.9
    logs = kubectl(kubeconfig, "logs", "-n", NS, "deployment/tfjob-operator", "--tail=-1").stdout
    assert "forbidden" not in logs
    print(f"install {installed - started:.1f}s, train to Succeeded {time.monotonic() - installed:.1f}s")
