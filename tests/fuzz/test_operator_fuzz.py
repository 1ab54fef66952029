"""The operator on the local cluster, fed generated TFJobs straight through the API (no webhook, as with
`failurePolicy: Ignore`): every job the API server stores gets a status — Failed/InvalidSpec naming the field,
or a normal lifecycle — within a bound; the operator never restarts and logs no traceback."""

from __future__ import annotations

import copy
import itertools
import json
import os
from typing import Any

import pytest
import requests
from fuzz_documents import mutated_job
from fuzz_settings import EXAMPLES, FUZZ, SEED
from hypothesis import given, seed, settings
from operator_harness import NS, Cluster, Operator, cluster, operator
from polling import wait_for

pytestmark = pytest.mark.timeout(600)
__all__ = ["cluster", "operator"]  # the module's local cluster and operator (fixtures)

_names = (f"fz{i}" for i in itertools.count())
#: Jobs the API server stored, by name (checked again at the end of the module).
STORED: dict[str, Any] = {}


def post(cluster: Cluster, doc: Any) -> requests.Response:
    body = json.dumps(doc, allow_nan=True)  # what a careless client sends; the API server must answer 400
    return requests.post(f"{cluster.local.url}/apis/tfjob.dev/v1/namespaces/{NS}/tfjobs", data=body,
                         headers={"Content-Type": "application/json"}, timeout=30)


def settled(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The job's true condition once it has one (Failed with a message, or any other), else None."""
    status = cluster.status(name)
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    return true[-1] if true else None


def check_job(cluster: Cluster, operator: Operator, doc: Any) -> None:
    response = post(cluster, doc)
    assert response.status_code < 500, response.text  # refused (4xx) or stored, never an API server error
    if response.status_code >= 300:
        return
    name = response.json()["metadata"]["name"]
    STORED[name] = doc
    condition = wait_for(lambda: settled(cluster, name), 30, what=f"a status on {name}")
    if condition["type"] == "Failed":
        assert condition["reason"] in ("InvalidSpec", "PodCreateFailed", "PodFailed", "BackoffLimitExceeded"), \
            condition
        if condition["reason"] == "InvalidSpec":
            assert condition["message"].split(":", 1)[0].replace("[", ".").split(".")[0] in (
                "spec", "metadata", "apiVersion", "kind", "(document)"), condition["message"]
    assert operator.proc is not None and operator.proc.poll() is None, operator.log()[-3000:]


def _named(doc: Any) -> Any:
    if isinstance(doc, dict):
        doc = copy.deepcopy(doc)
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            meta = doc["metadata"] = {}
        meta["name"] = next(_names)  # names are fuzzed by the render tier; here every job must be new
        meta.pop("namespace", None)
    return doc


@settings(FUZZ, max_examples=max(5, EXAMPLES // 10))
@seed(SEED)
@given(doc=mutated_job())
def test_operator_gives_every_stored_job_a_status_without_restarting(
        cluster: Cluster, operator: Operator, doc: Any) -> None:
    check_job(cluster, operator, _named(doc))


#: Issue 15: pod-template internals of the wrong type passed the CRD and were retried forever with a traceback.
#: Now the CRD refuses what it types (containers are objects), the operator fails the rest as InvalidSpec.
WRONG_TEMPLATES = {
    "env-as-mapping": ("operator", {"containers": [{"name": "tensorflow", "image": "local", "env": {"A": "b"}}]}),
    "ports-5": ("operator", {"containers": [{"name": "tensorflow", "image": "local", "ports": 5}]}),
    "container-name-mapping": ("operator", {"containers": [{"name": {"a": 1}, "image": "local"}]}),
    "bad-quantity": ("api-server", {"containers": [{"name": "tensorflow", "image": "local",
                                                  "resources": {"limits": {"cpu": "lots"}}}]}),
    "template-metadata-x": ("operator", {"containers": [{"name": "tensorflow", "image": "local"}]}),
    "container-as-string": ("api-server", {"containers": ["tensorflow"]}),
}


@pytest.mark.parametrize("key", list(WRONG_TEMPLATES))
def test_wrongly_typed_template_is_refused_or_fails_invalid_spec_naming_the_field(
        cluster: Cluster, operator: Operator, key: str) -> None:
    who, spec = WRONG_TEMPLATES[key]
    template: dict[str, Any] = {"spec": spec}
    if key == "template-metadata-x":
        template["metadata"] = "x"
    name = next(_names)
    response = post(cluster, {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name},
                              "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}}})
    if who == "api-server":
        assert response.status_code == 422, response.text
        assert "spec.tfReplicaSpecs.Worker.template.spec.containers[0]" in response.json()["message"]
        return
    assert response.status_code == 201, response.text
    condition = wait_for(lambda: settled(cluster, name), 30, what=f"a status on {name}")
    assert (condition["type"], condition["reason"]) == ("Failed", "InvalidSpec"), condition
    assert condition["message"].startswith("spec.tfReplicaSpecs.Worker.template."), condition["message"]
    assert cluster.pods(name) == []


def test_operator_did_not_restart_or_log_a_traceback(cluster: Cluster, operator: Operator) -> None:
    """Runs last in the module: the verdict over every job above."""
    assert operator.proc is not None and operator.proc.poll() is None
    assert "Traceback" not in operator.log(), operator.log()[-5000:]
    if os.environ.get("TFJOB_FUZZ_REPORT"):
        print(f"\n{len(STORED)} generated jobs stored by the API server and reconciled")
