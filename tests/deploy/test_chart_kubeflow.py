"""The chart's Kubeflow switches: kubeflow.api sets TFJOB_KUBEFLOW_API and adds kubeflow.org RBAC and webhooks
only when on; kubeflow.installCRD installs Kubeflow's published CRD, kept on uninstall."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
import yaml
from deployhelpers import chart_env, renderer

from tfjob_operator.api.crd import KUBEFLOW_CRD_PATH


def rendered(**kubeflow: Any) -> list[dict[str, Any]]:
    return renderer.render_chart({"kubeflow": kubeflow, "webhook": {"certManager": {"enabled": True}}})


def kubeflow_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for o in objects if o["kind"] in ("ClusterRole", "Role") for rule in o.get("rules") or []
            if "kubeflow.org" in rule.get("apiGroups", [])]


def webhook_groups(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {hook["name"].split(".")[0]: [g for rule in hook["rules"] for g in rule["apiGroups"]]
            for o in objects if o["kind"].endswith("WebhookConfiguration") for hook in o["webhooks"]}


def test_by_default_the_chart_knows_nothing_of_kubeflow_org() -> None:
    objects = rendered()
    assert chart_env(objects)["TFJOB_KUBEFLOW_API"] == "off"
    assert kubeflow_rules(objects) == []
    assert webhook_groups(objects) == {"validate-tfjob": ["tfjob.dev"], "mutate-tfjob": ["tfjob.dev"]}
    assert not [o for o in objects if o["kind"] == "CustomResourceDefinition"]


@pytest.mark.parametrize("api", ["managed", "all"])
def test_serving_kubeflow_adds_its_rbac_and_webhooks(api: str) -> None:
    objects = rendered(api=api)
    assert chart_env(objects)["TFJOB_KUBEFLOW_API"] == api
    assert {r for rule in kubeflow_rules(objects) for r in rule["resources"]} == {
        "tfjobs", "tfjobs/status", "tfjobs/finalizers"}
    assert webhook_groups(objects)["validate-tfjob-kubeflow"] == ["kubeflow.org"]
    assert webhook_groups(objects)["mutate-tfjob-kubeflow"] == ["kubeflow.org"]


def test_install_crd_renders_kubeflows_published_crd_kept_on_uninstall() -> None:
    (crd,) = [o for o in rendered(api="all", installCRD=True) if o["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["annotations"].pop("helm.sh/resource-policy") == "keep"
    assert crd == yaml.safe_load(KUBEFLOW_CRD_PATH.read_text())


def test_an_unknown_kubeflow_api_value_is_refused_by_the_values_schema() -> None:
    with pytest.raises(helm.HelmValuesError, match="/kubeflow/api': value must be one of 'off', 'managed', 'all'"):
        rendered(api="sometimes")
