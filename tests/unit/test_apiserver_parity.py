"""The API server with our CRD, the operator's validation and the CLI read a TFJob alike: a name whose pods'
hostnames fit is stored and run, one whose pods' do not is refused by both; `namespace: ""` is the default."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubelocal.apiserver.plugins.cel_rules import violations
from tfjob_operator.api import crd
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.client import jobs

_SCHEMA = crd.generate()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
TEMPLATE = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:2.16"}]}}


def _job(name: str, **replicas: int) -> dict[str, Any]:
    return {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": {t: {"replicas": n, "template": TEMPLATE} for t, n in replicas.items()}}}


def _operator_accepts(manifest: dict[str, Any]) -> bool:
    try:
        parse_tfjob(manifest)
    except InvalidSpec:
        return False
    return True


@pytest.mark.parametrize(("length", "replicas", "stored"), [
    (54, {"Worker": 1}, True),  # 52-63 characters: Kubeflow runs these when the pods fit
    (55, {"Worker": 1}, False),
    (55, {"Master": 1}, True),
    (55, {"MASTER": 1}, True),
    (56, {"master": 1}, False),
    (52, {"worker": 1000}, True),
    (53, {"Worker": 1000}, False),
    (51, {"Chief": 1, "Worker": 4, "Evaluator": 1}, True),
    (52, {"Chief": 1, "Worker": 4, "Evaluator": 1}, False),
    (54, {"Chief": 1, "Worker": 4, "Evaluator": 0}, True),
])
def test_the_crd_stores_a_name_exactly_when_the_operator_runs_it(length: int, replicas: dict[str, int],
                                                                  stored: bool) -> None:
    manifest = _job("a" * length, **replicas)
    refusals = violations(_SCHEMA, manifest)
    assert (not refusals) is stored, refusals
    assert _operator_accepts(manifest) is stored
    if not stored:
        assert refusals[0][2].endswith("a pod hostname <name>-<type>-<index> would be longer than 63 characters "
                                       "(shorten the name, or lower replicas)")


class _Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def request_sync(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        return body


def test_submit_puts_a_job_with_an_empty_namespace_in_the_contexts_namespace_as_kubectl_does() -> None:
    manifest = _job("mnist", Worker=2)
    manifest["metadata"]["namespace"] = ""
    kube = _Recording()
    clients = jobs.Clients(None, None, None, "team-a", kube)  # type: ignore[arg-type]
    stored = jobs.submit(clients, parse_tfjob(manifest))
    (method, path, _), = kube.calls
    assert (method, path) == ("POST", "/apis/tfjob.dev/v1/namespaces/team-a/tfjobs")
    assert stored["metadata"]["namespace"] == "team-a"


def test_render_puts_a_job_with_an_empty_namespace_in_default(tmp_path: Any) -> None:
    import subprocess
    import sys

    import yaml

    manifest = _job("mnist", Worker=2)
    manifest["metadata"]["namespace"] = ""
    result = subprocess.run([sys.executable, "-m", "tfjob_operator", "render", "-"], input=json.dumps(manifest),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert {o["metadata"]["namespace"] for o in yaml.safe_load_all(result.stdout) if o} == {"default"}


@pytest.mark.parametrize("served", ["512", "512.0"])
def test_status_prints_a_whole_examples_per_second_alike_from_either_api_server(served: str) -> None:
    """kube-apiserver stores a CRD number as Go's float64 and writes 512.0 back as `512`; kubelocal keeps `512.0`.
    `tfjob status` says the same on both."""
    status = {"progress": json.loads(f'{{"summary": "epoch 1/2 step 5", "examplesPerSecond": {served}}}')}
    assert jobs.progress_text(status) == "epoch 1/2 step 5, 512.0 examples/s"
