"""ServiceAccount tokens as a pod's client meets them: the TokenRequest API issues one, the official client and
kubectl present it as a bearer token, RBAC decides what it may do, and a token that is forged, expired, for
another audience, or of a deleted ServiceAccount or Pod gets kube-apiserver's 401."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from emulator_helpers import KUBECTL
from kubernetes.client.exceptions import ApiException

from kubelocal.apiserver import ApiServerThread, write_kubeconfig
from kubelocal.apiserver.tokens import KUBELET_EXPIRATION, ServiceAccountTokens
from kubelocal.kubeclient import KubeClient
from kubelocal.network import server_ssl_context, serving_certificate
from kubelocal.pki import new_ca
from kubelocal.podtoken import PodCredentials, automount, pod_credentials

NS = "team"
UNAUTHORIZED = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized",'
                '"reason":"Unauthorized","code":401}\n')
Core = kubernetes.client.CoreV1Api


@pytest.fixture
def admin(core: Core, client: kubernetes.client.ApiClient) -> Core:
    """A namespace with the ServiceAccount `trainer`, allowed by a Role to get and list pods there."""
    core.create_namespace({"metadata": {"name": NS}})
    core.create_namespaced_service_account(NS, {"metadata": {"name": "trainer"}})
    rbac = kubernetes.client.RbacAuthorizationV1Api(client)
    rbac.create_namespaced_role(NS, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
    rbac.create_namespaced_role_binding(NS, {
        "metadata": {"name": "trainer-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": NS}]})
    return core


def token_for(core: Core, name: str = "trainer", **spec: Any) -> str:
    issued = core.create_namespaced_service_account_token(name, NS, {"spec": spec})
    return str(issued.status.token)


@pytest.fixture
def as_token(api: ApiServerThread) -> Iterator[Callable[[str], Core]]:
    """The official client presenting a bearer token (`Configuration.api_key`, as load_incluster_config sets it)."""
    clients: list[kubernetes.client.ApiClient] = []

    def make(token: str) -> Core:
        cfg = kubernetes.client.Configuration()
        cfg.host = api.url
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        clients.append(kubernetes.client.ApiClient(cfg))
        return Core(clients[-1])

    yield make
    for c in clients:
        c.close()


def failure(call: Callable[[], Any]) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value


def test_a_requested_token_authenticates_and_rbac_allows_what_its_role_grants(
    admin: Core, as_token: Callable[[str], Core]
) -> None:
    trainer = as_token(token_for(admin))
    admin.create_namespaced_pod(NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert [p.metadata.name for p in trainer.list_namespaced_pod(NS).items] == ["p"]
    assert trainer.read_namespaced_pod("p", NS).metadata.name == "p"

    denied = failure(lambda: trainer.list_namespaced_secret(NS))
    assert denied.status == 403
    assert json.loads(denied.body)["message"] == (
        'secrets is forbidden: User "system:serviceaccount:team:trainer" cannot list resource "secrets" '
        'in API group "" in the namespace "team"')
    named = failure(lambda: trainer.delete_namespaced_pod("p", NS))
    assert json.loads(named.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "p" is forbidden: User "system:serviceaccount:team:trainer" cannot delete resource '
                   '"pods" in API group "" in the namespace "team"',
        "reason": "Forbidden", "details": {"name": "p", "kind": "pods"}, "code": 403}
    other_ns = failure(lambda: trainer.list_namespaced_pod("default"))
    assert json.loads(other_ns.body)["message"].endswith(
        'cannot list resource "pods" in API group "" in the namespace "default"')


def test_the_token_names_the_service_account_and_its_groups(admin: Core, api: ApiServerThread) -> None:
    cfg = kubernetes.client.Configuration()
    cfg.host, cfg.api_key = api.url, {"authorization": token_for(admin)}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    with kubernetes.client.ApiClient(cfg) as c:
        info = kubernetes.client.AuthenticationV1Api(c).create_self_subject_review({}).status.user_info
    assert info.username == "system:serviceaccount:team:trainer"
    assert info.groups == ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]
    assert info.extra["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")


def test_forged_garbage_and_other_audience_tokens_get_401(admin: Core, api: ApiServerThread,
                                                         as_token: Callable[[str], Core]) -> None:
    server = api.server
    account = server.store.get(("", "serviceaccounts"), NS, "trainer")
    assert account is not None
    forger = ServiceAccountTokens(server.store, key=ec.generate_private_key(ec.SECP256R1()))
    forged, _ = forger.issue(NS, account)  # the right claims, another key
    tampered = token_for(admin)[:-4] + "AAAA"
    for token in (forged, tampered, "not-a-jwt", token_for(admin, audiences=["vault"])):
        refused = failure(lambda t=token: as_token(t).list_namespaced_pod(NS))
        assert (refused.status, refused.body) == (401, UNAUTHORIZED)


def test_an_expired_token_gets_401(admin: Core, api: ApiServerThread, as_token: Callable[[str], Core]) -> None:
    account = api.server.store.get(("", "serviceaccounts"), NS, "trainer")
    assert account is not None
    # Issued two hours ago for one hour: past its expiry and the minute of clock-skew leeway.
    expired, _ = api.server.tokens.issue(NS, account, expiration=3600, now=time.time() - 7200)
    refused = failure(lambda: as_token(expired).list_namespaced_pod(NS))
    assert (refused.status, refused.body) == (401, UNAUTHORIZED)
    fresh, _ = api.server.tokens.issue(NS, account, expiration=3600, now=time.time() - 3590)
    assert as_token(fresh).list_namespaced_pod(NS).items == []


def test_a_deleted_or_recreated_service_accounts_token_gets_401(admin: Core, as_token: Callable[[str], Core]) -> None:
    trainer = as_token(token_for(admin))
    assert trainer.list_namespaced_pod(NS).items == []
    admin.delete_namespaced_service_account("trainer", NS)
    assert failure(lambda: trainer.list_namespaced_pod(NS)).body == UNAUTHORIZED
    admin.create_namespaced_service_account(NS, {"metadata": {"name": "trainer"}})  # same name, new uid
    assert failure(lambda: trainer.list_namespaced_pod(NS)).status == 401
    assert as_token(token_for(admin)).list_namespaced_pod(NS).items == []


def test_a_pod_bound_token_lives_as_long_as_its_pod(admin: Core, as_token: Callable[[str], Core]) -> None:
    pod = admin.create_namespaced_pod(NS, {"metadata": {"name": "worker"}, "spec": {
        "serviceAccountName": "trainer", "containers": [{"name": "c", "image": "x"}]}})
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "worker", "uid": pod.metadata.uid}
    issued = admin.create_namespaced_service_account_token(
        "trainer", NS, {"spec": {"boundObjectRef": ref, "expirationSeconds": KUBELET_EXPIRATION}})
    assert issued.spec.bound_object_ref.uid == pod.metadata.uid
    # The kubelet's lifetime is extended to a year, as kube-apiserver does by default.
    assert issued.status.expiration_timestamp.timestamp() > time.time() + 300 * 24 * 3600
    bound = as_token(issued.status.token)
    assert bound.read_namespaced_pod("worker", NS).metadata.uid == pod.metadata.uid

    stale = failure(lambda: admin.create_namespaced_service_account_token(
        "trainer", NS, {"spec": {"boundObjectRef": {**ref, "uid": "0000"}}}))
    assert stale.status == 409 and "does not match the UID in record" in stale.body
    admin.create_namespaced_service_account(NS, {"metadata": {"name": "other"}})
    wrong = failure(lambda: admin.create_namespaced_service_account_token(
        "other", NS, {"spec": {"boundObjectRef": ref}}))
    assert wrong.status == 400 and "to pod running with different serviceaccount name" in wrong.body

    admin.delete_namespaced_pod("worker", NS, grace_period_seconds=0)
    assert failure(lambda: bound.list_namespaced_pod(NS)).body == UNAUTHORIZED


def test_token_request_validation_is_kube_apiservers(admin: Core) -> None:
    short = failure(lambda: token_for(admin, expirationSeconds=599))
    assert short.status == 422
    assert json.loads(short.body)["message"] == (
        'TokenRequest.authentication.k8s.io "trainer" is invalid: spec.expirationSeconds: '
        "Invalid value: 599: may not specify a duration less than 10 minutes")
    missing = failure(lambda: admin.create_namespaced_service_account_token("nobody", NS, {"spec": {}}))
    assert missing.status == 404 and 'serviceaccounts \\"nobody\\" not found' in missing.body


def test_impersonation_by_a_token_needs_the_impersonate_verb(admin: Core, api: ApiServerThread,
                                                            client: kubernetes.client.ApiClient) -> None:
    token = token_for(admin)

    def who(as_user: str) -> Any:
        cfg = kubernetes.client.Configuration()
        cfg.host, cfg.api_key, cfg.api_key_prefix = api.url, {"authorization": token}, {"authorization": "Bearer"}
        with kubernetes.client.ApiClient(cfg, header_name="Impersonate-User", header_value=as_user) as c:
            return kubernetes.client.AuthenticationV1Api(c).create_self_subject_review({}).status.user_info.username

    refused = failure(lambda: who("alice"))
    assert refused.status == 403 and json.loads(refused.body)["message"] == (
        'users "alice" is forbidden: User "system:serviceaccount:team:trainer" cannot impersonate resource "users" '
        'in API group "" at the cluster scope')
    rbac = kubernetes.client.RbacAuthorizationV1Api(client)
    rbac.create_cluster_role({"metadata": {"name": "impersonate-alice"}, "rules": [
        {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["alice"]}]})
    rbac.create_cluster_role_binding({
        "metadata": {"name": "trainer-impersonates-alice"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "impersonate-alice"},
        "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": NS}]})
    assert who("alice") == "alice"


def test_kubectl_presents_the_token_over_tls(admin: Core, api: ApiServerThread, tmp_path: Path) -> None:
    """kubectl sends credentials only over TLS: the server's HTTPS listener, its certificate from the plane's CA."""
    ca = new_ca()
    url = api.call(api.server.listen_tls(server_ssl_context(*serving_certificate(ca, ["127.0.0.1"]))))
    (tmp_path / "ca.crt").write_text(ca.cert_pem)
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url, "certificate-authority": str(tmp_path / "ca.crt")}}],
        "users": [{"name": "u", "user": {}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))

    plain = tmp_path / "admin-kubeconfig"  # no credentials over plain HTTP: the admin
    write_kubeconfig(plain, api.url)

    def kubectl(*args: str, kubeconfig: Path = config) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(KUBECTL), f"--kubeconfig={kubeconfig}", "--cache-dir", str(tmp_path / "cache"),
                               *args], capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path)})

    made = kubectl("create", "token", "trainer", "-n", NS, kubeconfig=plain)  # TokenRequest in protobuf
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert kubectl("auth", "can-i", "list", "pods", "-n", NS, f"--token={token}").stdout.strip() == "yes"
    assert kubectl("auth", "can-i", "list", "secrets", "-n", NS, f"--token={token}").stdout.strip() == "no"
    assert "system:serviceaccount:team:trainer" in kubectl("auth", "whoami", f"--token={token}").stdout
    denied = kubectl("get", "secrets", "-n", NS, f"--token={token}")
    assert denied.returncode == 1 and (
        'User "system:serviceaccount:team:trainer" cannot list resource "secrets" in API group "" in the namespace '
        '"team"') in denied.stderr
    bad = kubectl("get", "pods", "-n", NS, "--token=forged")
    assert bad.returncode == 1 and "Unauthorized" in bad.stderr
    assert "system:admin" in kubectl("auth", "whoami", kubeconfig=plain).stdout.split()  # as before


@pytest.mark.parametrize(("pod_value", "account_value", "mounted"), [
    (None, None, True), (False, None, False), (None, False, False), (True, False, True), (False, True, False)])
def test_automount_follows_the_pod_then_its_service_account(pod_value: bool | None, account_value: bool | None,
                                                           mounted: bool) -> None:
    pod: dict[str, Any] = {"spec": {} if pod_value is None else {"automountServiceAccountToken": pod_value}}
    account = {} if account_value is None else {"automountServiceAccountToken": account_value}
    assert automount(pod, account) is mounted


def test_a_legacy_token_secret_authenticates_while_the_secret_holds_it(
    admin: Core, api: ApiServerThread, as_token: Callable[[str], Core]
) -> None:
    """A `kubernetes.io/service-account-token` Secret's token (what kube-controller-manager's tokens controller
    writes; the plane has none, so the test writes it) is valid while the Secret holds it."""
    store = api.server.store
    account = store.get(("", "serviceaccounts"), NS, "trainer")
    assert account is not None
    secret = {"metadata": {"name": "trainer-token", "namespace": NS,
                           "annotations": {"kubernetes.io/service-account.name": "trainer"}},
              "type": "kubernetes.io/service-account-token"}
    token = api.server.tokens.legacy_token(secret, account)
    admin.create_namespaced_secret(NS, {**secret, "data": {"token": base64.b64encode(token.encode()).decode()}})
    assert as_token(token).list_namespaced_pod(NS).items == []
    admin.delete_namespaced_secret("trainer-token", NS)
    assert failure(lambda: as_token(token).list_namespaced_pod(NS)).body == UNAUTHORIZED


def test_the_kubelets_pod_credentials_are_a_token_bound_to_the_pod_unless_automount_is_off(
    admin: Core, api: ApiServerThread, as_token: Callable[[str], Core]
) -> None:
    """What the kubelet mounts (kubelocal.podtoken): a token for the pod's ServiceAccount, bound to the pod, the
    cluster CA and the namespace; nothing for a pod or ServiceAccount that turns automounting off."""
    admin.create_namespaced_config_map(NS, {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "PEM"}})
    admin.create_namespaced_service_account(NS, {"metadata": {"name": "quiet"}, "automountServiceAccountToken": False})

    def pod(name: str, account: str, **spec: Any) -> dict[str, Any]:
        made = admin.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": {
            "serviceAccountName": account, "containers": [{"name": "c", "image": "x"}], **spec}})
        return dict(admin.api_client.sanitize_for_serialization(made))

    async def credentials(obj: dict[str, Any]) -> PodCredentials | None:
        client = KubeClient(api.url, "test-kubelet")
        try:
            return await pod_credentials(client, obj)
        finally:
            await client.close()

    mounted = pod("mounted", "trainer")
    creds = api.call(credentials(mounted))
    assert creds is not None and (creds.ca_pem, creds.namespace, creds.service_account) == ("PEM", NS, "trainer")
    assert as_token(creds.token).list_namespaced_pod(NS).items  # the pod's own ServiceAccount's rights
    assert api.call(credentials(pod("opted-out", "trainer", automountServiceAccountToken=False))) is None
    assert api.call(credentials(pod("quiet-account", "quiet"))) is None
    assert api.call(credentials(pod("pod-overrides", "quiet", automountServiceAccountToken=True))) is not None
    admin.delete_namespaced_pod("mounted", NS, grace_period_seconds=0)
    assert failure(lambda: as_token(creds.token).list_namespaced_pod(NS)).status == 401  # bound to the pod
