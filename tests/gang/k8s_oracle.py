"""An independent oracle for "does this fit": the Kubernetes rules written out again from the documentation,
sharing no code with `tfjob_operator.gang.resources` (which the placement under test uses).

Sources: https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-within-containers
and k8s.io/component-helpers/resource PodRequests. A pod's effective request of each resource is

    max(  app containers + every sidecar,                        (the running phase)
          max over init containers i of: request(i) + sidecars started before i  )   (the init phase)
    + pod overhead

where a sidecar is an init container with `restartPolicy: Always`, counted from its own start on; a container
that sets only limits requests its limits. Integers here: cpu in millicores, everything else in base units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(text: str | int, resource: str) -> int:
    """'500m', '2', '4Gi' → an integer (cpu in millicores; other resources in whole units)."""
    text = str(text)
    scale = 1000 if resource == "cpu" else 1
    if text.endswith("m"):
        return int(text[:-1]) * scale // 1000
    for suffix, factor in _SUFFIX.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor * scale
    return int(text) * scale


def _container(container: Mapping[str, Any]) -> dict[str, int]:
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {name: quantity(value, name) for name, value in merged.items()}


def effective_request(pod: Mapping[str, Any]) -> dict[str, int]:
    spec = pod.get("spec") or {}
    inits = list(spec.get("initContainers") or [])
    apps = [_container(c) for c in spec.get("containers") or []]
    names = {n for c in [*apps, *(_container(i) for i in inits)] for n in c} | set(spec.get("overhead") or {})
    out: dict[str, int] = {}
    for name in names:
        sidecars_so_far = 0
        init_phase = 0
        for init in inits:
            amount = _container(init).get(name, 0)
            if init.get("restartPolicy") == "Always":
                sidecars_so_far += amount
                init_phase = max(init_phase, sidecars_so_far)
            else:
                init_phase = max(init_phase, sidecars_so_far + amount)
        running = sum(c.get(name, 0) for c in apps) + sidecars_so_far
        overhead = quantity((spec.get("overhead") or {}).get(name, 0), name)
        out[name] = max(running, init_phase) + overhead
    return out


def allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: quantity(value, name) for name, value in raw.items()}


def _tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def overcommitted(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Resource → (requested, allocatable) for every resource the pods together request beyond the node's."""
    total: dict[str, int] = {}
    for pod in pods:
        for name, amount in effective_request(pod).items():
            total[name] = total.get(name, 0) + amount
        # NodeResourcesFit: every pod counts against the node's allocatable `pods` (maxPods), requests or not.
        total["pods"] = total.get("pods", 0) + 1
    have = allocatable(node)
    return {name: (amount, have.get(name, 0)) for name, amount in total.items() if amount > have.get(name, 0)}


def may_run_on(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector labels present, every NoSchedule/NoExecute taint tolerated, the node Ready."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    if not all(_tolerated(t, spec.get("tolerations") or []) for t in taints):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
