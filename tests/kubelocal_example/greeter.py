"""A toy kopf operator: each Greeting gets a ConfigMap holding its message, owned by the Greeting."""

from __future__ import annotations

from typing import Any

import kopf
import kubernetes


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 30


@kopf.on.create("example.com", "v1", "greetings")
def greet(body: Any, spec: Any, name: str, namespace: str, patch: Any, **_: Any) -> None:
    kubernetes.config.load_kube_config()
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-greeting"},
                  "data": {"message": spec["message"]}}
    kopf.adopt(config_map, owner=body)
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, config_map)
    patch.status["greeted"] = True
