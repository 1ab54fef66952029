"""Operator settings: environment parsing and the documentation staying in step with the fields."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from tfjob_operator.client import cli
from tfjob_operator.controller.settings import Addressing, OperatorSettings
from tfjob_operator.serving import runner, webhook
from tfjob_operator.serving.runner import kopf_arguments

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def test_namespaces_are_read_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFJOB_NAMESPACES", "team-a, team-b")
    monkeypatch.setenv("TFJOB_ADDRESSING", "loopback")
    settings = OperatorSettings()
    assert (settings.namespaces, settings.clusterwide, settings.addressing) == (
        ["team-a", "team-b"], False, Addressing.LOOPBACK)
    assert kopf_arguments(settings)["namespaces"] == ["team-a", "team-b"]


@pytest.mark.parametrize("value", ["", "*"])
def test_empty_or_star_watches_every_namespace(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TFJOB_NAMESPACES", value)
    assert OperatorSettings().clusterwide and kopf_arguments(OperatorSettings())["clusterwide"]


def test_bad_values_are_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFJOB_LOG_LEVEL", "LOUD")
    with pytest.raises(ValidationError, match="TFJOB_LOG_LEVEL"):
        OperatorSettings()


def test_liveness_endpoint_follows_its_port() -> None:
    assert kopf_arguments(OperatorSettings(liveness_port=0))["liveness_endpoint"] is None
    assert kopf_arguments(OperatorSettings(liveness_port=8181))["liveness_endpoint"] == "http://0.0.0.0:8181/healthz"


def test_every_setting_is_documented() -> None:
    text = DOCS.read_text()
    names = [f"TFJOB_{name.upper()}" for name in OperatorSettings.model_fields]
    missing = [name for name in names if f"`{name}`" not in text]
    assert missing == []


def test_renew_deadline_defaults_to_two_thirds_of_the_lease_and_must_be_shorter() -> None:
    assert OperatorSettings(leader_election_lease_duration=15).renew_deadline == 10
    with pytest.raises(ValidationError, match="TFJOB_LEADER_ELECTION_RENEW_DEADLINE"):
        OperatorSettings(leader_election_lease_duration=15, leader_election_renew_deadline=15)
    with pytest.raises(ValidationError, match="TFJOB_LEADER_ELECTION_RETRY_PERIOD"):
        OperatorSettings(leader_election_lease_duration=3, leader_election_retry_period=2)


def test_empty_values_from_the_chart_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POD_NAME", "WEBHOOK_CERT_DIR", "WEBHOOK_CONFIG_NAME", "WEBHOOK_SERVICE_NAME"):
        monkeypatch.setenv(f"TFJOB_{name}", "")
    settings = OperatorSettings()
    assert (settings.pod_name, settings.webhook_cert_dir, settings.webhook_config_name,
            settings.webhook_service_name) == (None, None, None, None)


def test_unknown_webhook_failure_policy_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFJOB_WEBHOOK_FAILURE_POLICY", "Sometimes")
    with pytest.raises(ValidationError, match="webhook_failure_policy"):
        OperatorSettings()


def test_kopf_never_scans_crds_and_serves_admission_only_when_enabled(tmp_path: Path) -> None:
    plain = runner.kopf_settings(OperatorSettings())
    assert plain.scanning.disabled and plain.admission.server is None
    self_signed = runner.kopf_settings(OperatorSettings(
        webhook_enabled=True, webhook_port=9555, webhook_service_name="svc", pod_namespace="ops",
        webhook_config_name="op.tfjob.dev"))
    assert self_signed.admission.managed == "op.tfjob.dev"
    assert self_signed.admission.server.port == 9555  # type: ignore[union-attr]
    assert self_signed.admission.server.service["namespace"] == "ops"  # type: ignore[union-attr]
    cert, key = webhook.self_signed_certificate(["localhost"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    mounted = runner.kopf_settings(OperatorSettings(webhook_enabled=True, webhook_cert_dir=tmp_path,
                                                    webhook_config_name="op.tfjob.dev"))
    assert mounted.admission.managed is None  # cert-manager mode: the chart owns the configurations


@pytest.mark.parametrize(
    ("overrides", "identity", "namespace", "labelled_pod"),
    [
        ({"pod_name": "op-0", "pod_namespace": "ops", "webhook_enabled": True}, "op-0", "ops", "op-0"),
        ({"pod_name": "op-0", "pod_namespace": "ops"}, "op-0", "ops", None),  # no webhook Service to route
    ],
)
def test_election_identity_is_the_pod_and_the_lease_lives_in_its_namespace(
        overrides: dict[str, object], identity: str, namespace: str, labelled_pod: str | None) -> None:
    config = runner.election_config(OperatorSettings(leader_election_lease_name="lease", **overrides))  # type: ignore
    assert (config.identity, config.namespace, config.lease_name, config.pod_name) == (
        identity, namespace, "lease", labelled_pod)
    assert config.renew_deadline == 10 and config.retry_period == 2


def test_election_identity_without_a_pod_name_is_unique_per_process() -> None:
    assert runner.election_config(OperatorSettings(pod_namespace="ops")).identity.endswith(f"-{os.getpid()}")


def test_asking_for_kopf_peering_is_refused_pointing_to_leader_election(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFJOB_STANDALONE", "false")
    with pytest.raises(ValidationError, match=r"TFJOB_STANDALONE=false: kopf peering was removed.*"
                                              r"TFJOB_LEADER_ELECTION=true"):
        OperatorSettings()


@pytest.mark.parametrize(("name", "value"), [("TFJOB_STANDALONE", "true"), ("TFJOB_PEERING_NAME", "tfjob-operator"),
                                             ("TFJOB_PRIORITY", "10")])
def test_settings_that_only_tuned_kopf_peering_are_ignored_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="tfjob_operator.controller.settings"):
        assert OperatorSettings().leader_election is not None
    assert f"{name}: kopf peering was removed" in caplog.text


def test_tfjob_operator_names_a_bad_setting_without_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TFJOB_STANDALONE", "false")
    assert cli.main(["operator"]) == 2
    err = capsys.readouterr().err
    assert "TFJOB_STANDALONE=false: kopf peering was removed" in err and "Traceback" not in err


def test_kopf_never_peers() -> None:
    assert kopf_arguments(OperatorSettings())["standalone"] is True
    assert "peering_name" not in kopf_arguments(OperatorSettings(leader_election=True))
