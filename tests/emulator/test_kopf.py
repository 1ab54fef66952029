"""kopf itself against the emulator: a minimal operator converges, 50 times in a row."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import kopf
import kubernetes
import pytest
from emulator_helpers import WIDGET_CRD, controllers_beside, widget

from kubelocal.apiserver import ApiServerThread
from kubelocal.controllers import USER_AGENT as CONTROLLERS_AGENT

G, V = "emulator.test", "v1"


def run_scenario(api: ApiServerThread, index: int) -> None:
    """Start kopf (standalone), create a Widget, wait for status + adopted ConfigMap + Event, delete, stop."""
    cfg = kubernetes.client.Configuration()
    cfg.host = api.url
    client = kubernetes.client.ApiClient(cfg)
    core, custom = kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=api.url, insecure=True)

    @kopf.on.create(G, V, "widgets", registry=registry)
    def created(body: Any, spec: Any, name: str, namespace: str, patch: Any, **_: Any) -> None:
        child = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-cm"},
            "data": {"size": spec["size"]},
        }
        kopf.adopt(child, owner=body)
        core.create_namespaced_config_map(namespace, child)
        patch.status["phase"] = "Ready"
        kopf.info(body, reason="Provisioned", message=f"made {name}-cm")

    stop, ready = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def operator() -> None:
        settings = kopf.OperatorSettings()
        settings.watching.server_timeout = 30
        settings.posting.level = logging.INFO
        try:
            asyncio.run(
                kopf.operator(
                    registry=registry,
                    standalone=True,
                    namespaces=["default"],
                    stop_flag=stop,
                    ready_flag=ready,
                    settings=settings,
                )
            )
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    try:
        assert ready.wait(20), "kopf did not start"
        name = f"w{index}"
        custom.create_namespaced_custom_object(G, V, "default", "widgets", widget(name))
        deadline = time.monotonic() + 20
        while True:
            w = custom.get_namespaced_custom_object(G, V, "default", "widgets", name)
            events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
            cms = core.list_namespaced_config_map("default", field_selector=f"metadata.name={name}-cm").items
            if (
                (w.get("status") or {}).get("phase") == "Ready"
                and cms
                and any(e.reason == "Provisioned" for e in events)
            ):
                break
            assert time.monotonic() < deadline, f"scenario {index} did not converge: {w} {cms} {events}"
            time.sleep(0.02)
        assert cms[0].metadata.owner_references[0].uid == w["metadata"]["uid"]
        custom.delete_namespaced_custom_object(G, V, "default", "widgets", name)
        while core.list_namespaced_config_map("default", field_selector=f"metadata.name={name}-cm").items:
            assert time.monotonic() < deadline, "adopted ConfigMap was not garbage-collected"
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(20)
        client.close()
    assert not thread.is_alive(), "kopf did not stop"
    assert not errors, errors


@pytest.mark.timeout(600)
def test_kopf_operator_converges_fifty_times_in_a_row() -> None:
    with ApiServerThread() as api:
        cfg = kubernetes.client.Configuration()
        cfg.host = api.url
        with kubernetes.client.ApiClient(cfg) as c:
            kubernetes.client.ApiextensionsV1Api(c).create_custom_resource_definition(WIDGET_CRD)
        with controllers_beside(api):  # the garbage collector collects the adopted ConfigMaps
            for i in range(50):
                run_scenario(api, i)
        statuses = {r.status_code for r in api.server.requests if r.user_agent != CONTROLLERS_AGENT}
        assert statuses <= {200, 201}, f"unexpected statuses: {statuses}"
        patches = [r for r in api.server.requests if r.verb == "patch" and r.resource == "widgets"]
        assert {r.subresource for r in patches} == {None, "status"}  # finalizer on main, status via /status
