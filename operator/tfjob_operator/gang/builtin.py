"""The built-in gang backend: a plain cluster with only kube-scheduler, made atomic by the operator.

Pods are created behind the scheduling gate ``tfjob.dev/gang``, so kube-scheduler ignores them. The operator's
admission loop (`gang.admission`, one task in the active replica) runs :func:`queue.plan_pass_in` over every queued
gang and releases an admitted gang with one PATCH per pod (:func:`release_patch`): it pins the pod to its node
with ``nodeSelector`` and removes the gate. kube-scheduler then binds each pod where capacity was already
counted, so a gang is never partly bound. If binding does not finish within ``scheduleTimeoutSeconds`` (another
scheduler took the room, a node went away) the watchdog (:func:`schedule_timed_out`) has the gang deleted,
recreated gated and requeued after :func:`backoff_seconds`.

This module holds the backend and its rules about one pod; `gang.queue` the pure pass, `gang.admission` the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from tfjob_operator.api import TFJob, constants
from tfjob_operator.api.times import format_time, parse_time
from tfjob_operator.gang import base, resources
from tfjob_operator.gang.resources import bound_node, is_terminal

GATE = constants.GANG_SCHEDULING_GATE
#: Node label that names the node; the release pins each pod with it.
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Annotation the release writes on each pod: when it was released (RFC 3339), for the watchdog.
ANNOTATION_RELEASED_AT = f"{constants.GROUP}/gang-released-at"


def is_gated(pod: Mapping[str, Any]) -> bool:
    """The pod still carries the built-in gang gate."""
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


class BuiltinBackend(base.GangBackend, base.ReleasedByOperator):
    """Gate every pod; the operator's admission loop places and releases the whole gang."""

    name = "builtin"

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = base.copy_pod(pod)
        gates = [g for g in out["spec"].get("schedulingGates") or [] if g.get("name") != GATE]
        out["spec"]["schedulingGates"] = [*gates, {"name": GATE}]
        base.set_priority_class(job, out, self.options.builtin_priority_class)
        return out

    def queued_reason(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> str | None:
        gated = sum(1 for p in pods if is_gated(p))
        if not gated:
            return None
        return f"waiting for gang admission ({gated} of {len(pods)} pods gated)"


def domain_label(job: TFJob) -> str | None:
    """The node label all pods must share a value of (annotation tfjob.dev/gang-domain), if any."""
    value = job.metadata.annotations.get(base.ANNOTATION_GANG_DOMAIN, "").strip()
    return value or None


def job_key(job: TFJob) -> str:
    return f"{job.namespace}/{job.name}"


def released_to(pod: Mapping[str, Any]) -> str | None:
    """The node a pod released by us (not yet bound, not ended, not being deleted) is pinned to, else None."""
    meta = pod.get("metadata") or {}
    if is_bound(pod) or is_gated(pod) or is_terminal(pod) or meta.get("deletionTimestamp"):
        return None
    if ANNOTATION_RELEASED_AT not in (meta.get("annotations") or {}):
        return None
    node = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME_LABEL)
    return str(node) if node else None


def holds_on(pod: Mapping[str, Any]) -> str | None:
    """Where a pod's requests count for admission: its node once bound, or the node it was released to (so
    released-but-unbound pods are never booked twice; read from the pod, an operator restart loses nothing).
    The admission loop's :class:`cluster.ClusterState` counts pods with it."""
    return bound_node(pod) or released_to(pod)


def release_patch(pod: Mapping[str, Any], node: str, now: datetime | None = None) -> dict[str, Any]:
    """JSON merge patch (application/merge-patch+json) that pins a gated pod to ``node`` and ungates it.

    Lists are replaced by merge patches, so the other gates are written back unchanged. Kubernetes allows
    adding nodeSelector entries and removing gates while a pod is gated (1.27+, GA 1.30).
    """
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    pinned = selector.get(HOSTNAME_LABEL)
    if pinned is not None and pinned != node:
        name = (pod.get("metadata") or {}).get("name")
        raise ValueError(f"pod {name}: spec.nodeSelector[{HOSTNAME_LABEL}] is {pinned!r}, cannot release to {node!r}")
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
    stamp = format_time(now)
    return {
        "metadata": {"annotations": {ANNOTATION_RELEASED_AT: stamp}},
        "spec": {"nodeSelector": {HOSTNAME_LABEL: node}, "schedulingGates": gates or None},
    }


def as_released(pod: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as it reads once ``patch`` (from :func:`release_patch`) is applied: pinned, ungated, stamped."""
    meta = dict(pod.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}
    spec = dict(pod.get("spec") or {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **patch["spec"]["nodeSelector"]}
    spec["schedulingGates"] = patch["spec"]["schedulingGates"] or []
    return {**pod, "metadata": meta, "spec": spec}


def released_at(pod: Mapping[str, Any]) -> datetime | None:
    return parse_time(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RELEASED_AT))


def schedule_timed_out(pods: Sequence[Mapping[str, Any]], now: datetime, timeout_seconds: float) -> bool:
    """True when a released gang is still not fully bound ``timeout_seconds`` after its release.

    Then the operator deletes the gang's pods, recreates them gated and requeues the job after
    :func:`backoff_seconds`. A gang not yet released (or fully bound) never times out.
    """
    live = [p for p in pods if not is_terminal(p)]
    if not live or all(is_bound(p) for p in live):
        return False
    stamps = [t for t in (released_at(p) for p in live) if t is not None]
    if not stamps:
        return False
    return (now - min(stamps)).total_seconds() >= timeout_seconds


def backoff_seconds(timeouts: int, base_seconds: float = 10.0, cap_seconds: float = 600.0) -> float:
    """Wait before re-admitting a gang after its ``timeouts``-th schedule timeout: 10, 20, 40 … ≤ 600 s."""
    if timeouts <= 0:
        return 0.0
    return min(cap_seconds, base_seconds * 2 ** (timeouts - 1))


def held_gpu_seconds(pods: Sequence[Mapping[str, Any]], seconds: float) -> Decimal:
    """GPU-seconds held over ``seconds`` by a gang that is not fully running (for the metric)."""
    live = [p for p in pods if not is_terminal(p)]
    running = [p for p in live if (p.get("status") or {}).get("phase") == "Running"]
    if live and len(running) == len(live):
        return Decimal(0)
    return resources.requested_gpus(p for p in live if is_bound(p)) * Decimal(str(seconds))
