"""The builtin backend's queue, pure: one admission pass (:func:`plan_pass_in`), and the rules the admission loop
(`gang.admission`) reads around it: which pods keep a job waiting, which pods are its gang, the FIFO key, the
gang's priority, and how a release is summarised.

No I/O here; `tests/gang/test_gang_backends.py` and `tests/unit/test_admission.py` pin them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from tfjob_operator.api import TFJob, constants
from tfjob_operator.api.keys import JobKey
from tfjob_operator.api.observed import owned_by, prior_status
from tfjob_operator.api.times import parse_time
from tfjob_operator.gang import base, builtin
from tfjob_operator.gang.builtin import domain_label, is_gated, job_key, release_patch, schedule_timed_out
from tfjob_operator.gang.cluster import Cluster
from tfjob_operator.gang.elastic import elastic_bounds, rendered_sizes, widths, worker_count
from tfjob_operator.gang.explain import GangWait, WaitKind
from tfjob_operator.gang.placement import AdmissionPolicy, Elastic, admit_in
from tfjob_operator.gang.request import GangRequest
from tfjob_operator.gang.resources import is_terminal


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


def placement_summary(releases: Sequence[Release]) -> str:
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
    #: job key (namespace/name) → why, for every job still waiting for admission.
    waits: dict[str, GangWait] = field(default_factory=dict)
    #: job keys released in this pass.
    admitted: list[str] = field(default_factory=list)
    #: job keys whose released gang was not fully bound within scheduleTimeoutSeconds: restart the gang.
    timed_out: list[str] = field(default_factory=list)
    #: Feed back as ``passes_waited`` on the next pass.
    passes_waited: dict[str, int] = field(default_factory=dict)
    #: The job holding the anti-starvation reservation, if any.
    reserved_for: str | None = None
    #: Elastic jobs considered: job key → the workers that fit at its turn (see placement.admit_in).
    fits: dict[str, int | None] = field(default_factory=dict)

    @property
    def queued(self) -> dict[str, str]:
        """job key → the reason its Queued condition shows."""
        return {key: wait.message for key, wait in self.waits.items()}


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
    """One pass of the builtin admission loop on free capacity ``cluster`` (the loop's `cluster.ClusterState`, pods
    counted with :func:`holds_on`; not modified): which pods to release where, who waits and why, who timed out.

    ``gangs``: every job of this backend that is not finished, with the pods of its current attempt. A job is
    considered only once every pod of its gang exists (a half-created gang is never admitted) and after its
    back-off (``not_before``, set after a schedule timeout). ``requests``, kept by the caller between passes,
    holds each queued job's parsed request, reused while its gated pods are unchanged."""
    options = options or base.GangOptions()
    queued: dict[str, GangWait] = {}
    timed_out: list[str] = []
    queue: list[GangRequest] = []
    by_key: dict[str, QueuedGang] = {}
    elastic: dict[str, Elastic] = {}
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
            queued[key] = GangWait(WaitKind.BACKOFF,
                                   f"requeued after a schedule timeout; admission resumes at {wait_until:%H:%M:%S}Z")
            continue
        bounds = elastic_bounds(gang.job)
        # An elastic gang is created at the width that fit then: its pods record how many they are.
        sizes = rendered_sizes(live) if bounds is not None else set()
        if len(sizes) > 1:
            queued[key] = GangWait(WaitKind.CREATING, f"waiting for the gang to be created again at one width "
                                                      f"(its pods record {' and '.join(map(str, sorted(sizes)))})")
            continue
        expected = next(iter(sizes)) if sizes else gang.job.total_replicas()
        if len(live) < expected:
            queued[key] = GangWait(WaitKind.CREATING,
                                   f"waiting for all {expected} pods of the gang to be created ({len(live)} so far)")
            continue
        by_key[key] = gang
        request = _kept_request(requests, gang, gated)
        queue.append(request)
        if bounds is not None and (width := worker_count(gated)):
            elastic[key] = Elastic(*bounds, width=width, at=widths(request))
    if requests is not None:
        for key in [k for k in requests if k not in by_key]:
            del requests[key]
    result = admit_in(cluster, queue, policy, passes_waited, elastic)
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
        waits={**queued, **result.waits},
        admitted=list(result.admitted),
        timed_out=timed_out,
        # Jobs skipped this pass (back-off, half created) keep their count.
        passes_waited={**{k: v for k, v in (passes_waited or {}).items() if k in queued}, **result.passes_waited},
        reserved_for=result.reserved_for,
        fits=result.fits,
    )
