"""Kubeflow's way of writing a MultiWorkerMirroredStrategy TFJob (kubeflow.org/v1, examples/kubeflow/) trains
unchanged with the operator serving the Kubeflow API: kubectl apply, kubectl get tfjobs.kubeflow.org, logs; and
the same file (a ConfigMap and the TFJob) trains under `tfjob local`."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubeflow_local import KubeflowLocal, kubeflow_local
from polling import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kubeflow" / "mnist-mwms.yaml"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeflowLocal]:
    with kubeflow_local(tmp_path_factory.mktemp("kubeflow-e2e")) as running:
        yield running


@pytest.mark.timeout(600)
def test_kubeflow_mwms_example_trains_to_90_percent_and_kubectl_shows_its_state(local: KubeflowLocal) -> None:
    assert "tfjob.kubeflow.org/mnist-mwms created" in local.kubectl("apply", "-f", str(EXAMPLE))

    def state() -> str:
        return local.kubectl("get", "tfjobs.kubeflow.org", "mnist-mwms", "-o",
                             "jsonpath={.status.conditions[-1:].type}")

    final = wait_for(lambda: (s := state()) in ("Succeeded", "Failed") and s, 480, interval=1,
                     what="mnist-mwms finished")
    assert final == "Succeeded", local.kubectl("describe", "tfjobs.kubeflow.org", "mnist-mwms")
    table = local.kubectl("get", "tfjobs.kubeflow.org")
    assert re.search(r"^mnist-mwms\s+Succeeded\s", table, re.M), table
    for worker in ("mnist-mwms-worker-0", "mnist-mwms-worker-1"):
        accuracy = re.findall(r"test_accuracy=([0-9.]+)", local.kubectl("logs", worker))
        assert accuracy and float(accuracy[-1]) >= 0.9, (worker, accuracy)
    saved = local.workdir / "cluster" / "volumes" / "default" / "strategy-volume" / "saved_model"
    assert (saved / "saved_model.pb").exists()


@pytest.mark.timeout(330)
def test_tfjob_local_creates_the_files_configmap_first_and_trains_the_job(tmp_path: Path) -> None:
    """The same file under `tfjob local`: the ConfigMap (the script) is created before the TFJob, whose pods
    mount it, and the job trains (read as tfjob.dev/v1, no Kubeflow API needed). Two epochs of the script instead
    of eight: the test above shows the example's accuracy."""
    text = EXAMPLE.read_text()
    assert "    EPOCHS = 8\n" in text
    copy = tmp_path / "mnist-mwms.yaml"
    copy.write_text(text.replace("    EPOCHS = 8\n", "    EPOCHS = 2\n"))
    workdir = tmp_path / "work"
    result = subprocess.run([sys.executable, "-m", "tfjob_operator", "local", str(copy), "--plain",
                             "--workdir", str(workdir)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    created = [i for i, line in enumerate(lines) if line.endswith(" created")]
    assert [lines[i].split()[-2] for i in created] == [
        "configmap/mnist-mwms-script", "persistentvolumeclaim/strategy-volume", "tfjob.tfjob.dev/mnist-mwms"]
    assert "TFJob mnist-mwms: Succeeded" in result.stdout
    logs = sorted(workdir.glob("pods/default_mnist-mwms-worker-*/logs/tensorflow/0.log"))
    assert len(logs) == 2, logs
    for log in logs:
        accuracy = re.findall(r"test_accuracy=([0-9.]+)", log.read_text())
        assert accuracy and float(accuracy[-1]) > 0.5, (log, accuracy)  # it learned (chance is 0.1)
    assert (workdir / "volumes" / "default" / "strategy-volume" / "saved_model" / "saved_model.pb").is_file()
