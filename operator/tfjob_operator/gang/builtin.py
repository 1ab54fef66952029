"""The built-in gang backend: a plain cluster with only kube-scheduler, made atomic by the operator.

Pods are created behind the scheduling gate ``tfjob.dev/gang``, so kube-scheduler ignores them. One
admission loop (the single active operator: one replica, or kopf peering so only the highest-priority
live replica runs timers) runs :func:`placement.admit` over every queued gang and releases an admitted
gang with one PATCH per pod (:func:`release_patch`): it pins the pod to its node with ``nodeSelector``
and removes the gate. kube-scheduler then binds each pod where capacity was already counted, so a gang
is never partly bound. If binding does not finish within ``scheduleTimeoutSeconds`` (another scheduler
took the room, a node went away) the watchdog (:func:`schedule_timed_out`) has the gang deleted,
recreated gated and requeued after :func:`backoff_seconds`.

One loop pass, as the operator wires it (a kopf timer on the active replica)::

    plan = plan_pass(gangs, nodes, all_pods, now=now, options=options, passes_waited=state.passes_waited,
                     not_before=state.not_before)
    for r in plan.releases: PATCH pod r.namespace/r.pod with r.patch (application/merge-patch+json)
    for key, reason in plan.queued.items(): Queued=True, reason GangQueued, message `reason`
    for key in plan.timed_out: restart the gang (delete pods, recreate gated) and set
        state.not_before[key] = now + backoff_seconds(timeouts of key)
    state.passes_waited = plan.passes_waited

``gangs`` holds every job of this backend that is not finished, with the pods of its current attempt;
``all_pods`` every pod on the cluster (bound pods of any scheduler use capacity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from tfjob_operator import constants, resources
from tfjob_operator.api import TFJob
from tfjob_operator.gang import base
from tfjob_operator.gang.placement import AdmissionPolicy, Cluster, GangRequest, admit_in, bound_node
from tfjob_operator.resources import is_terminal
from tfjob_operator.times import format_time, parse_time

GATE = constants.GANG_SCHEDULING_GATE
#: Node label that names the node; the release pins each pod with it.
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Annotation the release writes on each pod: when it was released (RFC 3339), for the watchdog.
ANNOTATION_RELEASED_AT = f"{constants.GROUP}/gang-released-at"
#: How the reason of a gang whose pods are still being created begins (a wait nobody needs to hear about).
CREATING_PREFIX = "waiting for all"


def is_gated(pod: Mapping[str, Any]) -> bool:
    """The pod still carries the built-in gang gate."""
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


class BuiltinBackend(base.GangBackend):
    """Gate every pod; the operator's admission loop places and releases the whole gang."""

    name = "builtin"
    uses_admission_loop = True

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


def gang_request(
    job: TFJob, pods: Sequence[Mapping[str, Any]], *, priority: int = 0, arrival: float = 0.0
) -> GangRequest:
    """The admission request for a job: its pods still gated (released ones already hold their nodes).

    ``priority``: the value of the pods' PriorityClass (0 without one); ``arrival``: when the job was
    queued, e.g. its creationTimestamp in epoch seconds (FIFO within a priority).
    """
    return GangRequest(
        key=job_key(job),
        pods=tuple(p for p in pods if is_gated(p)),
        priority=priority,
        arrival=arrival,
        domain_label=domain_label(job),
    )


def bound_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods that occupy a node (bound and not finished): what admission subtracts from allocatable."""
    return [p for p in pods if is_bound(p) and not is_terminal(p)]


def in_flight_reservations(pods: Iterable[Mapping[str, Any]]) -> dict[str, resources.Resources]:
    """Node → requests of pods released by us but not yet bound, read from the pods themselves.

    Stateless, so an operator restart loses nothing. Pods patched in this pass but not yet seen by the
    watch must be added by the caller.
    """
    held: dict[str, resources.Resources] = {}
    for pod in pods:
        node = released_to(pod)
        if node:
            held[node] = resources.add(held.get(node, {}), resources.scheduling_demand(pod))
    return held


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
    Pass it to :class:`placement.ClusterState` to keep what :func:`bound_pods` and
    :func:`in_flight_reservations` compute."""
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
    gpus = sum((resources.pod_requests(p).get(resources.GPU, Decimal(0)) for p in live if is_bound(p)), Decimal(0))
    return gpus * Decimal(str(seconds))


@dataclass(frozen=True)
class QueuedGang:
    """A job of the builtin backend as one pass sees it."""

    job: TFJob
    #: The pods of its current attempt, as observed (gated, released or bound).
    pods: Sequence[Mapping[str, Any]]
    #: Value of the job's PriorityClass (0 without one): higher is admitted first.
    priority: int = 0
    #: When it was queued, in epoch seconds (e.g. creationTimestamp): FIFO within a priority.
    arrival: float = 0.0


@dataclass(frozen=True)
class Release:
    """One PATCH of the release: pin the pod to its node and remove the gate."""

    namespace: str
    pod: str
    node: str
    #: JSON merge patch body (content type application/merge-patch+json).
    patch: dict[str, Any]


@dataclass(frozen=True)
class PassPlan:
    """What one admission pass wants written."""

    releases: list[Release] = field(default_factory=list)
    #: job key (namespace/name) → reason, for every job still waiting for admission.
    queued: dict[str, str] = field(default_factory=dict)
    #: job keys released in this pass.
    admitted: list[str] = field(default_factory=list)
    #: job keys whose released gang was not fully bound within scheduleTimeoutSeconds: restart the gang.
    timed_out: list[str] = field(default_factory=list)
    #: Feed back as ``passes_waited`` on the next pass.
    passes_waited: dict[str, int] = field(default_factory=dict)
    #: The job holding the anti-starvation reservation, if any.
    reserved_for: str | None = None


def _kept_request(requests: dict[str, tuple[tuple[Any, ...], GangRequest]] | None, gang: QueuedGang,
                  gated: Sequence[Mapping[str, Any]]) -> GangRequest:
    """The gang's request, parsed again only when its gated pods (uid and resourceVersion), priority, arrival or
    domain changed."""
    metas = [p.get("metadata") or {} for p in gated]
    signature = (tuple((m.get("uid"), m.get("resourceVersion"), m.get("name")) for m in metas), gang.priority,
                 gang.arrival, domain_label(gang.job))
    key = job_key(gang.job)
    if requests is not None and all(m.get("uid") and m.get("resourceVersion") for m in metas):
        kept = requests.get(key)
        if kept is not None and kept[0] == signature:
            return kept[1]
        request = gang_request(gang.job, gated, priority=gang.priority, arrival=gang.arrival)
        requests[key] = (signature, request)
        return request
    return gang_request(gang.job, gated, priority=gang.priority, arrival=gang.arrival)


def plan_pass(
    gangs: Sequence[QueuedGang],
    nodes: Sequence[Mapping[str, Any]],
    all_pods: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    options: base.GangOptions | None = None,
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
    not_before: Mapping[str, datetime] | None = None,
) -> PassPlan:
    """One pass of the builtin admission loop: which pods to release where, who waits and why, who timed out.

    A job is considered only once every pod of its gang exists (so a half-created gang is never admitted)
    and after its back-off (``not_before``, set after a schedule timeout) has passed.
    """
    cluster = Cluster.from_objects(nodes, bound_pods(all_pods), in_flight_reservations(all_pods))
    return plan_pass_in(gangs, cluster, now=now, options=options, policy=policy, passes_waited=passes_waited,
                        not_before=not_before)


def plan_pass_in(
    gangs: Sequence[QueuedGang],
    cluster: Cluster,
    *,
    now: datetime,
    options: base.GangOptions | None = None,
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
    not_before: Mapping[str, datetime] | None = None,
    requests: dict[str, tuple[tuple[Any, ...], GangRequest]] | None = None,
) -> PassPlan:
    """:func:`plan_pass` on a prepared :class:`Cluster` (the operator's kept one: `placement.ClusterState` with
    :func:`holds_on`), which is not modified. ``requests``, kept by the caller between passes, holds each queued
    job's parsed request (pod requests and constraints), reused while its gated pods are unchanged."""
    options = options or base.GangOptions()
    queued: dict[str, str] = {}
    timed_out: list[str] = []
    queue: list[GangRequest] = []
    by_key: dict[str, QueuedGang] = {}
    for gang in gangs:
        key = job_key(gang.job)
        live = [p for p in gang.pods if not is_terminal(p)]
        if schedule_timed_out(live, now, base.schedule_timeout_seconds(gang.job, options)):
            timed_out.append(key)
            continue
        gated = [p for p in live if is_gated(p)]
        if not gated:
            continue  # released (being bound or running): nothing to admit
        wait_until = (not_before or {}).get(key)
        if wait_until is not None and now < wait_until:
            queued[key] = f"requeued after a schedule timeout; admission resumes at {wait_until:%H:%M:%S}Z"
            continue
        expected = gang.job.total_replicas()
        if len(live) < expected:
            queued[key] = f"{CREATING_PREFIX} {expected} pods of the gang to be created ({len(live)} so far)"
            continue
        by_key[key] = gang
        queue.append(_kept_request(requests, gang, gated))
    if requests is not None:
        for key in [k for k in requests if k not in by_key]:
            del requests[key]
    result = admit_in(cluster, queue, policy, passes_waited)
    releases: list[Release] = []
    for key, chosen in result.admitted.items():
        for pod in by_key[key].pods:
            name = str((pod.get("metadata") or {}).get("name"))
            if name in chosen:
                releases.append(
                    Release(by_key[key].job.namespace, name, chosen[name], release_patch(pod, chosen[name], now))
                )
    return PassPlan(
        releases=releases,
        queued={**queued, **result.waiting},
        admitted=list(result.admitted),
        timed_out=timed_out,
        # Jobs skipped this pass (back-off, half created) keep their count.
        passes_waited={**{k: v for k, v in (passes_waited or {}).items() if k in queued}, **result.passes_waited},
        reserved_for=result.reserved_for,
    )
