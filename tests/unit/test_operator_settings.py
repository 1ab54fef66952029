"""Operator settings: environment parsing and the documentation staying in step with the fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tfjob_operator.runner import kopf_arguments
from tfjob_operator.settings import Addressing, OperatorSettings

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
