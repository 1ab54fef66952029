"""The operator's resource arithmetic and node-fit predicates over plain Kubernetes dicts: a pod's effective
requests, a node's allocatable, what fits where (nodeSelector, required node affinity, taints), quantities
written back for Kubernetes and for people.

Used by the gang backends and admission. The local control plane keeps its own copy
(`kubelocal.resources`), and the tests check both against an independent oracle (`tests/gang/k8s_oracle.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

GPU: str = "nvidia.com/gpu"

Resources = dict[str, Decimal]


def parse_resources(raw: Mapping[str, Any] | None) -> Resources:
    """Quantities like {"cpu": "500m", "memory": "1Gi"} as Decimals (cpu in cores, memory in bytes)."""
    return {name: Decimal(parse_quantity(value)) for name, value in (raw or {}).items()}


def add(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, Decimal(0)) + value
    return out


#: Pod phases after which a pod holds nothing and is never restarted.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

#: A node's allocatable pod count (kubelet's maxPods): kube-scheduler's NodeResourcesFit counts every pod
#: as one of it, whatever the pod requests.
POD_COUNT: str = "pods"


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """The pod ended (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """Effective requests of a pod as the scheduler sees them (k8s.io/component-helpers resource.PodRequests).

    Init containers run one after another, each beside the sidecars (init containers with `restartPolicy:
    Always`) started before it; the app containers then run beside every sidecar. The effective request is the
    larger of the two phases, plus pod overhead. A container that sets only limits requests its limits
    (Kubernetes defaulting).
    """
    spec = pod.get("spec") or {}

    def container_requests(container: Mapping[str, Any]) -> Resources:
        res = container.get("resources") or {}
        limits = parse_resources(res.get("limits"))
        requests = parse_resources(res.get("requests"))
        return {**limits, **requests}

    def larger(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
        return {name: max(a.get(name, Decimal(0)), b.get(name, Decimal(0))) for name in {*a, *b}}

    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            sidecars = add(sidecars, container_requests(container))
            init_peak = larger(init_peak, sidecars)
        else:
            init_peak = larger(init_peak, add(sidecars, container_requests(container)))
    running = dict(sidecars)
    for container in spec.get("containers") or []:
        running = add(running, container_requests(container))
    return add(larger(running, init_peak), parse_resources(spec.get("overhead")))


def requested_gpus(pods: Iterable[Mapping[str, Any]]) -> Decimal:
    """GPUs the pods request, summed."""
    return sum((pod_requests(p).get(GPU, Decimal(0)) for p in pods), Decimal(0))


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    status = node.get("status") or {}
    return parse_resources(status.get("allocatable") or status.get("capacity"))


def node_is_ready(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True  # a node that reports no Ready condition yet is taken as ready


def _toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # empty key with Exists tolerates everything
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def tolerates_taints(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Every NoSchedule/NoExecute taint of the node is tolerated by the pod."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_toleration_matches(t, taint) for t in tolerations):
            return False
    return True


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key", "")
    op = expr.get("operator")
    values = list(expr.get("values") or [])
    present = key in labels
    value = labels.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            left, right = int(value or ""), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def matches_node_selector(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity both hold."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    )
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    # Terms are ORed; expressions within a term are ANDed (matchFields supports metadata.name only).
    for term in terms:
        exprs_ok = all(_expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        fields = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
        fields_ok = all(_expression_matches(e, fields) for e in term.get("matchFields") or [])
        if exprs_ok and fields_ok:
            return True
    return False


def node_accepts(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The node is ready and the pod's selectors, affinity and tolerations allow it (capacity aside)."""
    return node_is_ready(node) and matches_node_selector(pod, node) and tolerates_taints(pod, node)


def scheduling_demand(pod: Mapping[str, Any]) -> Resources:
    """What a pod takes of its node in the fit check: its effective requests plus one of the node's `pods`.

    Without the count, pods that request nothing "fit" a node without end, while the scheduler refuses
    them once the node holds maxPods: a gang admitted there would never bind.
    """
    return {**pod_requests(pod), POD_COUNT: Decimal(1)}


def bound_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod holds capacity on: its node once bound, until it ends (terminal pods hold nothing)."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    return str(node_name) if node_name and not is_terminal(pod) else None


def used_on_nodes(pods: Iterable[Mapping[str, Any]]) -> dict[str, Resources]:
    """What bound, non-terminal pods take (requests and pod count) summed per node name."""
    used: dict[str, Resources] = {}
    for pod in pods:
        node_name = bound_node(pod)
        if node_name:
            used[node_name] = add(used.get(node_name, {}), scheduling_demand(pod))
    return used


def format_quantity(value: Decimal) -> str:
    """A Decimal as a Kubernetes quantity string ("2", "500m", "1073741824")."""
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return f"{value.normalize():f}"


def format_amount(name: str, value: Decimal) -> str:
    """One amount for people: memory in Gi or Mi (3 significant digits), fractional cpu in millicores."""
    if name == "memory":
        if value >= 2**30:
            return f"{value / 2**30:.3g}Gi"
        if value >= 2**20:
            return f"{value / 2**20:.3g}Mi"
    if name == "cpu" and value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    return f"{value.normalize():f}"
