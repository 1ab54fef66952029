"""How an operator author uses kubelocal: installed, it is a pytest plugin; name the CRDs their operator serves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest


@pytest.fixture
def kubelocal_crds() -> Sequence[Path]:
    return (Path(__file__).parent / "greeting_crd.yaml",)
