"""Your own training script, unchanged (examples/own-script): plain TensorFlow scripts that know nothing of
tfjob run as TFJobs under `tfjob local` and on a local cluster, with the worker image's environment; a
broken one fails the job with its exception in the condition."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import REPO, apply
from operator_harness import Cluster, Operator, local_cluster, wait_for

from tfjob_operator.client.local.image import worker_image_defaults

SCRIPTS = REPO / "examples" / "own-script"


def manifest(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((SCRIPTS / f"{name}.yaml").read_text()))


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for spec in job["spec"]["tfReplicaSpecs"].values() for c in spec["template"]["spec"]["containers"]]


def tfjob_local(path: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    """`PYTHONPATH=$PWD/examples/own-script tfjob local FILE`, as the README says."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "tfjob_operator", "local", str(path), "--plain",
                           "--workdir", str(workdir)], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


@pytest.mark.timeout(320)
def test_keras_fit_under_mwms_succeeds_with_the_image_env_and_the_chief_saves(tmp_path: Path) -> None:
    result = tfjob_local(SCRIPTS / "keras-fit.yaml", tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "TFJob keras-fit: Succeeded" in result.stdout
    assert (tmp_path / "volumes" / "default" / "tfjob-shared" / "keras-fit" / "saved_model.pb").is_file()


@pytest.mark.timeout(320)
def test_a_crash_looping_script_fails_once_restarts_exceed_backoff_limit_saying_why(tmp_path: Path) -> None:
    # The same script under Keras 3 (the pod's env beats the image's): Keras 3 cannot fit under MWMS. backoffLimit
    # 0: its first in-place restart exceeds it (a limit of several restarts counted: tests/integration/
    # test_operator_lifecycle.py::test_a_crash_loop_under_on_failure_ends_once_restarts_exceed_backoff_limit_...).
    job = manifest("keras-fit")
    job["metadata"]["name"] = "keras3"
    job["spec"]["runPolicy"]["backoffLimit"] = 0
    containers(job)[0]["env"] = [{"name": "TF_USE_LEGACY_KERAS", "value": "0"}]
    path = tmp_path / "keras3.yaml"
    path.write_text(yaml.safe_dump(job))
    result = tfjob_local(path, tmp_path / "work")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    why = next(line for line in result.stdout.splitlines() if line.strip().startswith("why"))
    assert "exited with code 1: ValueError: Attempt to convert a value (PerReplica" in why
    assert "hint: Keras 3 cannot fit under MultiWorkerMirroredStrategy" in why
    assert "backoffLimit 0 exceeded" in why


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local cluster whose pods get the worker image's environment, and the operator."""
    workdir = tmp_path_factory.mktemp("own")
    with local_cluster(workdir, nodes="1x{cpu:64,memory:128Gi}", image=worker_image_defaults()) as c:
        op = Operator(c.kubeconfig, workdir / "operator.log").start()
        try:
            yield c
        finally:
            op.stop()


def submit(cluster: Cluster, name: str, **spec: Any) -> str:
    """The example as its manifest says (with `spec`'s fields set), the scripts found through the pod's
    PYTHONPATH."""
    job = manifest(name)
    job["spec"].update(spec)
    for container in containers(job):
        container["env"] = [*container.get("env", []), {"name": "PYTHONPATH", "value": str(SCRIPTS)}]
    return apply(cluster, job)


def log(cluster: Cluster, pod: str) -> str:
    return str(cluster.core.read_namespaced_pod_log(pod, "default"))


@pytest.mark.timeout(320)
def test_custom_loop_succeeds_and_both_workers_hold_the_same_model(cluster: Cluster) -> None:
    # Without a chief, worker 0's exit decides success, and cleanPodPolicy Running (the default) then deletes a
    # worker 1 still tearing TensorFlow down, log and all. A user who wants every worker's log asks for this:
    name = submit(cluster, "custom-loop", successPolicy="AllWorkers")
    cluster.wait_state(name, "Succeeded", timeout=240)
    assert cluster.condition(name, "Succeeded")["reason"] == "AllWorkersSucceeded"  # type: ignore[index]
    scores = [re.findall(r"held-out accuracy (\S+)", log(cluster, f"{name}-worker-{i}")) for i in (0, 1)]
    assert scores[0] and scores[0] == scores[1]
    assert "saved the model to" in log(cluster, f"{name}-worker-0")


@pytest.mark.timeout(320)
def test_ps_split_succeeds_when_the_chief_does_and_its_ps_and_workers_are_deleted(cluster: Cluster) -> None:
    name = submit(cluster, "ps-split")
    cluster.wait_state(name, "Succeeded", timeout=240)
    assert cluster.condition(name, "Succeeded")["reason"] == "ChiefSucceeded"  # type: ignore[index]
    assert "saved the model to" in log(cluster, f"{name}-chief-0")
    # PS and workers never exit by themselves: the operator deleted them (cleanPodPolicy Running).
    wait_for(lambda: set(cluster.pod_phases(name)) == {f"{name}-chief-0"}, timeout=30,
             what="only the chief's pod left")
