"""Fixtures: an emulator per test (fast to start), the official client against it, kubectl, raw HTTP."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import requests
from emulator_helpers import KUBECTL, WIDGET_CRD

from kubelocal.apiserver import ApiServerThread, write_kubeconfig


@pytest.fixture
def api() -> Iterator[ApiServerThread]:
    with ApiServerThread(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def client(api: ApiServerThread) -> Iterator[kubernetes.client.ApiClient]:
    cfg = kubernetes.client.Configuration()
    cfg.host = api.url
    with kubernetes.client.ApiClient(cfg) as c:
        yield c


@pytest.fixture
def core(client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(client)


@pytest.fixture
def custom(client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(client)


@pytest.fixture
def widgets(client: kubernetes.client.ApiClient) -> dict[str, Any]:
    """Install the test CRD (Widget, status subresource, printer columns) through the API."""
    return kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(WIDGET_CRD)


@pytest.fixture
def http(api: ApiServerThread) -> Callable[..., requests.Response]:
    """Raw HTTP, for what the typed client refuses to send (malformed bodies, odd content types)."""
    session = requests.Session()

    def call(method: str, path: str, body: Any = None, ctype: str = "application/json", **kw: Any) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) or body is None else __import__("json").dumps(body)
        return session.request(
            method,
            api.url + path,
            data=data,
            headers={"Content-Type": ctype, **kw.pop("headers", {})},
            timeout=30,
            **kw,
        )

    return call


@pytest.fixture
def kubectl(api: ApiServerThread, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, api.url)
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

    def run(
        *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(KUBECTL), "--cache-dir", str(tmp_path / "cache"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    return run
