"""Pure rules of the builtin gang queue, read by the admission loop (`tfjob_operator.admission`): which pods keep
a job waiting, which pods are its gang, the FIFO key, the gang's priority, and how a release is summarised.

No I/O here; `tests/unit/test_admission.py` pins them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from tfjob_operator import constants
from tfjob_operator.gang import builtin
from tfjob_operator.keys import JobKey
from tfjob_operator.observed import owned_by, prior_status
from tfjob_operator.resources import is_terminal
from tfjob_operator.times import parse_time


def waits_for_admission(pod: Mapping[str, Any]) -> bool:
    """The pod still carries our gate, or was released by us and is not bound yet (the watchdog's concern)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") or is_terminal(pod):
        return False
    if builtin.is_gated(pod):
        return True
    return not builtin.is_bound(pod) and builtin.ANNOTATION_RELEASED_AT in (meta.get("annotations") or {})


def current_gang(obj: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], *,
                 attempt: int | None = None) -> list[Mapping[str, Any]]:
    """The job's pods of its current attempt that are not being deleted (what admission may release). `attempt`:
    the job's restartCount when the caller parsed its status already."""
    meta = obj.get("metadata") or {}
    current = str(prior_status(obj).restartCount if attempt is None else attempt)
    return [p for p in pods
            if owned_by(p, str(meta.get("name")), meta.get("uid"))
            and (p.get("metadata") or {}).get("namespace", "default") == meta.get("namespace", "default")
            and ((p.get("metadata") or {}).get("labels") or {}).get(constants.LABEL_ATTEMPT, "0") == current
            and not (p.get("metadata") or {}).get("deletionTimestamp")]


def arrival_seconds(obj: Mapping[str, Any], seen_order: int) -> float:
    """FIFO key: the job's creationTimestamp (whole seconds), then the order this operator first saw it queued."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    base = created.timestamp() if created is not None else 0.0
    return base + min(seen_order, 999_999) * 1e-6


def gang_priority(pods: Iterable[Mapping[str, Any]], class_values: Mapping[str, int]) -> int:
    """The gang's priority: the highest of its pods' ``spec.priority`` (set by the API server from the
    PriorityClass), or the class's value when the server left it 0."""
    best = 0
    for pod in pods:
        spec = pod.get("spec") or {}
        value = int(spec.get("priority") or 0)
        if not value and spec.get("priorityClassName"):
            value = class_values.get(str(spec["priorityClassName"]), 0)
        best = max(best, value)
    return best


def placement_summary(releases: Sequence[builtin.Release]) -> str:
    """"node-a ×3, node-b ×1": where a released gang went."""
    counts = Counter(r.node for r in releases)
    return ", ".join(f"{node} ×{n}" for node, n in sorted(counts.items()))


def held_gpu_seconds_by_job(pods_by_job: Mapping[JobKey, Sequence[Mapping[str, Any]]], seconds: float) -> Decimal:
    """GPU-seconds held over ``seconds`` by every gang that is bound in part but not all running."""
    total = Decimal(0)
    for pods in pods_by_job.values():
        live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        total += builtin.held_gpu_seconds(live, seconds)
    return total


def key_str(key: JobKey) -> str:
    return f"{key[0]}/{key[1]}"


def key_tuple(key: str) -> JobKey:
    namespace, _, name = key.partition("/")
    return namespace, name
