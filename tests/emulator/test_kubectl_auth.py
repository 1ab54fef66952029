"""Authorization as kubectl users meet it: `kubectl auth can-i --as`, `kubectl auth whoami`, a 403 for what
the cluster's RBAC does not grant, and the APIService list, answered from the chart's own RBAC."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kubelocal.apiserver import ApiServerThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from deployhelpers import renderer

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
CHART_CRD = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tfjob-operator" / "crds" / "tfjob.yaml"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture
def operator_sa(kubectl: Kubectl, tmp_path: Path) -> str:
    """Apply the chart's CRDs and RBAC (rendered with helm-python-sdk); the operator's ServiceAccount identity."""
    objects = [o for o in renderer.render_chart({}) if o["kind"] in RBAC_KINDS]
    kubectl("create", "namespace", renderer.NAMESPACE)
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    kubectl("apply", "-f", str(CHART_CRD), "-f", str(manifest))
    (sa,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    return f"system:serviceaccount:{renderer.NAMESPACE}:{sa['metadata']['name']}"


def can_i(kubectl: Kubectl, who: str, *args: str) -> str:
    out = kubectl("auth", "can-i", f"--as={who}", *args, check=False)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout.strip()


def test_can_i_answers_from_the_charts_rbac_for_the_operators_service_account(
    kubectl: Kubectl, operator_sa: str
) -> None:
    ns = ["-n", renderer.NAMESPACE]
    assert can_i(kubectl, operator_sa, "create", "pods", *ns) == "yes"
    assert can_i(kubectl, operator_sa, "patch", "tfjobs.tfjob.dev", "--subresource=status", *ns) == "yes"
    assert can_i(kubectl, operator_sa, "update", "tfjobs.tfjob.dev", "--subresource=status", *ns) == "no"
    assert can_i(kubectl, operator_sa, "update", "leases/tfjob-operator", *ns) == "yes"
    assert can_i(kubectl, operator_sa, "update", "leases/someone-else", *ns) == "no"
    assert can_i(kubectl, operator_sa, "watch", "tfjobs.tfjob.dev", "--all-namespaces") == "yes"
    assert can_i(kubectl, operator_sa, "get", "secrets", *ns) == "no"
    assert can_i(kubectl, operator_sa, "delete", "namespaces") == "no"
    assert can_i(kubectl, "system:serviceaccount:default:nobody", "list", "pods") == "no"
    assert can_i(kubectl, operator_sa, "get", "secrets") == "no"


def test_the_admin_may_do_anything_as_before(kubectl: Kubectl) -> None:
    assert kubectl("auth", "can-i", "delete", "secrets", "--all-namespaces").stdout.strip() == "yes"


def test_a_request_the_rules_deny_gets_kube_apiservers_403(kubectl: Kubectl, operator_sa: str) -> None:
    out = kubectl("get", "secrets", "-n", renderer.NAMESPACE, f"--as={operator_sa}", check=False)
    assert out.returncode == 1
    assert (
        f'secrets is forbidden: User "{operator_sa}" cannot list resource "secrets" in API group "" '
        f'in the namespace "{renderer.NAMESPACE}"'
    ) in out.stderr
    allowed = kubectl("get", "pods", "-n", renderer.NAMESPACE, f"--as={operator_sa}")
    assert "No resources found" in allowed.stderr


def test_whoami_names_the_impersonated_service_account_and_its_groups(kubectl: Kubectl) -> None:
    out = kubectl("auth", "whoami", "--as=system:serviceaccount:team:trainer", "-o", "json").stdout
    info = yaml.safe_load(out)["status"]["userInfo"]
    assert info["username"] == "system:serviceaccount:team:trainer"
    assert {"system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"} <= set(info["groups"])
    assert "system:admin" in kubectl("auth", "whoami").stdout


def test_subject_access_review_through_the_official_client(
    client: kubernetes.client.ApiClient, operator_sa: str
) -> None:
    authz = kubernetes.client.AuthorizationV1Api(client)

    def allowed(verb: str, resource: str) -> Any:
        review = {
            "spec": {
                "user": operator_sa,
                "resourceAttributes": {"namespace": renderer.NAMESPACE, "verb": verb, "resource": resource},
            }
        }
        return authz.create_subject_access_review(review).status.allowed

    assert allowed("create", "pods") is True
    assert allowed("get", "secrets") is False


def test_apiservices_list_every_served_group_version_as_local(kubectl: Kubectl, api: ApiServerThread) -> None:
    names = kubectl("get", "apiservices", "-o", "name").stdout.split()
    assert {
        "apiservice.apiregistration.k8s.io/v1.",
        "apiservice.apiregistration.k8s.io/v1.apps",
        "apiservice.apiregistration.k8s.io/v1.apiregistration.k8s.io",
    } <= set(names)
    one = yaml.safe_load(kubectl("get", "apiservice", "v1.batch", "-o", "yaml").stdout)
    assert one["status"]["conditions"][0]["reason"] == "Local"
    assert "apiregistration.k8s.io" in kubectl("api-versions").stdout


def test_an_apiservice_a_client_adds_is_stored_beside_the_local_ones(kubectl: Kubectl, api: ApiServerThread) -> None:
    """The official client's create_from_yaml of an aggregated APIService (its e2e suite's wardle example):
    created, listed with the Local ones, a second create is kube-apiserver's 409 text; Local ones stay."""
    from kubernetes import client, utils

    wardle = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
              "metadata": {"name": "v1alpha1.wardle.k8s.io"},
              "spec": {"group": "wardle.k8s.io", "version": "v1alpha1", "insecureSkipTLSVerify": True,
                       "groupPriorityMinimum": 1000, "versionPriority": 15,
                       "service": {"name": "api", "namespace": "wardle"}}}
    cfg = client.Configuration()
    cfg.host = api.url
    with client.ApiClient(cfg) as c:
        utils.create_from_dict(c, wardle)
        registration = client.ApiregistrationV1Api(c)
        assert registration.read_api_service("v1alpha1.wardle.k8s.io").spec.group == "wardle.k8s.io"
        with pytest.raises(utils.FailToCreateError) as again:
            utils.create_from_dict(c, wardle)
        assert str(again.value) == (
            'Error from server (Conflict): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
            '"message":"apiservices.apiregistration.k8s.io \\"v1alpha1.wardle.k8s.io\\" already exists",'
            '"reason":"AlreadyExists","details":{"name":"v1alpha1.wardle.k8s.io","group":"apiregistration.k8s.io",'
            '"kind":"apiservices"},"code":409}\n')
        with pytest.raises(utils.FailToCreateError) as local:
            utils.create_from_dict(c, {**wardle, "metadata": {"name": "v1.apps"}})
        assert 'apiservices.apiregistration.k8s.io \\"v1.apps\\" already exists' in str(local.value)
        names = kubectl("get", "apiservices", "-o", "name").stdout.split()
        assert {"apiservice.apiregistration.k8s.io/v1.apps",
                "apiservice.apiregistration.k8s.io/v1alpha1.wardle.k8s.io"} <= set(names)
        registration.delete_api_service("v1alpha1.wardle.k8s.io")
        assert "apiservice.apiregistration.k8s.io/v1alpha1.wardle.k8s.io" not in kubectl(
            "get", "apiservices", "-o", "name").stdout.split()
        assert registration.read_api_service("v1.apps").status.conditions[0].reason == "Local"
