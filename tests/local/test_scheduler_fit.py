"""The scheduler stand-in's decisions, as pure functions: which node, or kube-scheduler's reason why none."""

from typing import Any

import pytest

from kubelocal.nodes import make_node
from kubelocal.scheduler import (
    NO_NODES_MESSAGE,
    Bind,
    Unschedulable,
    schedule_pending,
    wants_scheduling,
)


def pod(name: str = "p", *, cpu: str | None = None, gpu: int | None = None, memory: str | None = None,
        node: str | None = None, phase: str | None = None, created: str = "2026-01-01T00:00:00Z",
        **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu}.items() if v is not None}
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}], **spec},
        "status": {"phase": phase or "Pending"},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def decide(pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> dict[str, Bind | Unschedulable]:
    return {p["metadata"]["name"]: d for p, d in schedule_pending(pods, nodes)}


GPU2 = [make_node("a", cpu=8, gpu=2), make_node("b", cpu=8, gpu=2)]


@pytest.mark.parametrize(
    ("pod_fields", "expected"),
    [
        ({}, True),
        ({"node": "a"}, False),
        ({"schedulingGates": [{"name": "tfjob.dev/gang"}]}, False),
        ({"schedulerName": "volcano"}, False),
        ({"schedulerName": "default-scheduler"}, True),
        ({"phase": "Failed"}, False),
    ],
)
def test_which_pods_the_scheduler_considers(pod_fields: dict[str, Any], expected: bool) -> None:
    assert wants_scheduling(pod(**pod_fields)) is expected


def test_deleting_pods_are_not_scheduled() -> None:
    p = pod()
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not wants_scheduling(p)


def test_gated_pods_get_no_decision_at_all() -> None:
    gated = pod("g", gpu=8, schedulingGates=[{"name": "tfjob.dev/gang"}])
    assert decide([gated], GPU2) == {}


@pytest.mark.parametrize(
    ("pods", "nodes", "expected"),
    [
        # least allocated wins, then the node name breaks ties
        ([pod("p", cpu="1")], GPU2, {"p": Bind("a")}),
        ([pod("x", cpu="4", node="a"), pod("p", cpu="1")], GPU2, {"p": Bind("b")}),
        # terminal pods free their node
        ([pod("x", cpu="8", node="a", phase="Succeeded"), pod("p", cpu="1")], GPU2, {"p": Bind("a")}),
        # each binding in a pass counts against its node
        ([pod("p1", gpu=2, created="1"), pod("p2", gpu=2, created="2"), pod("p3", gpu=1, created="3")], GPU2,
         {"p1": Bind("a"), "p2": Bind("b"),
          "p3": Unschedulable("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")}),
        ([pod("p", gpu=3)], GPU2, {"p": Unschedulable("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")}),
        ([pod("p", cpu="9", gpu=3)], GPU2, {"p": Unschedulable(
            "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu.")}),
        ([pod("p", memory="65Gi")], [make_node("a")], {"p": Unschedulable(
            "0/1 nodes are available: 1 Insufficient memory.")}),
        ([pod("p", gpu=1)], [make_node("a")], {"p": Unschedulable(
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")}),
        ([pod("p", cpu="1")], [], {"p": Unschedulable(NO_NODES_MESSAGE)}),
        ([pod("x", node="a"), pod("p")], [make_node("a", pods=1)], {"p": Unschedulable(
            "0/1 nodes are available: 1 Too many pods.")}),
    ],
)
def test_resource_fit_and_placement(pods: list[dict[str, Any]], nodes: list[dict[str, Any]],
                                    expected: dict[str, Bind | Unschedulable]) -> None:
    assert decide(pods, nodes) == expected


TAINTED = make_node("t", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
ZONED = make_node("z", labels={"zone": "a"})
PLAIN = make_node("p")


@pytest.mark.parametrize(
    ("spec", "nodes", "expected"),
    [
        ({}, [TAINTED], Unschedulable("0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}.")),
        ({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]},
         [TAINTED], Bind("t")),
        ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, [TAINTED], Bind("t")),
        ({"tolerations": [{"operator": "Exists"}]}, [TAINTED], Bind("t")),
        ({"tolerations": [{"key": "gpu", "value": "false"}]}, [TAINTED], Unschedulable(
            "0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}.")),
        ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]}, [TAINTED], Unschedulable(
            "0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}.")),
        ({"nodeSelector": {"zone": "a"}}, [PLAIN, ZONED], Bind("z")),
        ({"nodeSelector": {"zone": "b"}}, [PLAIN, ZONED], Unschedulable(
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.")),
        ({"nodeSelector": {"kubernetes.io/hostname": "p"}}, [PLAIN, ZONED], Bind("p")),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "c"]}]}]}}}},
         [PLAIN, ZONED], Bind("z")),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}]}}}},
         [ZONED, PLAIN], Bind("p")),
        # taints are checked before selectors, as kube-scheduler's filter order does
        ({"nodeSelector": {"zone": "a"}}, [TAINTED, PLAIN], Unschedulable(
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
            "1 node(s) had untolerated taint {gpu: true}.")),
    ],
)
def test_taints_selectors_and_affinity(spec: dict[str, Any], nodes: list[dict[str, Any]],
                                       expected: Bind | Unschedulable) -> None:
    assert decide([pod("x", **spec)], nodes) == {"x": expected}


def _with_ready(node: dict[str, Any], status: str) -> dict[str, Any]:
    node["status"]["conditions"] = [{"type": "Ready", "status": status}]
    return node


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (_with_ready(make_node("n"), "False"), "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
        (_with_ready(make_node("n"), "Unknown"), "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
        ({**make_node("n"), "spec": {"unschedulable": True}}, "1 node(s) were unschedulable"),
    ],
)
def test_nodes_that_are_not_ready_or_cordoned_take_no_pods(node: dict[str, Any], message: str) -> None:
    assert decide([pod("x")], [node]) == {"x": Unschedulable(f"0/1 nodes are available: {message}.")}


def test_priority_then_age_decides_who_gets_the_last_gpu() -> None:
    old = pod("old", gpu=2, created="2026-01-01T00:00:00Z")
    new_high = pod("new", gpu=2, created="2026-01-02T00:00:00Z", priority=100)
    result = decide([old, new_high], [make_node("a", gpu=2)])
    assert result["new"] == Bind("a")
    assert isinstance(result["old"], Unschedulable)


def test_gpu_nodes_are_scored_by_free_gpus_too() -> None:
    nodes = [make_node("a", cpu=8, gpu=4), make_node("b", cpu=8, gpu=4)]
    busy_gpus = pod("x", gpu=3, node="a")
    assert decide([busy_gpus, pod("p", gpu=1)], nodes)["p"] == Bind("b")


def test_pods_without_requests_spread_across_nodes_as_with_kube_scheduler() -> None:
    nodes = [make_node("a", cpu=4, memory="8Gi"), make_node("b", cpu=4, memory="8Gi")]
    pods = [pod(f"p{i}", created=str(i)) for i in range(4)]
    assert [d for _, d in schedule_pending(pods, nodes)] == [Bind("a"), Bind("b"), Bind("a"), Bind("b")]
