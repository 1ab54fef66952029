"""The taint manager among many pods, through the API: a pod tolerating a NoExecute taint for N seconds is evicted
when its time is due, though nothing else happens meanwhile, and a pod bound to a tainted node later is evicted
too; the pods on other nodes are left alone.

Only the API server and the node lifecycle controller run here (no scheduler, no kubelet): pods are created
already bound, so hundreds of them cost little, and nothing but the controller writes while the test waits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from controller_helpers import read, unique
from polling import wait_for

from kubelocal.apiserver import ApiServerThread
from kubelocal.controllers.node_lifecycle import NodeLifecycleController
from kubelocal.kubeclient import KubeClient
from kubelocal.nodes import make_node
from kubelocal.times import parse_time

NS = "default"
UNRELATED = 400  # pods on another node, which the taint manager has no reason to look at
Core = kubernetes.client.CoreV1Api
MAINTENANCE = {"key": "maintenance", "effect": "NoExecute"}

pytestmark = pytest.mark.timeout(120)


def _pod(name: str, node: str, *tolerations: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": list(tolerations),
                     "containers": [{"name": "c", "image": "none", "command": ["true"]}]}}


def _tolerating(seconds: int | None) -> dict[str, Any]:
    tol: dict[str, Any] = {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}
    if seconds is not None:
        tol["tolerationSeconds"] = seconds
    return tol


def _evicted(core: Core, name: str) -> dict[str, Any] | None:
    pod = read(core.read_namespaced_pod, name, NS)
    return pod if pod is not None and pod["metadata"].get("deletionTimestamp") else None


def _evicted_at(pod: dict[str, Any]) -> dt.datetime:
    stamps = [c["lastTransitionTime"] for c in pod["status"].get("conditions") or []
              if c["type"] == "DisruptionTarget" and c.get("reason") == "DeletionByTaintManager"]
    assert stamps, f"{pod['metadata']['name']} was deleted, but not by the taint manager"
    parsed = parse_time(stamps[0])
    assert parsed is not None
    return parsed


@pytest.fixture(scope="module")
def core() -> Iterator[Core]:
    with ApiServerThread() as api:
        # tolerationSeconds honoured (no cap), and no node goes stale: these nodes have no kubelet.
        controller = NodeLifecycleController(KubeClient(api.url, "test-node-lifecycle"), grace=3600.0,
                                             toleration_cap=None)
        config = kubernetes.client.Configuration()
        config.host = api.url
        with kubernetes.client.ApiClient(config) as client:
            core = Core(client)
            for node in ("busy", "drained"):
                core.create_node(make_node(node))
            for i in range(UNRELATED):
                core.create_namespaced_pod(NS, _pod(f"unrelated-{i}", "busy"))
            api.call(controller.start())
            try:
                yield core
            finally:
                api.call(controller.stop())
                api.call(controller.client.close())


def _taint(core: Core, node: str) -> dt.datetime:
    """Add the NoExecute taint without timeAdded (as `kubectl taint` does); a moment before it was added."""
    before = dt.datetime.now(dt.UTC)
    core.patch_node(node, {"spec": {"taints": [MAINTENANCE]}})
    return before


def test_a_pod_tolerating_a_taint_for_n_seconds_is_evicted_when_they_are_over(core: Core) -> None:
    brief, forever = unique("brief"), unique("forever")
    core.create_namespaced_pod(NS, _pod(brief, "drained", _tolerating(2)))
    core.create_namespaced_pod(NS, _pod(forever, "drained", _tolerating(None)))
    tainted = _taint(core, "drained")

    evicted = wait_for(lambda: _evicted(core, brief), what=f"{brief} to be evicted after its 2 s")
    # Whole seconds, as the API writes times: the eviction's second is at least 2 after the taint's.
    assert _evicted_at(evicted) >= tainted.replace(microsecond=0) + dt.timedelta(seconds=2), \
        "evicted before its tolerationSeconds were over"
    assert _evicted(core, forever) is None, "a pod tolerating the taint without a limit stays"
    assert not [p for p in core.list_namespaced_pod(NS, field_selector="spec.nodeName=busy").items
                if p.metadata.deletion_timestamp], "pods on an untainted node are left alone"


def test_a_pod_bound_to_a_tainted_node_later_is_evicted_at_once(core: Core) -> None:
    _taint(core, "drained")
    late = unique("late")
    core.create_namespaced_pod(NS, _pod(late, "drained"))
    wait_for(lambda: _evicted(core, late), what=f"{late}, which does not tolerate the taint, to be evicted")
