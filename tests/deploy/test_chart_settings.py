"""The chart and the operator's settings agree: every TFJOB_* variable the chart sets is a setting, and parses."""

from __future__ import annotations

from typing import Any

import pytest
from deployhelpers import chart_env, renderer

from tfjob_operator.controller.settings import OperatorSettings

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"webhook": {"certManager": {"enabled": True}, "failurePolicy": "Ignore"}},
    "namespaced-volcano": {"watchNamespaces": ["team-a", "team-b"], "gang": {"backend": "volcano"}},
    "no-webhook-no-election": {"webhook": {"enabled": False}, "leaderElection": {"enabled": False}},
}
DOWNWARD_API = {"TFJOB_POD_NAME": "tfjob-operator-7d9f-abcde", "TFJOB_POD_NAMESPACE": renderer.NAMESPACE}


def settings_from_chart(values: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> OperatorSettings:
    """OperatorSettings as the operator container reads them from the rendered env."""
    env = chart_env(renderer.render_chart(values))
    for name, value in env.items():
        monkeypatch.setenv(name, value if isinstance(value, str) else DOWNWARD_API[name])
    return OperatorSettings()


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_variable_the_chart_sets_is_an_operator_setting(case: str) -> None:
    # Settings ignore unknown TFJOB_* variables, so a misspelt one in the chart would silently do nothing.
    env = chart_env(renderer.render_chart(CASES[case]))
    known = {f"TFJOB_{name.upper()}" for name in OperatorSettings.model_fields}
    assert sorted(n for n in env if n.startswith("TFJOB_") and n not in known) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_chart_environment_parses_into_settings(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    values = CASES[case]
    settings = settings_from_chart(values, monkeypatch)
    webhook_on = values.get("webhook", {}).get("enabled", True)
    assert settings.webhook_enabled == webhook_on
    assert settings.leader_election == values.get("leaderElection", {}).get("enabled", True)
    if webhook_on:
        cert_manager = values.get("webhook", {}).get("certManager", {}).get("enabled", False)
        assert (settings.webhook_cert_dir is not None) == cert_manager
        assert (settings.webhook_config_name is not None) == (not cert_manager)
        assert settings.webhook_service_name and settings.pod_namespace == renderer.NAMESPACE


def test_chart_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from_chart = settings_from_chart({}, monkeypatch)
    defaults = OperatorSettings.model_fields
    for name in ("metrics_port", "liveness_port", "gang_backend", "webhook_port", "webhook_failure_policy",
                 "leader_election_lease_duration", "leader_election_retry_period", "log_level"):
        assert getattr(from_chart, name) == defaults[name].default, name


@pytest.mark.parametrize(("values", "expected"), [
    ({}, None),
    ({"priorityClass": {"create": True, "name": "gangs"}}, "gangs"),
])
def test_chart_priority_class_reaches_the_builtin_backend(values: dict[str, Any], expected: str | None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_from_chart(values, monkeypatch).gang_priority_class == expected
