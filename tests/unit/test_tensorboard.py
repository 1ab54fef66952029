"""`tfjob tensorboard`: finding the chief's TensorBoard logs from the job's spec."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.client import tensorboard

ROOT = Path(__file__).resolve().parents[2]


def example(name: str = "mnist-cpu.yaml") -> dict:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


def test_logs_of_a_local_job_are_under_the_workdir_volume_of_its_claim(tmp_path: Path) -> None:
    location = tensorboard.chief_logdir(parse_tfjob(example()))
    assert (location.path, location.mount_path, location.sub_path) == ("/data/mnist-cpu/tensorboard", "/data",
                                                                       "mnist-cpu/tensorboard")
    # the same directory tfjob local's summary names for the SavedModel, with tensorboard/ beside it
    expected = tmp_path / "volumes" / "default" / "tfjob-shared" / "mnist-cpu" / "tensorboard"
    assert tensorboard.local_path(location, tmp_path) == expected


def test_output_dir_may_come_from_the_environment_and_the_equals_form() -> None:
    manifest = example()
    container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["args"] = ["--output-dir=/data/run7"]
    assert tensorboard.chief_logdir(parse_tfjob(manifest)).path == "/data/run7/tensorboard"
    container["args"] = []
    container["env"] = [{"name": "TFJOB_OUTPUT_DIR", "value": "/data/run8"}]
    assert tensorboard.chief_logdir(parse_tfjob(manifest)).path == "/data/run8/tensorboard"


def test_a_job_without_an_output_dir_says_what_to_add() -> None:
    manifest = example()
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = []
    with pytest.raises(tensorboard.NoLogs, match=r"sets no absolute --output-dir .* give it --output-dir on a volume"):
        tensorboard.chief_logdir(parse_tfjob(manifest))


def test_cluster_commands_run_tensorboard_in_a_valid_pod_mounting_the_chiefs_volume() -> None:
    location = tensorboard.chief_logdir(parse_tfjob(example()))
    run, wait, forward = tensorboard.cluster_commands(location, "ghcr.io/tfjob-operator/tfjob-worker:0.1.0",
                                                      "tensorboard-mnist")
    words = shlex.split(run)
    overrides = json.loads(words[words.index("--overrides") + 1])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tensorboard-mnist"}, **overrides}
    kubernetes_validate.validate(pod, "1.37.0", strict=True)
    (container,) = pod["spec"]["containers"]
    assert container["command"][:3] == ["tensorboard", "--logdir", "/data/mnist-cpu/tensorboard"]
    assert pod["spec"]["volumes"] == [{"name": "shared", "persistentVolumeClaim": {"claimName": "tfjob-shared"}}]
    assert "port-forward" in forward and "condition=Ready" in wait
