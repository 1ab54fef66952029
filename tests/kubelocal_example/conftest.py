"""How an operator author uses kubelocal: the plugin, plus the CRD files their operator serves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

pytest_plugins = ["kubelocal.pytest_plugin"]


@pytest.fixture
def kubelocal_crds() -> Sequence[Path]:
    return (Path(__file__).parent / "greeting_crd.yaml",)
