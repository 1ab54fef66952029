"""A queued gang as admission reads it: its pods grouped into classes of interchangeable pods, amounts in units.

Quantities are compared as integers in thousandths (cpu in millicores, memory in milli-bytes), so a pass does
integer arithmetic only; a pod's requests are parsed once, when its request is built.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import cached_property
from typing import Any

from tfjob_operator.gang import resources
from tfjob_operator.gang.resources import GPU

#: Thousandths per unit of a quantity.
SCALE = Decimal(1000)
#: Quantities beyond this (in thousandths) are clipped so they stay inside int64.
MAX_UNITS = 2**62
#: A pod's nonzero requests as (resource name, amount in thousandths), sorted by name.
Requests = tuple[tuple[str, int], ...]


def units(value: Decimal, *, up: bool) -> int:
    """A quantity in thousandths, rounded up (requests) or down (capacity)."""
    return int((value * SCALE).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))


def decimal_of(amount: int) -> Decimal:
    """An amount in thousandths back as a quantity."""
    return Decimal(amount) / SCALE


def constraint_signature(pod: Mapping[str, Any]) -> str:
    """What node predicates look at, as a stable string: equal signatures accept the same nodes."""
    spec = pod.get("spec") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return json.dumps([spec.get("nodeSelector") or {}, affinity or {}, spec.get("tolerations") or []], sort_keys=True)


def _pod_name(pod: Mapping[str, Any]) -> str:
    name = (pod.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("gang pod without metadata.name: every pod of a GangRequest needs a name")
    return str(name)


@dataclass(frozen=True)
class PodClass:
    """Pods of one gang that are interchangeable for placement: same requests, same node constraints."""

    requests: Requests
    signature: str
    template: Mapping[str, Any]
    pod_names: tuple[str, ...]

    def amount(self, name: str) -> int:
        return dict(self.requests).get(name, 0)


@dataclass(frozen=True)
class GangRequest:
    """One queued gang: all its pods must be placed together or not at all.

    ``pods`` are Kubernetes pod dicts (``metadata.name``, containers' requests, nodeSelector, affinity,
    tolerations). ``arrival`` orders gangs of equal priority (e.g. creation time in seconds).
    ``domain_label``: when set, every pod must land on nodes sharing one value of that node label
    (an NVLink island, a rack); nodes without the label are not used.
    """

    key: str
    pods: tuple[Mapping[str, Any], ...]
    priority: int = 0
    arrival: float = 0.0
    domain_label: str | None = None

    @cached_property
    def classes(self) -> tuple[PodClass, ...]:
        """Pods grouped by (requests, constraints), biggest first (GPUs, then cpu, then memory)."""
        groups: dict[tuple[Requests, str], list[Mapping[str, Any]]] = {}
        for pod in self.pods:
            demand = resources.scheduling_demand(pod)
            reqs = tuple(sorted((name, units(value, up=True)) for name, value in demand.items() if value > 0))
            groups.setdefault((reqs, constraint_signature(pod)), []).append(pod)
        classes = [
            PodClass(reqs, sig, members[0], tuple(_pod_name(p) for p in members))
            for (reqs, sig), members in groups.items()
        ]
        classes.sort(key=lambda c: (-c.amount(GPU), -c.amount("cpu"), -c.amount("memory"), c.pod_names))
        return tuple(classes)

    @cached_property
    def total_requests(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for cls in self.classes:
            for name, amount in cls.requests:
                total[name] = total.get(name, 0) + amount * len(cls.pod_names)
        return total

    @cached_property
    def shape(self) -> tuple[tuple[Requests, str, int], ...]:
        """What placement depends on besides the cluster: gangs of equal shape fit alike."""
        return tuple((c.requests, c.signature, len(c.pod_names)) for c in self.classes)

    @property
    def rank(self) -> tuple[int, float, str]:
        return (-self.priority, self.arrival, self.key)
