"""Kubernetes' own rules for what a pod requests and where it may run, as kube-scheduler applies them.

Written from the Kubernetes rules (NodeResourcesFit, NodeAffinity, TaintToleration, sidecar containers
of KEP-753) for this control plane alone: it must not share code with the operators it is used to test,
so that an operator's own placement is checked against an independent reading of the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

GPU = "nvidia.com/gpu"

Resources = dict[str, Decimal]


def quantities(raw: Mapping[str, Any] | None) -> Resources:
    return {name: Decimal(parse_quantity(value)) for name, value in (raw or {}).items()}


def add(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    total = dict(a)
    for name, value in b.items():
        total[name] = total.get(name, Decimal(0)) + value
    return total


def _container_request(container: Mapping[str, Any]) -> Resources:
    # A container that sets only limits is defaulted to request them.
    resources = container.get("resources") or {}
    return {**quantities(resources.get("limits")), **quantities(resources.get("requests"))}


def _elementwise_max(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    return {name: max(a.get(name, Decimal(0)), b.get(name, Decimal(0))) for name in {*a, *b}}


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """The pod's effective request (k8s.io/component-helpers resource.PodRequests).

    Init containers run one after another, each beside the sidecars (init containers with
    `restartPolicy: Always`) started before it; the app containers then run beside every sidecar. The
    effective request is the larger of the two phases, plus the pod's overhead.
    """
    spec = pod.get("spec") or {}
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        request = _container_request(container)
        if container.get("restartPolicy") == "Always":
            sidecars = add(sidecars, request)
            init_peak = _elementwise_max(init_peak, sidecars)
        else:
            init_peak = _elementwise_max(init_peak, add(sidecars, request))
    running = dict(sidecars)
    for container in spec.get("containers") or []:
        running = add(running, _container_request(container))
    return add(_elementwise_max(running, init_peak), quantities(spec.get("overhead")))


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    status = node.get("status") or {}
    return quantities(status.get("allocatable") or status.get("capacity"))


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return operator == "Exists"  # an empty key with Exists tolerates every taint
    if toleration["key"] != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Mapping[str, Any], taints: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint that no toleration of the pod matches, or None."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            _tolerates(toleration, taint) for toleration in tolerations
        ):
            return taint
    return None


def _requirement_holds(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = requirement.get("key", ""), requirement.get("operator")
    values = list(requirement.get("values") or [])
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def matches_node_selector(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and the required node affinity (terms ORed, requirements within a term ANDed)."""
    spec = pod.get("spec") or {}
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = affinity.get("nodeSelectorTerms") or []
    fields = {"metadata.name": metadata.get("name", "")}
    return not terms or any(
        all(_requirement_holds(r, labels) for r in term.get("matchExpressions") or [])
        and all(_requirement_holds(r, fields) for r in term.get("matchFields") or [])
        for term in terms
    )
