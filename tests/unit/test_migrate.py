"""`tfjob migrate FILE...`: Kubeflow manifests out as tfjob.dev/v1, each change and difference on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.cli import EXIT_INVALID, main
from tfjob_operator.validation import parse_tfjob

KUBEFLOW_JOB = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: dist-mnist, namespace: kubeflow, uid: "1f2e", resourceVersion: "99"}
spec:
  runPolicy: {managedBy: kubeflow.org/training-operator, backoffLimit: 3}
  tfReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: kubeflow/tf-dist-mnist-test:1.0}]}}
    worker:
      replicas: 2
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: kubeflow/tf-dist-mnist-test:1.0}]}}
status: {conditions: [{type: Succeeded, status: "True"}]}
"""


def run(capsys: pytest.CaptureFixture[str], *files: Path) -> tuple[int, str, str]:
    code = main(["migrate", *map(str, files)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_kubeflow_manifest_becomes_a_tfjob_dev_manifest_the_operator_accepts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, write(tmp_path, "job.yaml", KUBEFLOW_JOB))
    assert code == 0
    (doc,) = list(yaml.safe_load_all(out))
    assert doc["apiVersion"] == "tfjob.dev/v1" and list(doc["spec"]["tfReplicaSpecs"]) == ["Chief", "Worker"]
    assert doc["spec"]["runPolicy"] == {"backoffLimit": 3}
    assert "status" not in doc and doc["metadata"] == {"name": "dist-mnist", "namespace": "kubeflow"}
    parse_tfjob(doc)
    changed = [line for line in err.splitlines() if ": changed: " in line]
    differs = [line for line in err.splitlines() if ": differs: " in line]
    assert any("Master → spec.tfReplicaSpecs.Chief" in line for line in changed)
    assert any("managedBy: kubeflow.org/training-operator removed" in line for line in changed)
    assert any("cleanPodPolicy: unset means Running" in line for line in differs)
    assert any("backoffLimit 3" in line and "in-place" in line for line in differs)
    assert all(line.startswith(f"{tmp_path / 'job.yaml'}: dist-mnist: ") for line in err.splitlines())


def test_a_manifest_already_tfjob_dev_comes_out_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours = Path(__file__).resolve().parents[2] / "examples" / "mnist-cpu.yaml"
    code, out, err = run(capsys, ours)
    assert code == 0
    assert list(yaml.safe_load_all(out)) == [d for d in yaml.safe_load_all(ours.read_text()) if d]
    assert ": changed: " not in err


BAD: list[tuple[str, str, str]] = [
    ("unknown managedBy", KUBEFLOW_JOB.replace("kubeflow.org/training-operator", "example.com/mine"),
     "spec.runPolicy.managedBy: 'example.com/mine'"),
    ("negative replicas", KUBEFLOW_JOB.replace("replicas: 2", "replicas: -2"),
     "spec.tfReplicaSpecs.Worker.replicas: must be ≥ 0"),
    ("not YAML", "apiVersion: [", "job.yaml"),
]


@pytest.mark.parametrize(("text", "named"), [(t, n) for _, t, n in BAD], ids=[b[0] for b in BAD])
def test_invalid_input_exits_2_naming_the_field_and_prints_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str) -> None:
    good = write(tmp_path, "good.yaml", KUBEFLOW_JOB)
    code, out, err = run(capsys, good, write(tmp_path, "job.yaml", text))
    assert (code, out) == (EXIT_INVALID, "")
    assert err.startswith("error: nothing was migrated:") and named in err
    assert "Traceback" not in err


def test_other_kinds_in_the_file_pass_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    code, out, _ = run(capsys, write(tmp_path, "all.yaml", KUBEFLOW_JOB + "---\n" + yaml.safe_dump(config)))
    assert code == 0 and list(yaml.safe_load_all(out))[1] == config
