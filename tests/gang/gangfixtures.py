"""Tiny builders for nodes, pods and gangs used by the gang tests, and one-shot passes over plain objects (the
operator keeps its free capacity between passes instead; tests/gang/test_cluster_state.py shows both agree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from tfjob_operator.gang import builtin, queue, resources
from tfjob_operator.gang.base import GangOptions
from tfjob_operator.gang.cluster import Cluster
from tfjob_operator.gang.placement import AdmissionPolicy, AdmissionResult, admit_in
from tfjob_operator.gang.request import GangRequest


def node(
    name: str,
    gpu: int = 0,
    cpu: str = "32",
    memory: str = "128Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    pods: str = "110",
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    gpu: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    node_name: str | None = None,
    phase: str = "Pending",
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"containers": [{"name": "tensorflow", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def gang(
    key: str,
    workers: int,
    gpu: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    priority: int = 0,
    arrival: float = 0.0,
    domain_label: str | None = None,
    **pod_kwargs: Any,
) -> GangRequest:
    pods = tuple(pod(f"{key}-worker-{i}", gpu=gpu, cpu=cpu, memory=memory, **pod_kwargs) for i in range(workers))
    return GangRequest(key, pods, priority=priority, arrival=arrival, domain_label=domain_label)


def admit(
    queue_: Sequence[GangRequest],
    nodes: Sequence[Mapping[str, Any]],
    bound_pods: Iterable[Mapping[str, Any]] = (),
    reservations: Mapping[str, Mapping[str, Decimal]] | None = None,
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
) -> AdmissionResult:
    """One admission pass over plain objects: ``bound_pods`` every pod with ``spec.nodeName`` (terminal ones are
    ignored), ``reservations`` node name → resources of pods released there but not bound yet."""
    return admit_in(Cluster.from_objects(nodes, bound_pods, reservations), queue_, policy, passes_waited)


def bound_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods that occupy a node (bound and not finished)."""
    return [p for p in pods if builtin.is_bound(p) and not resources.is_terminal(p)]


def in_flight_reservations(pods: Iterable[Mapping[str, Any]]) -> dict[str, resources.Resources]:
    """Node → requests of pods released by the builtin backend but not yet bound, read from the pods."""
    held: dict[str, resources.Resources] = {}
    for pod_ in pods:
        node_name = builtin.released_to(pod_)
        if node_name:
            held[node_name] = resources.add(held.get(node_name, {}), resources.scheduling_demand(pod_))
    return held


def plan_pass(
    gangs: Sequence[queue.QueuedGang],
    nodes: Sequence[Mapping[str, Any]],
    all_pods: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    options: GangOptions | None = None,
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
    not_before: Mapping[str, datetime] | None = None,
) -> queue.PassPlan:
    """One builtin pass over plain objects: free capacity from every pod on the cluster (``all_pods``)."""
    cluster = Cluster.from_objects(nodes, bound_pods(all_pods), in_flight_reservations(all_pods))
    return queue.plan_pass_in(gangs, cluster, now=now, options=options, policy=policy, passes_waited=passes_waited,
                              not_before=not_before)
