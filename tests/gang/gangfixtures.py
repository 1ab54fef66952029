"""Tiny builders for nodes, pods and gangs used by the gang tests."""

from __future__ import annotations

from typing import Any

from tfjob_operator.gang.placement import GangRequest


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
