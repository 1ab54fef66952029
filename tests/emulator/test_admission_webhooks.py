"""Admission webhooks called by the API server exactly as a cluster calls them, through the official
client: HTTPS verified with the configuration's caBundle, rules, selectors, failurePolicy, timeouts."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from polling import wait_for

from kubelocal.pki import new_ca

Review = dict[str, Any]


@dataclass
class Hook:
    """A TLS webhook server in a thread; `answer` decides each review's response."""

    url: str
    port: int
    ca_bundle: str
    answer: Callable[[Review], dict[str, Any]] = lambda review: {"allowed": True}
    seen: list[Review] = field(default_factory=list)


def _serving_cert(tmp: Path) -> tuple[Path, Path, str]:
    """A CA and a server certificate for 127.0.0.1 and hooks.default.svc (paths and the CA's PEM)."""
    ca = new_ca("webhook-test-ca")
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.default.svc")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.default.svc"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    cert_path, key_path = tmp / "tls.crt", tmp / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, ca.cert_pem


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    cert, key, ca_pem = _serving_cert(tmp_path)
    state = Hook("", 0, base64.b64encode(ca_pem.encode()).decode())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.seen.append(review)
            answer = {"uid": review["request"]["uid"], **state.answer(review)}
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": answer}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    state.url = f"https://127.0.0.1:{state.port}/validate"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def _config(kind: str, hook: Hook, **webhook: Any) -> dict[str, Any]:
    entry = {"name": "check.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle},
             "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["configmaps"]}], **webhook}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "test-hooks"},
            "webhooks": [entry]}


@pytest.fixture
def admission(client: kubernetes.client.ApiClient) -> kubernetes.client.AdmissionregistrationV1Api:
    return kubernetes.client.AdmissionregistrationV1Api(client)


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def _refusal(call: Callable[..., Any], *args: Any) -> tuple[int, str]:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        call(*args)
    return refused.value.status, json.loads(refused.value.body)["message"]


def test_a_validating_webhook_refuses_with_its_message_and_code(core, admission, hook: Hook) -> None:
    hook.answer = lambda review: ({"allowed": False, "status": {"code": 403, "message": "no deny labels"}}
                                  if review["request"]["object"]["metadata"].get("labels", {}).get("deny")
                                  else {"allowed": True})
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook))
    core.create_namespaced_config_map("default", _cm("fine"))
    status, message = _refusal(core.create_namespaced_config_map, "default", _cm("bad", deny="yes"))
    assert (status, message) == (403, 'admission webhook "check.example.com" denied the request: no deny labels')
    request = hook.seen[-1]["request"]
    assert (request["operation"], request["namespace"], request["resource"]["resource"]) == (
        "CREATE", "default", "configmaps")


def test_a_mutating_webhook_patches_the_object_before_it_is_stored(core, admission, hook: Hook) -> None:
    patch = [{"op": "add", "path": "/data/added", "value": "by-webhook"}]
    hook.answer = lambda review: {"allowed": True, "patchType": "JSONPatch",
                                  "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
    admission.create_mutating_webhook_configuration(_config("MutatingWebhookConfiguration", hook))
    core.create_namespaced_config_map("default", _cm("patched"))
    assert core.read_namespaced_config_map("patched", "default").data == {"k": "v", "added": "by-webhook"}


def test_an_object_selector_limits_which_objects_are_sent(core, admission, hook: Hook) -> None:
    admission.create_validating_webhook_configuration(_config(
        "ValidatingWebhookConfiguration", hook, objectSelector={"matchLabels": {"hooked": "yes"}}))
    core.create_namespaced_config_map("default", _cm("skipped"))
    core.create_namespaced_config_map("default", _cm("sent", hooked="yes"))
    assert [r["request"]["name"] for r in hook.seen] == ["sent"]


def test_a_namespace_selector_limits_which_namespaces_are_sent(core, admission, hook: Hook) -> None:
    only_system = {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    admission.create_validating_webhook_configuration(_config(
        "ValidatingWebhookConfiguration", hook, namespaceSelector=only_system))
    core.create_namespaced_config_map("default", _cm("not-sent"))
    core.create_namespaced_config_map("kube-system", _cm("sent"))
    assert [r["request"]["namespace"] for r in hook.seen] == ["kube-system"]


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_webhook_with_the_wrong_ca_fails_closed_or_is_ignored_per_failure_policy(
        core, admission, hook: Hook, policy: str) -> None:
    other = base64.b64encode(new_ca("someone-else").cert_pem.encode()).decode()
    config = _config("ValidatingWebhookConfiguration", hook, failurePolicy=policy)
    config["webhooks"][0]["clientConfig"]["caBundle"] = other
    admission.create_validating_webhook_configuration(config)
    if policy == "Ignore":
        core.create_namespaced_config_map("default", _cm("admitted"))
        return
    status, message = _refusal(core.create_namespaced_config_map, "default", _cm("refused"))
    assert status == 500
    assert 'failed calling webhook "check.example.com"' in message and "CERTIFICATE_VERIFY_FAILED" in message
    assert not hook.seen


def test_a_webhook_slower_than_its_timeout_fails_the_write(core, admission, hook: Hook) -> None:
    def slow(review: Review) -> dict[str, Any]:
        time.sleep(2)
        return {"allowed": True}

    hook.answer = slow
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook,
                                                              timeoutSeconds=1))
    status, message = _refusal(core.create_namespaced_config_map, "default", _cm("late"))
    assert status == 500 and "timed out" in message


def test_a_service_reference_is_called_at_its_service_name(core, admission, hook: Hook) -> None:
    core.create_namespaced_service("default", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks"},
                                               "spec": {"ports": [{"port": 443, "targetPort": hook.port}]}})
    config = _config("ValidatingWebhookConfiguration", hook)
    config["webhooks"][0]["clientConfig"] = {"caBundle": hook.ca_bundle,
                                             "service": {"namespace": "default", "name": "hooks", "path": "/v"}}
    admission.create_validating_webhook_configuration(config)
    core.create_namespaced_config_map("default", _cm("via-service"))
    assert [r["request"]["name"] for r in hook.seen] == ["via-service"]


def test_rules_limit_operations_and_resources(core, admission, hook: Hook) -> None:
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook))
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
    core.create_namespaced_config_map("default", _cm("c"))
    core.delete_namespaced_config_map("c", "default")
    assert [(r["request"]["operation"], r["request"]["name"]) for r in hook.seen] == [("CREATE", "c")]


def test_a_pending_webhook_does_not_hold_other_clients_requests(api, core, admission, hook: Hook) -> None:
    """A slow webhook on ConfigMaps: while it has not answered, a GET of a Secret is served (the API server's
    event loop is free); then the ConfigMap write completes with the webhook's decision."""
    called, release = threading.Event(), threading.Event()

    def slow(review: Review) -> dict[str, Any]:
        called.set()
        release.wait(60)
        return {"allowed": True}

    hook.answer = slow
    core.create_namespaced_secret("default", {"metadata": {"name": "other"}, "stringData": {"k": "v"}})
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook,
                                                              timeoutSeconds=30))
    written: list[Any] = []
    writer = threading.Thread(target=lambda: written.append(core.create_namespaced_config_map("default", _cm("w"))))
    writer.start()
    try:
        assert called.wait(20), "the webhook was never called"
        # Answered while the webhook still holds its reply (release is not set yet): the event loop was free.
        # (Plain requests: no client retry may resend the GET after the webhook's timeout let the loop go.)
        other = requests.get(f"{api.url}/api/v1/namespaces/default/secrets/other", timeout=20)
        assert (other.status_code, other.json()["metadata"]["name"]) == (200, "other")
        assert not release.is_set() and writer.is_alive() and not written
    finally:
        release.set()
        writer.join(30)
    assert [cm.metadata.name for cm in written] == ["w"]
    assert core.read_namespaced_config_map("w", "default").data == {"k": "v"}
    assert len(hook.seen) == 1  # called once: the write ran again with the answer, not the webhook


def test_a_collection_delete_calls_the_webhook_once_per_object_and_lists_every_deleted_one(
        http, core, admission, hook: Hook) -> None:
    for name in ("a", "b", "c"):
        core.create_namespaced_config_map("default", _cm(name, group="g"))
    rules = [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook, rules=rules))
    listed = http("DELETE", "/api/v1/namespaces/default/configmaps?labelSelector=group%3Dg").json()
    assert sorted(item["metadata"]["name"] for item in listed["items"]) == ["a", "b", "c"]
    assert sorted(review["request"]["name"] for review in hook.seen) == ["a", "b", "c"]
    assert core.list_namespaced_config_map("default", label_selector="group=g").items == []


def test_mutating_then_validating_webhooks_each_judge_a_generated_name_create_once(core, admission, hook: Hook) -> None:
    """Two webhooks, so the write runs three times: the patch is applied once, to the body as sent, and the
    validating webhook sees the patched object with the name and uid the server generated: those stored."""
    patch = [{"op": "add", "path": "/data/added", "value": "by-webhook"}]

    def answer(review: Review) -> dict[str, Any]:
        if review["request"]["object"]["data"].get("added"):
            return {"allowed": True}  # the validating call: the mutation is already there
        encoded = base64.b64encode(json.dumps(patch).encode()).decode()
        return {"allowed": True, "patchType": "JSONPatch", "patch": encoded}

    hook.answer = answer
    admission.create_mutating_webhook_configuration(_config("MutatingWebhookConfiguration", hook))
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook))
    body = {"metadata": {"generateName": "gen-"}, "data": {"k": "v"}}
    created = core.create_namespaced_config_map("default", body)
    assert created.data == {"k": "v", "added": "by-webhook"}
    mutating, validating = hook.seen
    assert "name" not in mutating["request"]["object"]["metadata"]
    judged = validating["request"]["object"]["metadata"]
    assert (judged["name"], judged["uid"]) == (created.metadata.name, created.metadata.uid)
    assert [cm.metadata.name for cm in core.list_namespaced_config_map("default").items] == [created.metadata.name]


def test_a_deleted_crd_takes_its_objects_with_it_past_a_webhook_that_refuses_their_deletion(
        client, custom, widgets, admission, hook: Hook) -> None:
    """As kube-apiserver's CRD cleanup deletes from storage (no admission): a webhook refusing users' deletes of
    widgets neither blocks nor is asked about the deletion of the widgets' CRD."""
    custom.create_namespaced_custom_object("emulator.test", "v1", "default", "widgets", {
        "apiVersion": "emulator.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "small"}})
    hook.answer = lambda review: {"allowed": False, "status": {"code": 403, "message": "widgets stay"}}
    rules = [{"operations": ["DELETE"], "apiGroups": ["emulator.test"], "apiVersions": ["v1"],
              "resources": ["widgets"]}]
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook, rules=rules))
    status, message = _refusal(custom.delete_namespaced_custom_object, "emulator.test", "v1", "default", "widgets",
                               "w")
    assert status == 403 and "widgets stay" in message
    asked = len(hook.seen)
    ext = kubernetes.client.ApiextensionsV1Api(client)
    ext.delete_custom_resource_definition("widgets.emulator.test")

    def crd_gone() -> bool:
        try:
            ext.read_custom_resource_definition("widgets.emulator.test")
        except kubernetes.client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(crd_gone, timeout=20, what="the CRD deleted with its widget")
    assert len(hook.seen) == asked


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}


def test_an_eviction_is_judged_by_webhooks_on_evictions_and_not_by_those_on_pod_deletes(
        core, admission, hook: Hook) -> None:
    """As kube's eviction subresource: the webhook sees a CREATE of pods/eviction whose object is the Eviction; a
    refusal leaves the pod as it was. The pod is then deleted from storage, past a webhook refusing pod deletes."""
    core.create_namespaced_pod("default", _pod("p"))
    hook.answer = lambda review: ({"allowed": False, "status": {"code": 429, "message": "not during training"}}
                                  if review["request"].get("subResource") == "eviction" else {"allowed": True})
    rules = [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"]}]
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook, rules=rules))
    eviction = {"metadata": {"name": "p", "namespace": "default"}, "deleteOptions": {"gracePeriodSeconds": 0}}
    status, message = _refusal(core.create_namespaced_pod_eviction, "p", "default", eviction)
    assert status == 429 and "not during training" in message
    (review,) = [r["request"] for r in hook.seen]
    assert (review["kind"]["kind"], review["resource"]["resource"], review["subResource"], review["operation"]) == (
        "Eviction", "pods", "eviction", "CREATE")
    assert review["object"]["deleteOptions"] == {"gracePeriodSeconds": 0}
    untouched = core.read_namespaced_pod("p", "default")
    assert untouched.metadata.deletion_timestamp is None
    assert not [c for c in untouched.status.conditions or [] if c.type == "DisruptionTarget"]

    admission.delete_validating_webhook_configuration("test-hooks")
    hook.answer = lambda review: {"allowed": False, "status": {"code": 403, "message": "pods stay"}}
    rules = [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook, rules=rules))
    assert _refusal(core.delete_namespaced_pod, "p", "default")[0] == 403
    asked = len(hook.seen)
    core.create_namespaced_pod_eviction("p", "default", eviction)
    assert _refusal(core.read_namespaced_pod, "p", "default")[0] == 404  # gracePeriodSeconds 0: gone at once
    assert len(hook.seen) == asked


def test_a_webhook_is_told_the_service_account_a_token_names(api, core, client, admission, hook: Hook) -> None:
    core.create_namespaced_service_account("default", {"metadata": {"name": "writer"}})
    rbac = kubernetes.client.RbacAuthorizationV1Api(client)
    rbac.create_namespaced_role("default", {"metadata": {"name": "cm-writer"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding("default", {
        "metadata": {"name": "writer"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                    "name": "cm-writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": "default"}]})
    admission.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", hook))
    token = core.create_namespaced_service_account_token("writer", "default", {"spec": {}}).status.token
    cfg = kubernetes.client.Configuration()
    cfg.host, cfg.api_key, cfg.api_key_prefix = api.url, {"authorization": token}, {"authorization": "Bearer"}
    with kubernetes.client.ApiClient(cfg) as as_writer:
        kubernetes.client.CoreV1Api(as_writer).create_namespaced_config_map("default", _cm("written"))
    user = hook.seen[-1]["request"]["userInfo"]
    assert user["username"] == "system:serviceaccount:default:writer"
    assert user["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    assert user["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")
