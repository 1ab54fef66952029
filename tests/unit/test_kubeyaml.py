"""Manifests are read as kubectl reads them: each value below goes through the real kubectl 1.37 (`kubectl label
--local -o json`, no server: the same YAML-to-JSON step as `kubectl apply`) and through `kubeyaml`, and both
must give the same JSON value, or both refuse. Then `tfjob render` with tagged values, as the fuzz tier found."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.api import kubeyaml
from tfjob_operator.client.cli import main

KUBECTL = shutil.which("kubectl", path=str(Path(__file__).resolve().parents[2] / ".venv" / "bin")) or "kubectl"

#: YAML values where PyYAML and go-yaml v2 (kubectl) disagree, and neighbours that they agree on.
VALUES = [
    "y", "Y", "n", "N", "yes", "NO", "on", "Off", "yEs", "tRue", "~", "nUll", "0x1F", "0o17", "017", "08", "0b11",
    "+5", "-0x10", "1_0", "0x_1F", "_1", "0.", "1e3", "1.e3", ".5", "-1.5e-3", "1_0.5", "1.0", "1e400", "1:30",
    "190:20:30.15", "2001-12-14", "2001-12-14 21:59:43.10 -5", "9223372036854775807", "9223372036854775808",
    "0xFFFFFFFFFFFFFFFFF", "00", "!!binary aGVsbG8=", "!!binary 8J+YgA==", "!!binary /w==", "!!binary \"\"",
    "!!binary |\n    bW5p\n    c3Q=", "!!binary aGVsbG8", "!!binary \" aGVs bG8= \"", "!!str true", "!!int 12",
    "!!int \"0x10\"", "!!int \"abc\"", "!!int 1.5", "!!float 12", "!!bool \"y\"", "!!null \"\"", "!!timestamp abc",
    "!!timestamp 2001-12-14", "!local x", "!<tag:example.com,2000:x> y", "!!set {a, b}", "!!omap [a: 1]",
    "\"y\"", "'0x10'", ".nan", ".inf", "-.Inf", "{1: a}", "{1.5: a}", "{1e6: a}", "{1234567.0: a}", "{yes: a}",
    "{0x10: a}", "{.inf: a}", "{null: a}", "{9223372036854775808: a}", "{<<: {a: 1}, b: 2}", "{a: 1, a: 2}",
    "[1, y, !!binary aGk=]",
]


def _document(value: str, name: str = "x") -> str:
    return f"apiVersion: tfjob.dev/v1\nkind: TFJob\nmetadata:\n  name: {name}\nspec:\n  v: {value}\n"


def _kubectl(documents: list[str]) -> list[Any]:
    """The value of each document's spec.v as kubectl sends it, or "refused" when kubectl refuses the file."""
    done = subprocess.run([KUBECTL, "label", "--local", "-f", "-", "-o", "json", "x=y"],
                          input="---\n".join(documents), capture_output=True, text=True,
                          env={"KUBECONFIG": "/dev/null"}, timeout=60)
    if done.returncode:
        return ["refused"] * len(documents)
    objects, at, decoder = [], 0, json.JSONDecoder()
    while at < len(done.stdout.rstrip()):  # one JSON object per document, one after another
        obj, at = decoder.raw_decode(done.stdout, at)
        objects.append(obj)
        at += len(done.stdout[at:]) - len(done.stdout[at:].lstrip())
    return [obj["spec"]["v"] for obj in objects]


def _ours(document: str) -> Any:
    try:
        (doc,) = kubeyaml.load_all(document)
    except yaml.YAMLError:
        return "refused"
    return json.loads(json.dumps(doc["spec"]["v"]))  # as it goes on the wire


def _same(theirs: Any, ours: Any) -> bool:
    # kubectl prints what it read back: an integer past int64 as the float's digits (9223372036854776000).
    if isinstance(theirs, int) and isinstance(ours, float):
        return float(theirs) == ours
    return bool(theirs == ours and type(theirs) is type(ours))


def test_every_value_reads_as_kubectl_reads_it() -> None:
    ours = {value: _ours(_document(value)) for value in VALUES}
    # One kubectl run for all the values we read (a refusal would refuse the whole file), one for each we refuse.
    readable = [v for v in VALUES if ours[v] != "refused"]
    theirs = dict(zip(readable, _kubectl([_document(v, f"x{i}") for i, v in enumerate(readable)]), strict=True))
    theirs.update({v: _kubectl([_document(v)])[0] for v in VALUES if ours[v] == "refused"})
    assert [(v, theirs[v], ours[v]) for v in VALUES if not _same(theirs[v], ours[v])] == []
    assert sum(ours[v] == "refused" for v in VALUES) >= 10  # the refusals were compared one by one


def test_render_reads_binary_tagged_values_as_kubectl_sends_them(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The fuzz tier's finding: a name and a restartPolicy tagged !!binary are their decoded text for kubectl,
    so render accepts them as that text (and refuses what that text does not allow)."""
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: tfjob.dev/v1\nkind: TFJob\nmetadata: {name: !!binary bW5pc3Q=}\nspec:\n"
                   "  tfReplicaSpecs:\n    Worker:\n      restartPolicy: !!binary T25GYWlsdXJl\n"
                   "      template: {spec: {containers: [{name: tensorflow, image: tf:1}]}}\n")
    assert main(["render", str(job)]) == 0
    pods = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["mnist-worker-0"]
    assert pods[0]["spec"]["restartPolicy"] == "OnFailure"
    job.write_text(job.read_text().replace("bW5pc3Q=", "/w=="))  # one byte that is not UTF-8: U+FFFD
    assert main(["render", str(job)]) == 2
    assert "metadata.name: '\ufffd' is not a DNS-1035 label" in capsys.readouterr().err


def test_render_writes_strings_kubectl_would_read_otherwise_quoted(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: tfjob.dev/v1\nkind: TFJob\nmetadata: {name: quoted}\nspec:\n  tfReplicaSpecs:\n"
                   "    Worker:\n      template: {spec: {containers: [{name: tensorflow, image: tf:1, env: [\n"
                   "        {name: A, value: \"y\"}, {name: B, value: \"0o17\"}, {name: C, value: \"1e3\"}]}]}}\n")
    assert main(["render", str(job)]) == 0
    out = capsys.readouterr().out
    env = next(o for o in kubeyaml.load_all(out) if o["kind"] == "Pod")["spec"]["containers"][0]["env"]
    assert {e["name"]: e["value"] for e in env if e["name"] in "ABC"} == {"A": "y", "B": "0o17", "C": "1e3"}
