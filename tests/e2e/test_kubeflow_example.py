"""Kubeflow's way of writing a MultiWorkerMirroredStrategy TFJob (kubeflow.org/v1, examples/kubeflow/) trains
unchanged with the operator serving the Kubeflow API: kubectl apply, kubectl get tfjobs.kubeflow.org, logs."""

from __future__ import annotations

import re
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
