"""`tfjob migrate FILE...`: Kubeflow manifests out as tfjob.dev/v1, each change and difference on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.client.cli import EXIT_INVALID, main

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


COMMENTED = """\
# A Kubeflow job, as exported
apiVersion: kubeflow.org/v1   # the old API
kind: TFJob
metadata:
  name: dist-mnist   # the name
  resourceVersion: "99"   # server-set, removed with its line
  # about the uid
  uid: "1f2e"
# the spec
spec:
  runPolicy:
    managedBy: kubeflow.org/training-operator   # Kubeflow's, removed with its line
    # three tries
    backoffLimit: 3
  tfReplicaSpecs:
    # the chief
    Master:   # Kubeflow calls it Master
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: kubeflow/tf-dist-mnist-test:1.0
              command:
                - python
                - -c
                - |
                  # a script in a block
                  print("hello")
    worker:
      replicas: 2   # two workers
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: "kubeflow/tf-dist-mnist-test:1.0"}]}}
status:   # written by the operator, removed with its lines
  conditions: []
# trailing comment
"""


def _comments(text: str) -> list[str]:
    return [line[line.index("#"):] for line in text.splitlines() if "#" in line]


def test_a_round_trip_keeps_every_comment_and_block_and_changes_only_what_it_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, write(tmp_path, "job.yaml", COMMENTED))
    assert code == 0, err
    removed = [c for c in _comments(COMMENTED) if "removed with its line" in c]
    assert _comments(out) == [c for c in _comments(COMMENTED) if c not in removed]
    assert "- |\n                  # a script in a block\n                  print(\"hello\")\n" in out
    # Every line that differs is one of the reported changes.
    before, after = COMMENTED.splitlines(), out.splitlines()
    gone = [line.strip() for line in before if line not in after]
    new = [line.strip() for line in after if line not in before]
    assert new == ["apiVersion: tfjob.dev/v1      # the old API", "Chief:    # Kubeflow calls it Master", "Worker:"]
    assert [g.split(":")[0] for g in gone] == ["apiVersion", "resourceVersion", "uid", "managedBy", "Master", "worker",
                                               "status", "conditions"]
    changed = [line.split(": changed: ")[1] for line in err.splitlines() if ": changed: " in line]
    assert changed == [
        "apiVersion: kubeflow.org/v1 → tfjob.dev/v1",
        "metadata: removed uid, resourceVersion (written by the API server)",
        "status: removed (the operator writes it)",
        "spec.tfReplicaSpecs.Master → spec.tfReplicaSpecs.Chief (Kubeflow's Master is the chief)",
        "spec.tfReplicaSpecs.worker → spec.tfReplicaSpecs.Worker",
        "spec.runPolicy.managedBy: kubeflow.org/training-operator removed (empty means this operator)"]


def test_the_kubeflow_example_changes_by_its_api_version_line_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/kubeflow/mnist-mwms.yaml: the ConfigMap with its `train.py: |` script and every comment come out
    byte for byte; the TFJob's apiVersion is the one line that changes, and the one change reported."""
    example = Path(__file__).resolve().parents[2] / "examples" / "kubeflow" / "mnist-mwms.yaml"
    code, out, err = run(capsys, example)
    text = example.read_text()
    assert code == 0
    assert out == text.replace("apiVersion: kubeflow.org/v1", "apiVersion: tfjob.dev/v1")
    assert [line for line in err.splitlines() if ": changed: " in line] == [
        f"{example}: mnist-mwms: changed: apiVersion: kubeflow.org/v1 → tfjob.dev/v1"]
    assert f"{example}: mnist-mwms-script: differs: not a TFJob (kind 'ConfigMap'): unchanged" in err
