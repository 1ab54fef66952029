"""Helpers for the end-to-end tier: example manifests as a user copies them, applied through the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from operator_harness import Cluster

REPO = Path(__file__).resolve().parents[2]


def example(name: str, **changes: Any) -> dict[str, Any]:
    """An example manifest as a user would copy it, with `changes` applied to its spec."""
    manifest = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
    manifest["spec"].update(changes)
    return manifest


def apply(cluster: Cluster, manifest: dict[str, Any]) -> str:
    cluster.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", manifest)
    return str(manifest["metadata"]["name"])
