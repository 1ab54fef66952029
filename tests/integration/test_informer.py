"""The admission loop's list-then-watch (tfjob_operator.controller.informer) against the local control plane: it
replays what exists, follows changes in order, and after the server expires its watch (410, as etcd compaction does)
lists again and reports what went meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from operator_harness import Cluster, needs_kubelocal

from tfjob_operator.controller.informer import Informer
from tfjob_operator.kube import Kube, load_api_client

pytestmark = [needs_kubelocal(), pytest.mark.timeout(60)]


def gated_pod(name: str) -> dict[str, Any]:
    """A pod nothing will run (its gate is nobody's): it only exists."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulingGates": [{"name": "test/hold"}],
                     "containers": [{"name": "c", "image": "none", "command": ["true"]}]}}


async def until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
    assert predicate(), what


async def test_informer_replays_the_list_follows_the_watch_and_relists_after_a_410(cluster: Cluster) -> None:
    cluster.core.create_namespaced_pod("default", gated_pod("inf-a"))
    seen: list[tuple[str, str]] = []
    informer = Informer(Kube(load_api_client(str(cluster.kubeconfig))), "/api/v1/namespaces/default/pods",
                        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])), name="pods")
    await informer.start()
    try:
        assert ("ADDED", "inf-a") in seen  # the list, delivered before start returns
        await asyncio.to_thread(cluster.core.create_namespaced_pod, "default", gated_pod("inf-b"))
        await until(lambda: ("ADDED", "inf-b") in seen, "inf-b from the watch")
        assert informer.relists == 0
        assert cluster.apiserver.faults.expire_watches() >= 1
        await asyncio.to_thread(cluster.core.delete_namespaced_pod, "inf-a", "default", grace_period_seconds=0)
        await until(lambda: ("DELETED", "inf-a") in seen and informer.relists >= 1, "a relist that reports inf-a gone")
        await asyncio.to_thread(cluster.core.create_namespaced_pod, "default", gated_pod("inf-c"))
        await until(lambda: ("ADDED", "inf-c") in seen, "the watch resumed after the relist")
        assert seen.count(("DELETED", "inf-a")) == 1
    finally:
        informer.stop()


async def test_informer_lists_in_pages_and_delivers_each_object_once_without_managed_fields(cluster: Cluster) -> None:
    names = [f"page-{i}" for i in range(5)]
    for name in names:
        cluster.core.create_namespaced_pod("default", gated_pod(name))
    seen: list[tuple[str, str]] = []
    fields: list[bool] = []

    def on_event(kind: str, obj: Any) -> None:
        seen.append((kind, obj["metadata"]["name"]))
        fields.append("managedFields" in obj["metadata"])

    first = len(cluster.apiserver.requests)
    informer = Informer(Kube(load_api_client(str(cluster.kubeconfig))), "/api/v1/namespaces/default/pods", on_event,
                        name="pods", page_size=2)
    await informer.start()
    try:
        pods_path = "/api/v1/namespaces/default/pods"
        lists = [r.path for r in list(cluster.apiserver.requests)[first:]
                 if r.method == "GET" and "watch=" not in r.path and r.path.startswith(pods_path)]
        assert len(lists) >= 3 and all("limit=2" in p for p in lists)  # 5 pods (and any an earlier test left)
        assert ["continue=" in p for p in lists] == [False] + [True] * (len(lists) - 1)
        assert sorted(n for k, n in seen if k == "ADDED" and n.startswith("page-")) == names
        await asyncio.to_thread(cluster.core.create_namespaced_pod, "default", gated_pod("page-5"))
        await until(lambda: ("ADDED", "page-5") in seen, "page-5 from the watch")
        assert cluster.apiserver.faults.expire_watches() >= 1
        await asyncio.to_thread(cluster.core.delete_namespaced_pod, "page-0", "default", grace_period_seconds=0)
        await until(lambda: ("DELETED", "page-0") in seen and informer.relists >= 1, "a paged relist, page-0 gone")
        assert seen.count(("DELETED", "page-0")) == 1
        # The relist (paged) reports only what changed: the pods that did not change are not delivered again.
        assert not {n for k, n in seen if k == "MODIFIED"} & set(names[1:])
        assert not any(fields)
    finally:
        informer.stop()
