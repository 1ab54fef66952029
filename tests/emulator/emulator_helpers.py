"""Shared builders for the emulator tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from kubelocal.apiserver import ApiServerThread
from kubelocal.controllers import ControllerManager
from kubelocal.pki import new_ca

HERE = Path(__file__).parent
WIDGET_CRD = yaml.safe_load((HERE / "widget_crd.yaml").read_text())
KUBECTL = Path(sys.executable).parent / "kubectl"


@contextmanager
def controllers_beside(api: ApiServerThread) -> Iterator[ControllerManager]:
    """kube-controller-manager's part (garbage collector, namespaces, ...) beside a bare API server."""
    manager = ControllerManager(api.url, new_ca().cert_pem)
    api.call(manager.start())
    try:
        yield manager
    finally:
        api.call(manager.stop())


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
