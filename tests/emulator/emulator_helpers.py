"""Shared builders for the emulator tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
WIDGET_CRD = yaml.safe_load((HERE / "widget_crd.yaml").read_text())
KUBECTL = Path(sys.executable).parent / "kubectl"


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "emulator.test/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": "small", **spec},
    }


def pod(name: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    for key, value in extra.items():
        body["spec"][key] = value
    return body
