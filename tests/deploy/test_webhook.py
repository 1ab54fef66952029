"""The admission webhooks, served by kopf as in production, answering AdmissionReview requests over HTTPS."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import kopf
import pytest
import yaml
from kopfrun import install_crd, running_kopf
from ports import free_port

from kubelocal.apiserver.thread import ApiServerThread
from kubelocal.cluster import install_crds
from tfjob_operator.api.apigroups import MANAGED_BY_MULTIKUEUE, KubeflowApi
from tfjob_operator.api.crd import KUBEFLOW_CRD_PATH
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.serving import webhook

ROOT = Path(__file__).resolve().parents[2]
CONFIG_NAME = "tfjob-operator.tfjob.dev"
GOOD = yaml.safe_load((ROOT / "examples" / "mnist-cpu.yaml").read_text())


def job(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    obj["metadata"].setdefault("namespace", "default")
    for path, value in changes.items():
        node = obj
        *parents, last = path.split("__")
        for part in parents:
            node = node[part]
        if value is None:
            node.pop(last)
        else:
            node[last] = value
    return obj


def review(obj: dict[str, Any], operation: str = "CREATE", group: str = "tfjob.dev") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": "v1", "kind": "TFJob"},
            "resource": {"group": group, "version": "v1", "resource": "tfjobs"},
            "requestKind": {"group": group, "version": "v1", "kind": "TFJob"},
            "requestResource": {"group": group, "version": "v1", "resource": "tfjobs"},
            "name": obj["metadata"].get("name"),
            "namespace": obj["metadata"].get("namespace"),
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": obj if operation == "UPDATE" else None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


class Webhook:
    def __init__(self, port: int, ca: bytes, configs: dict[str, Any]) -> None:
        self.port, self.configs = port, configs
        self.ssl = ssl.create_default_context(cadata=ca.decode())

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://127.0.0.1:{self.port}{path}", json=body, ssl=self.ssl) as resp:
                assert resp.status == 200, await resp.text()
                return dict(await resp.json())


@pytest.fixture
async def served() -> AsyncIterator[Webhook]:
    """The operator's admission server in self-signed mode, its CA taken from the configuration kopf wrote."""
    async for served in serve(KubeflowApi.OFF):
        yield served


@pytest.fixture
async def served_kubeflow() -> AsyncIterator[Webhook]:
    """The same, serving Kubeflow's kubeflow.org/v1 TFJobs too (TFJOB_KUBEFLOW_API=all)."""
    async for served in serve(KubeflowApi.ALL):
        yield served


async def serve(kubeflow_api: KubeflowApi) -> AsyncIterator[Webhook]:
    with ApiServerThread() as api:
        await install_crd(api.url)
        if kubeflow_api != KubeflowApi.OFF:
            await install_crds(api.url, [KUBEFLOW_CRD_PATH])
        registry = kopf.OperatorRegistry()
        webhook.register(registry, failure_policy="Fail", kubeflow_api=kubeflow_api)
        settings = kopf.OperatorSettings()
        port = free_port()
        webhook.configure_admission(settings, webhook.WebhookOptions(
            addr="127.0.0.1", port=port, service_name="tfjob-operator-webhook",
            service_namespace="tfjob-system", config_name=CONFIG_NAME,
        ))
        async with running_kopf(api.url, registry, settings), aiohttp.ClientSession() as session:
            configs: dict[str, Any] = {}
            for _ in range(200):  # kopf patches the configurations shortly after start
                for kind in ("validating", "mutating"):
                    url = f"{api.url}/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{CONFIG_NAME}"
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            configs[kind] = await resp.json()
                if all(c.get("webhooks") for c in configs.values()) and len(configs) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(configs) == 2, "kopf never wrote the webhook configurations"
            ca = base64.b64decode(configs["validating"]["webhooks"][0]["clientConfig"]["caBundle"])
            yield Webhook(port, ca, configs)


@pytest.mark.timeout(90)
async def test_operator_publishes_its_webhooks_behind_the_service_with_its_ca(served: Webhook) -> None:
    for kind, path in (("validating", "/validate-tfjob"), ("mutating", "/mutate-tfjob")):
        (hook,) = served.configs[kind]["webhooks"]
        assert hook["clientConfig"]["service"] == {
            "name": "tfjob-operator-webhook", "namespace": "tfjob-system", "port": 443, "path": path,
        }
        assert hook["failurePolicy"] == "Fail"
        assert hook["rules"][0]["resources"] == ["tfjobs"]
        assert sorted(hook["rules"][0]["operations"]) == ["CREATE", "UPDATE"]


INVALID = {
    "no tensorflow container": job(spec__tfReplicaSpecs__Worker__template__spec__containers=[
        {"name": "main", "image": "x"}, {"name": "sidecar", "image": "y"}]),
    "name too long": job(metadata__name="a" * 60),
    "two chiefs": job(spec__tfReplicaSpecs__Chief={"replicas": 2, "template": GOOD["spec"]["tfReplicaSpecs"][
        "Worker"]["template"]}),
    "bad restart policy": job(spec__tfReplicaSpecs__Worker__restartPolicy="Sometimes"),
    "replicas over the limit": job(spec__tfReplicaSpecs__Worker__replicas=100_000),
    "replicas 2 to the 63": job(spec__tfReplicaSpecs__Worker__replicas=2**63),
    "env as a mapping": job(spec__tfReplicaSpecs__Worker__template__spec__containers=[
        {"name": "tensorflow", "image": "x", "env": {"A": "b"}}]),
    "container name a mapping": job(spec__tfReplicaSpecs__Worker__template__spec__containers=[
        {"name": {"a": 1}, "image": "x"}]),
}


@pytest.mark.timeout(90)
async def test_valid_job_is_allowed_and_invalid_jobs_are_denied_with_field_named_messages(served: Webhook) -> None:
    for operation in ("CREATE", "UPDATE"):
        answer = await served.post("/validate-tfjob", review(job(), operation))
        assert answer["response"]["allowed"] is True, answer
        assert answer["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    for case, obj in INVALID.items():
        with pytest.raises(InvalidSpec) as refused:
            parse_tfjob(obj)
        answer = await served.post("/validate-tfjob", review(obj))
        response = answer["response"]
        assert response["allowed"] is False, case
        assert response["status"]["code"] == 422
        for message in refused.value.messages:  # the operator's own words, field first
            assert message in response["status"]["message"], case


@pytest.mark.timeout(90)
async def test_mutating_webhook_patch_adds_defaults_and_keeps_the_users_values(served: Webhook) -> None:
    bare = job(spec__runPolicy=None, spec__tfReplicaSpecs__Worker__restartPolicy=None,
               spec__tfReplicaSpecs__Worker__template__spec__containers=[
                   {"name": "tensorflow", "image": "worker:1", "ports": [{"name": "debug", "containerPort": 5678}]}])
    answer = await served.post("/mutate-tfjob", review(bare))
    response = answer["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {op["op"] for op in ops} == {"add"}  # defaults only add; nothing the user wrote is replaced
    patched = jsonpatch.apply_patch(bare, ops)
    worker = patched["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "Never"
    assert patched["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert worker["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "debug", "containerPort": 5678}, {"name": "tfjob-port", "containerPort": 2222},
    ]
    again = await served.post("/mutate-tfjob", review(patched))
    assert "patch" not in again["response"] or json.loads(base64.b64decode(again["response"]["patch"])) == []


KUBEFLOW_MASTER = {
    "apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "k", "namespace": "default"},
    "spec": {"tfReplicaSpecs": {"Master": {"template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "w"}]}}}}},
}


@pytest.mark.timeout(90)
async def test_kubeflow_tfjobs_get_their_own_webhooks_and_others_jobs_pass_untouched(served_kubeflow: Webhook) -> None:
    validating = served_kubeflow.configs["validating"]["webhooks"]
    groups = {hook["clientConfig"]["service"]["path"]: hook["rules"][0]["apiGroups"] for hook in validating}
    assert groups == {"/validate-tfjob": ["tfjob.dev"], "/validate-tfjob-kubeflow": ["kubeflow.org"]}
    kubeflow_job = job(apiVersion="kubeflow.org/v1")
    answer = await served_kubeflow.post("/validate-tfjob-kubeflow", review(kubeflow_job, group="kubeflow.org"))
    assert answer["response"]["allowed"] is True
    bad = job(apiVersion="kubeflow.org/v1", spec__runPolicy__managedBy="example.com/mine")
    answer = await served_kubeflow.post("/validate-tfjob-kubeflow", review(bad, group="kubeflow.org"))
    assert answer["response"]["allowed"] is False
    assert "spec.runPolicy.managedBy: 'example.com/mine'" in answer["response"]["status"]["message"]
    # MultiKueue's job is not ours to judge or default, even one the operator would refuse.
    theirs = job(apiVersion="kubeflow.org/v1", spec__runPolicy__managedBy=MANAGED_BY_MULTIKUEUE,
                 spec__enableDynamicWorker=True)
    for path in ("/validate-tfjob-kubeflow", "/mutate-tfjob-kubeflow"):
        answer = await served_kubeflow.post(path, review(theirs, group="kubeflow.org"))
        assert answer["response"]["allowed"] is True and "patch" not in answer["response"], path


def test_defaults_keep_the_users_spelling_of_replica_types() -> None:
    out = webhook.with_defaults(KUBEFLOW_MASTER)
    assert set(out["spec"]["tfReplicaSpecs"]) == {"Master"}
    assert out["spec"]["tfReplicaSpecs"]["Master"]["replicas"] == 1


def test_invalid_job_gets_no_defaults_and_the_validator_names_the_field() -> None:
    bad = job(spec__tfReplicaSpecs__Worker__replicas=-1)
    assert webhook.with_defaults(bad) == bad
    assert any(m.startswith("spec.tfReplicaSpecs.Worker.replicas") for m in webhook.admission_messages(bad))


def test_self_signed_certificate_covers_the_service_names(tmp_path: Path) -> None:
    from cryptography import x509

    cert_pem, _ = webhook.self_signed_certificate(webhook.service_hostnames("svc", "ns"))
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"svc.ns.svc", "svc.ns.svc.cluster.local"} <= set(sans.get_values_for_type(x509.DNSName))


def test_cert_manager_mode_serves_the_mounted_certificate_and_leaves_configurations_to_the_chart(
    tmp_path: Path,
) -> None:
    cert, key = webhook.self_signed_certificate(["localhost"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    settings = kopf.OperatorSettings()
    server = webhook.configure_admission(settings, webhook.WebhookOptions(cert_dir=tmp_path, config_name="x"))
    assert settings.admission.managed is None
    assert server.certfile == tmp_path / "tls.crt" and server.pkeyfile == tmp_path / "tls.key"


def test_unknown_failure_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="failure policy"):
        webhook.register(kopf.OperatorRegistry(), failure_policy="Sometimes")
