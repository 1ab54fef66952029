"""`tfjob render --gang BACKEND`: the PodGroup and pod decorations a gang backend adds, as a user sees them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from shared_data import CRDS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist-cpu.yaml"


def render(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfjob_operator", "render", *args], input=stdin,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def objects(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def crd_schema(filename: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / filename).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("backend, crd", [("volcano", "scheduling.volcano.sh_podgroups.yaml"),
                                          ("scheduler-plugins", "scheduling.x-k8s.io_podgroups.yaml")])
def test_podgroup_backends_print_a_valid_podgroup_before_the_pods(backend: str, crd: str) -> None:
    out = objects(render(str(EXAMPLE), "--gang", backend))
    assert [o["kind"] for o in out] == ["Service", "PodGroup", "Pod", "Pod"]
    group = out[1]
    jsonschema.validate(group, crd_schema(crd))
    assert group["spec"]["minMember"] == 2 and group["metadata"]["ownerReferences"][0]["kind"] == "TFJob"
    pods = out[2:]
    if backend == "volcano":
        assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
        assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods} == {"mnist-cpu"}
    else:
        assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in pods} == {"mnist-cpu"}


def test_builtin_gates_every_pod_and_adds_no_group() -> None:
    out = objects(render(str(EXAMPLE), "--gang", "builtin"))
    assert [o["kind"] for o in out] == ["Service", "Pod", "Pod"]
    assert all({"name": "tfjob.dev/gang"} in p["spec"]["schedulingGates"] for p in out[1:])


def test_without_gang_pods_are_printed_undecorated() -> None:
    out = objects(render(str(EXAMPLE)))
    assert all("schedulingGates" not in p["spec"] for p in out if p["kind"] == "Pod")


def test_kueue_labels_every_pod_with_the_queue_and_group() -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"].setdefault("runPolicy", {})["schedulingPolicy"] = {"queue": "team-a"}
    pods = [o for o in objects(render("-", "--gang", "kueue", stdin=yaml.safe_dump(manifest))) if o["kind"] == "Pod"]
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for p in pods} == {"team-a"}
    assert {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in pods} == {"2"}


def test_the_jobs_own_annotation_wins_over_the_flag_as_in_the_operator() -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"].setdefault("annotations", {})["tfjob.dev/gang-backend"] = "volcano"
    out = objects(render("-", "--gang", "builtin", stdin=yaml.safe_dump(manifest)))
    assert [o["kind"] for o in out] == ["Service", "PodGroup", "Pod", "Pod"]


@pytest.mark.parametrize("args, message", [
    (["--gang", "slurm"], "--gang: unknown gang backend 'slurm' (choose one of builtin, kueue, none, "
                          "scheduler-plugins, volcano)"),
    (["--gang", "kueue"], "mnist-cpu: spec.runPolicy.schedulingPolicy.queue: required by the kueue gang backend"),
], ids=["unknown-backend", "kueue-without-queue"])
def test_render_refuses_what_the_backend_cannot_run(args: list[str], message: str) -> None:
    result = render(str(EXAMPLE), *args)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr
