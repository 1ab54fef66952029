"""Shared helpers for the deploy tests: the chart renderer from deploy/render_manifests.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load_renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_manifests", ROOT / "deploy" / "render_manifests.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["render_manifests"] = module
    spec.loader.exec_module(module)
    return module


renderer = _load_renderer()


def chart_env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator container's env as rendered: plain values as strings, downward-API entries as their source."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
