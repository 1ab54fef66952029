"""Helpers for the controller tests: names, objects as plain JSON, existence checks, kubectl."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes

KUBECTL = Path(sys.executable).parent / "kubectl"
#: Long enough that a client sees dependents outlive their owner's DELETE, short enough for tests.
GC_DELAY = 1.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def read(call: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """The object as plain JSON (camelCase), or None when the server answers 404."""
    try:
        resp = call(*args, _preload_content=False)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return json.loads(resp.data)  # type: ignore[no-any-return]


def config_map(name: str, *, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def owner_ref(obj: Any, *, block: bool = False) -> dict[str, Any]:
    """An ownerReference to a ConfigMap read back from the official client."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj.metadata.name, "uid": obj.metadata.uid,
            **({"blockOwnerDeletion": True} if block else {})}


def sleeper(seconds: int = 600) -> dict[str, Any]:
    """A pod template whose one container sleeps (a long-running service stand-in)."""
    return {"metadata": {"labels": {}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "python:3.11",
                                     "command": ["python", "-c", f"import time; time.sleep({seconds})"]}]}}


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(KUBECTL), f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc
