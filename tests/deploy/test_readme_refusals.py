"""The README's "Who refuses what" table is true: each example in it, set in examples/mnist-cpu.yaml, is applied
with the real kubectl against `tfjob local up` with no webhook and no operator. A row "the API server" must be
refused by kubectl apply, naming the field; a row "the webhook, or the operator" must be stored, and then refused
by the validation the webhook and the operator run (`parse_tfjob`, the words `tfjob render` prints)."""

from __future__ import annotations

import copy
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import KUBECTL
from polling import wait_for

from tfjob_operator.api import kubeyaml
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.client.local.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "examples" / "mnist-cpu.yaml").read_text())


def readme_rows() -> list[tuple[str, str]]:
    """(example, who refuses it) for each example of the README's table."""
    text = (REPO / "README.md").read_text()
    table = text.split("**Who refuses what.**", 1)[1].split("\n\n", 2)[1]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    return [(example, who.strip(" |")) for what, who in rows for example in re.findall(r"`([^`]+)`", what)]


ROWS = readme_rows()
WHO = {"the API server (schema)", "the API server (CEL)", "the webhook, or the operator"}


def manifest(example: str) -> dict[str, Any]:
    """examples/mnist-cpu.yaml with one field set: `Worker.x`, `tensorflow.x` (its container), `metadata.x`,
    `runPolicy.x`, or `<ReplicaType>.x` for a replica type it does not have."""
    path, value = example.split(": ", 1)
    job = copy.deepcopy(BASE)
    head, *rest = path.split(".")
    specs = job["spec"]["tfReplicaSpecs"]
    if head == "tensorflow":
        node = specs["Worker"]["template"]["spec"]["containers"][0]
    elif head in ("metadata", "spec"):
        node = job[head]
    elif head == "runPolicy":
        node = job["spec"]["runPolicy"]
    else:
        node = specs.setdefault(head, {})
    for key in rest[:-1]:
        node = node.setdefault(key, {})
    (node[rest[-1]],) = kubeyaml.load_all(value)  # the value as kubectl reads it
    return job


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`tfjob local up` as a user starts it: the CRD installed, no webhook, no operator."""
    workdir = tmp_path_factory.mktemp("readme-refusals")
    log_path = workdir / "local-up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "local", "up", "--pod-network", "off",
                               "--workdir", str(workdir / "cluster"), "--kubeconfig", str(workdir / "kubeconfig")],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "Press Ctrl-C" in log_path.read_text() or up.poll() is not None, 120, what="tfjob local up")
        assert up.poll() is None, log_path.read_text()
        yield workdir / "kubeconfig"
    finally:
        stop_process(up, 30, signal.SIGINT)


def test_the_table_has_every_layer_and_the_examples_of_the_issue() -> None:
    assert {who for _, who in ROWS} == WHO
    examples = [example for example, _ in ROWS]
    assert 'tensorflow.image: "  "' in examples and "tensorflow.resources: {limits: {nvidia.com/gpu: -1}}" in examples


#: Where an example's field is in the job, as the API server's message names it.
WHERE = {"Worker": "spec.tfReplicaSpecs", "PS": "spec.tfReplicaSpecs", "Chief": "spec.tfReplicaSpecs",
         "tensorflow": "spec.tfReplicaSpecs.Worker.template.spec.containers[0]", "runPolicy": "spec.runPolicy",
         "metadata": "a pod hostname"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("index", "example", "who"), [(i, e, w) for i, (e, w) in enumerate(ROWS)],
                         ids=[example for example, _ in ROWS])
def test_kubectl_apply_without_a_webhook_is_refused_or_stored_as_the_readme_says(
        kubeconfig: Path, tmp_path: Path, index: int, example: str, who: str) -> None:
    job = manifest(example)
    if not example.startswith("metadata.name"):
        job["metadata"]["name"] = f"readme-{index}"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    done = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "apply", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)
    if who.startswith("the API server"):
        assert done.returncode != 0, f"the API server stored it: {done.stdout}"
        assert "is invalid" in done.stderr or "unknown field" in done.stderr, done.stderr
        assert WHERE[example.split(".")[0]] in done.stderr, done.stderr  # the message names the field
        return
    assert done.returncode == 0 and " created" in done.stdout, done.stderr
    with pytest.raises(InvalidSpec):  # what the webhook answers, and the operator's Failed/InvalidSpec says
        parse_tfjob(job)
