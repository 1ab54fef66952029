"""The API server's extension points: admission plugins see every write and may change or refuse it;
authorizers decide every request (403 with kube-apiserver's message when one denies)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException

from kubelocal.apiserver.admission import AdmissionRequest, Operation
from kubelocal.apiserver.authorization import Attributes, Decision
from kubelocal.apiserver.errors import invalid

pytestmark = pytest.mark.timeout(60)


class TeamLabel:
    """A mutating and validating plugin: ConfigMaps get a team label, and may not say team=nobody."""

    name = "TeamLabel"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bool]] = []

    def handles(self, request: AdmissionRequest) -> bool:
        return request.rt.kind == "ConfigMap"

    def admit(self, request: AdmissionRequest) -> None:
        self.seen.append((request.operation.value, request.name, request.dry_run))
        if request.obj is not None:
            request.obj["metadata"].setdefault("labels", {}).setdefault("team", "ml")

    def validate(self, request: AdmissionRequest) -> None:
        labels = ((request.obj or {}).get("metadata") or {}).get("labels") or {}
        if request.operation is not Operation.DELETE and labels.get("team") == "nobody":
            raise invalid("ConfigMap", "", request.name, [("metadata.labels.team", "FieldValueForbidden", "Forbidden")])


class DenySecrets:
    def authorize(self, attrs: Attributes) -> tuple[Decision, str]:
        if attrs.resource == "secrets":
            return Decision.DENY, "secrets are off limits"
        return Decision.NO_OPINION, ""


def test_a_mutating_plugin_changes_what_is_stored_and_a_validating_one_refuses(api, core):
    plugin = TeamLabel()
    api.server.admission.register(plugin)
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    assert created.metadata.labels == {"team": "ml"}
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_config_map("a", "default", {"metadata": {"labels": {"team": "nobody"}}})
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["details"]["causes"][0]["field"] == "metadata.labels.team"
    assert core.read_namespaced_config_map("a", "default").metadata.labels == {"team": "ml"}
    core.delete_namespaced_config_map("a", "default", dry_run="All")
    assert plugin.seen == [("CREATE", "a", False), ("UPDATE", "a", False), ("DELETE", "a", True)]


def test_an_authorizer_that_denies_gives_kube_apiservers_403(api, core):
    api.server.authorizers.insert(0, DenySecrets())
    with pytest.raises(ApiException) as denied:
        core.list_namespaced_secret("default")
    assert denied.value.status == 403
    assert json.loads(denied.value.body)["message"] == (
        'secrets is forbidden: User "system:admin" cannot list resource "secrets" in API group "" '
        'in the namespace "default": secrets are off limits'
    )
    assert core.list_namespaced_config_map("default").items == []
