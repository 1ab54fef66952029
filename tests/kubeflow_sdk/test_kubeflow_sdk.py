"""Kubeflow's training SDK (kubeflow-training 1.9.4, TrainingClient with job_kind="TFJob") works unchanged
against `tfjob local up --kubeflow` + the operator serving the Kubeflow API.

The SDK pins kubernetes<36, so it lives in its own virtualenv (`make kubeflow-sdk-venv` → .venv-kubeflow-sdk,
made here on first use; the project's venv is never touched) and the scenario runs there as a subprocess.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubeflow_local import KubeflowLocal, kubeflow_local

REPO = Path(__file__).resolve().parents[2]
SDK_VENV = REPO / ".venv-kubeflow-sdk"
SCENARIO = Path(__file__).with_name("sdk_scenario.py")


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    """The SDK's interpreter, its venv made by the Make target when missing (pip install from PyPI once)."""
    make = shutil.which("make")
    assert make, "make is needed to build the Kubeflow SDK venv (make kubeflow-sdk-venv)"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([make, "-s", "-C", str(REPO), "kubeflow-sdk-venv", f"PYTHON={base}"], check=True, timeout=900)
    version = subprocess.run([str(SDK_VENV / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('kubeflow-training'), "
                              "m.version('kubernetes'))"], capture_output=True, text=True, check=True).stdout.split()
    assert version[0] == "1.9.4" and int(version[1].split(".")[0]) < 36, version
    return SDK_VENV / "bin" / "python"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeflowLocal]:
    with kubeflow_local(tmp_path_factory.mktemp("kubeflow-sdk")) as running:
        yield running


@pytest.mark.timeout(900)
def test_kubeflow_training_client_drives_a_tfjob_end_to_end(sdk_python: Path, local: KubeflowLocal) -> None:
    done = subprocess.run([str(sdk_python), str(SCENARIO), str(local.kubeconfig), "sdk-hello"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:] + local.operator.log()[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=1))  # shown when an assertion below fails
    # create_job + wait_for_job_conditions + get_job: the job, its status in Kubeflow's shape
    assert result["waited_kind"] == "TFJob"
    assert result["get_job"]["api_version"] == "kubeflow.org/v1"
    workers = result["get_job"]["replica_statuses"]["Worker"]
    assert workers["succeeded"] >= 1 and workers["succeeded"] + workers["active"] == 2  # worker 1 may still run
    assert "None" not in (result["get_job"]["start_time"], result["get_job"]["completion_time"])
    # get_job_conditions, is_job_succeeded: Kubeflow's condition types, Succeeded last
    assert result["conditions"][0][:2] == ["Created", "True"]
    assert result["conditions"][-1] == ["Succeeded", "True", "WorkerSucceeded"]
    assert result["is_job_succeeded"] is True and result["is_job_failed"] is False
    # get_job_pod_names, get_job_logs: found by Kubeflow's labels; worker 0 is the master without a chief
    assert result["pod_names"] == ["sdk-hello-worker-0", "sdk-hello-worker-1"]
    assert result["master_pod_names"] == ["sdk-hello-worker-0"]
    assert result["master_logs"] == {"sdk-hello-worker-0": "hello from worker 0 of 2\n"}
    assert result["all_logs"]["sdk-hello-worker-1"] == "hello from worker 1 of 2\n"
    # delete_job
    assert result["deleted"] is True
