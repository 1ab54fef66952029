"""The free capacity admission keeps between passes equals a rebuild from the same nodes and pods."""

from __future__ import annotations

from typing import Any

import numpy as np
from gangfixtures import node, plan_pass, pod
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from tfjob_operator.gang import resources
from tfjob_operator.gang.cluster import Cluster, ClusterState

NODES = ["n0", "n1"]
PODS = ["p0", "p1", "p2"]

node_events = st.tuples(
    st.just("node"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.sampled_from(NODES),
    st.integers(0, 8), st.sampled_from(["16", "32", "7500m"]),
)
pod_events = st.tuples(
    st.just("pod"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.sampled_from(PODS),
    st.sampled_from([*NODES, *NODES, None, "gone-node"]),
    st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    st.integers(0, 4), st.sampled_from(["250m", "1", "3500m"]),
)


reservations = st.tuples(
    st.just("reserve"), st.sampled_from(PODS), st.sampled_from([*NODES, None, "gone-node"]), st.integers(0, 4),
)


@seed(16)
@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.lists(st.one_of(node_events, pod_events, reservations, st.just(("pass",))), max_size=40))
def test_incremental_free_capacity_equals_a_rebuild_after_any_pod_and_node_events(
    events: list[tuple[Any, ...]],
) -> None:
    state = ClusterState()
    nodes: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    reserved: dict[str, tuple[str, resources.Resources]] = {}
    for event in events:
        if event[0] == "pass":
            state.cluster()  # a pass in between: later events move the kept matrix instead of a fresh one
        elif event[0] == "reserve":  # the loop's own release, before the watch shows it (None: shown, dropped)
            _, name, node_name, gpu = event
            if node_name is None:
                reserved.pop(name, None)
                state.unreserve(f"r/{name}")
            else:
                amounts = resources.pod_requests(pod(name, gpu=gpu))
                reserved[name] = (node_name, amounts)
                state.reserve(f"r/{name}", node_name, amounts)
        elif event[0] == "node":
            _, kind, name, gpu, cpu = event
            obj = node(name, gpu=gpu, cpu=cpu)
            if kind == "DELETED":
                nodes.pop(name, None)
            else:
                nodes[name] = obj
            state.node_event(kind, obj)
        else:
            _, kind, name, node_name, phase, gpu, cpu = event
            obj = pod(name, gpu=gpu, cpu=cpu, node_name=node_name, phase=phase)
            if kind == "DELETED":
                pods.pop(name, None)
            elif name in pods and pods[name]["spec"].get("nodeName") and pods[name]["spec"]["nodeName"] != node_name:
                continue  # the API server never moves a bound pod to another node
            else:
                pods[name] = obj
            state.pod_event(kind, obj)
    kept = state.cluster()
    on_nodes: dict[str, resources.Resources] = {}
    for node_name, amounts in reserved.values():
        on_nodes[node_name] = resources.add(on_nodes.get(node_name, {}), amounts)
    rebuilt = Cluster.from_objects(list(nodes.values()), list(pods.values()), on_nodes)
    assert [n.name for n in kept.nodes] == [n.name for n in rebuilt.nodes]
    assert kept.resource_names == rebuilt.resource_names
    assert np.array_equal(kept.free, rebuilt.free)
    assert np.array_equal(kept.alloc, rebuilt.alloc)


def test_a_node_heartbeat_keeps_the_matrix_and_a_capacity_change_rebuilds_it() -> None:
    state = ClusterState()
    state.node_event("ADDED", node("n0", gpu=8))
    first = state.cluster()
    beat = node("n0", gpu=8)
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:10Z"}]
    assert not state.node_event("MODIFIED", beat)
    assert state.cluster() is first and state.rebuilds == 1
    assert state.node_event("MODIFIED", node("n0", gpu=4))
    assert int(state.cluster().free[0, state.cluster().gpu or 0]) == 4000 and state.rebuilds == 2


def test_a_kept_gang_request_is_reused_until_a_gated_pod_changes_and_decides_as_a_fresh_parse() -> None:
    from datetime import UTC, datetime

    from tfjob_operator.api.validation import parse_tfjob
    from tfjob_operator.gang import builtin, queue

    container = {"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    job = parse_tfjob({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "j", "namespace": "ns"},
                       "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2,
                                                              "template": {"spec": {"containers": [container]}}}}}})
    pods = [pod(f"j-worker-{i}", gpu=2) for i in range(2)]
    for i, p in enumerate(pods):
        p["metadata"].update(uid=f"u{i}", resourceVersion="1", namespace="ns")
        p["spec"]["schedulingGates"] = [{"name": builtin.GATE}]
    state = ClusterState(builtin.holds_on)
    state.node_event("ADDED", node("n0", gpu=4))
    kept: dict[str, Any] = {}
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def plan() -> queue.PassPlan:
        return queue.plan_pass_in([queue.QueuedGang(job, pods)], state.cluster(), now=now, requests=kept)

    first = plan()
    parsed = kept["ns/j"][1]
    assert plan().releases == first.releases and kept["ns/j"][1] is parsed
    bigger = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    pods[1] = {**pods[1], "metadata": {**pods[1]["metadata"], "resourceVersion": "2"},
               "spec": {**pods[1]["spec"], "containers": bigger}}
    again = plan()  # a changed pod is parsed again: 2 + 4 GPUs no longer fit on 4
    assert kept["ns/j"][1] is not parsed and again.admitted == [] and first.admitted == ["ns/j"]
    assert again.queued == plan_pass([queue.QueuedGang(job, pods)], [node("n0", gpu=4)], [], now=now).queued
