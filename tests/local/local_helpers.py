"""Helpers for the local control plane tests: bounded polling, pods, the official client."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes

T = TypeVar("T")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def python_pod(name: str, code: str, *, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    """A pod whose one container runs `python -c code`."""
    container = {"name": "main", "image": "python:3.11", "command": ["python", "-c", code]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "local-test"}},
        "spec": {"restartPolicy": restart, "containers": [container], **spec},
    }


def core_api(url: str) -> kubernetes.client.CoreV1Api:
    config = kubernetes.client.Configuration()
    config.host = url
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))


def pod_dict(core: kubernetes.client.CoreV1Api, name: str, namespace: str = "default") -> dict[str, Any] | None:
    """The pod as plain JSON (camelCase keys), or None when it does not exist."""
    try:
        resp = core.read_namespaced_pod(name, namespace, _preload_content=False)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return json.loads(resp.data)


def phase_is(core: kubernetes.client.CoreV1Api, name: str, *phases: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        pod = pod_dict(core, name)
        return pod if pod and (pod.get("status") or {}).get("phase") in phases else None

    return probe


def condition(pod: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == ctype), {})
