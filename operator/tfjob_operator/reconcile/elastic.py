"""The width of an elastic job's Worker gang (`spec.elasticPolicy`, tfjob.dev/v1): pure policy, docs/elastic.md.

The width is an input: the gang view's `fits_workers` says the widest width in [min, max] that fits now. A gang
attempt's width is chosen before its pods exist and kept while it runs (MultiWorkerMirroredStrategy cannot change
membership): a resize is "delete the gang gracefully (SIGTERM: the runtime saves), recreate it at M".
- Shrink: a restart after a disruption starts narrower when the old width no longer fits (never below min: the
  gang then waits at min). The restart itself is a disruption, never counted towards backoffLimit.
- Widen: while Running, room for more workers that lasts WIDEN_STABLE_SECONDS (or the cooldown, if shorter), and
  never within resizeCooldownSeconds of the last resize (or the start), restarts the gang wider: a resize, not a
  failure.
- Worker.replicas is the initial width; a change on a running job restarts the gang at that width (if it fits).
"""

from __future__ import annotations

from datetime import timedelta

from tfjob_operator.api import ElasticStatus, JobConditionType, ReplicaType, TFJob, TFJobStatus, constants
from tfjob_operator.api.times import parse_time
from tfjob_operator.reconcile.actions import DeletePod
from tfjob_operator.reconcile.conditions import Ctx, replica_statuses
from tfjob_operator.reconcile.observe import ObservedPod
from tfjob_operator.reconcile.reasons import Reason
from tfjob_operator.reconcile.render import pod_name

C = JobConditionType

#: Room for more workers must be seen this long without a break before the gang widens (hysteresis).
WIDEN_STABLE_SECONDS = 60
#: While a gang runs narrower than max, it is reconciled this often to see whether room has returned.
RECHECK_SECONDS = 30
#: ... but never more often than this (a cooldown of 0).
MIN_RECHECK_SECONDS = 5


def is_elastic(job: TFJob) -> bool:
    return job.spec.elasticPolicy is not None and job.apiVersion == constants.API_VERSION


def spec_workers(job: TFJob) -> int:
    specs = job.spec.tfReplicaSpecs
    return specs[ReplicaType.WORKER].replicas if ReplicaType.WORKER in specs else 0  # type: ignore[comparison-overlap]


def at_width(job: TFJob, status: TFJobStatus | None) -> TFJob:
    """The job with Worker.replicas at the current width (and the status, whose base width render reads)."""
    if not is_elastic(job) or status is None or status.elastic is None:
        return job
    out = job.model_copy(deep=True)
    out.spec.tfReplicaSpecs[ReplicaType.WORKER].replicas = status.elastic.currentReplicas
    out.status = status
    return out


def blocking(stale: list[ObservedPod]) -> list[ObservedPod]:
    """Old-attempt pods the next attempt must wait for: all but those Terminating on a lost node, which stay so
    until the node returns (no kubelet confirms); the next attempt may be narrower and not need their names."""
    return [p for p in stale if not (p.terminating and p.disruption == Reason.NODE_LOST)]


def blocks_names(job: TFJob, stale: list[ObservedPod]) -> bool:
    """An old pod still there whose name the attempt at this width reuses, or one not yet on its way out."""
    needed = {pod_name(job.name, t, i) for t, s in job.replica_specs() for i in range(s.replicas)}
    return bool(blocking(stale)) or any(p.name in needed for p in stale)


def summary(elastic: ElasticStatus) -> str:
    """The printer column: current / max (min), e.g. "3/4 (min 2)"."""
    return f"{elastic.currentReplicas}/{elastic.maxReplicas} (min {elastic.minReplicas})"


def _fitting(ctx: Ctx, lo: int, want: int) -> int:
    """`want`, or the widest width that fits when fewer fit now (never below `lo`: the gang waits there)."""
    fits = ctx.options.gang.fits_workers
    return want if fits is None or fits >= want else max(fits, lo)


def start_attempt(ctx: Ctx, job: TFJob) -> None:
    """Before an attempt's pods exist: choose its width. The first attempt starts at Worker.replicas or, when
    fewer fit, narrower (≥ min) instead of waiting; a later one keeps its width unless it no longer fits."""
    policy = job.spec.elasticPolicy
    assert policy is not None
    lo, hi, wanted = policy.minReplicas, policy.maxReplicas, spec_workers(job)
    el = ctx.status.elastic
    if el is None:
        ctx.status.elastic = ElasticStatus(currentReplicas=_fitting(ctx, lo, wanted), minReplicas=lo, maxReplicas=hi,
                                           baseReplicas=wanted, specReplicas=wanted)
        return
    el.minReplicas, el.maxReplicas = lo, hi
    old = el.currentReplicas
    target, cause = min(max(old, lo), hi), el.cause or "the width no longer fits"
    if el.specReplicas != wanted:
        target, cause = wanted, f"spec.tfReplicaSpecs.Worker.replicas set to {wanted}"
        el.specReplicas = wanted
    new = _fitting(ctx, lo, target)
    fits = ctx.options.gang.fits_workers
    if fits is not None and fits < new:
        cause += f" ({fits} fit now: the gang waits for {new}, spec.elasticPolicy.minReplicas)"
    if new != old:
        _record(ctx, old, new, cause, transition=False)


def check_running(ctx: Ctx, spec_job: TFJob, current: list[ObservedPod]) -> bool:
    """An attempt under way: restart it at another width when Worker.replicas changed, a node it runs on is
    marked for removal, or room for more workers has lasted (see the module doc). True if the gang restarts."""
    el, policy = ctx.status.elastic, spec_job.spec.elasticPolicy
    if el is None or policy is None or not current:
        return False
    leaving = sorted({p.node for p in current if p.node and p.node in ctx.options.gang.leaving_nodes
                      and not p.terminating})
    if leaving:
        el.cause = f"node {leaving[0]} marked for removal"
        _restart(ctx, spec_job, current, Reason.NODE_MARKED_FOR_REMOVAL,
                 f"{el.cause}: restarting the gang from its last checkpoint before the node goes")
        return True
    wanted = spec_workers(spec_job)
    if el.specReplicas != wanted:
        el.specReplicas = wanted
        new = _fitting(ctx, policy.minReplicas, wanted)
        if new != el.currentReplicas:
            return _resize(ctx, spec_job, current, new, f"spec.tfReplicaSpecs.Worker.replicas set to {wanted}")
    return _maybe_widen(ctx, spec_job, current)


def _maybe_widen(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> bool:
    el, policy = ctx.status.elastic, job.spec.elasticPolicy
    assert el is not None and policy is not None
    fits = ctx.options.gang.fits_workers
    if el.currentReplicas >= policy.maxReplicas or not ctx.is_true(C.RUNNING):
        el.widerSince = None
        return False
    # A cooldown shorter than the stable window shortens it (and the look-again period): the user asked to widen soon.
    stable = min(WIDEN_STABLE_SECONDS, policy.resizeCooldownSeconds)
    if fits is None or fits <= el.currentReplicas:
        el.widerSince = None
        # Room returning is no event of this job's: look again now and then while it runs narrower than max.
        ctx.requeue_at(ctx.now + timedelta(seconds=max(min(RECHECK_SECONDS, stable), MIN_RECHECK_SECONDS)))
        return False
    since = parse_time(el.widerSince)
    if since is None:
        el.widerSince, since = ctx.stamp, ctx.now
    last = parse_time(el.lastResizeTime) or parse_time(ctx.status.startTime) or ctx.now
    ready = max(since + timedelta(seconds=stable), last + timedelta(seconds=policy.resizeCooldownSeconds))
    if ctx.now < ready:
        ctx.requeue_at(ready)
        return False
    new = min(fits, policy.maxReplicas)
    held = int((ctx.now - since).total_seconds())
    return _resize(ctx, job, current, new, f"room for {new} workers for {held} s")


def _resize(ctx: Ctx, job: TFJob, current: list[ObservedPod], new: int, cause: str) -> bool:
    el = ctx.status.elastic
    assert el is not None
    old = el.currentReplicas
    message = _record(ctx, old, new, cause, transition=True)
    _restart(ctx, job, current, Reason.RESIZED, message + "; the workers save a checkpoint on SIGTERM, then the gang "
             f"restarts at {new} workers as attempt {ctx.status.restartCount + 1}")
    return True


def _restart(ctx: Ctx, job: TFJob, current: list[ObservedPod], reason: Reason, message: str) -> None:
    """Restart the gang as the next attempt, not a failure: its pods deleted gracefully (SIGTERM, the runtime
    saves within terminationGracePeriodSeconds)."""
    ctx.status.restartCount += 1
    ctx.set(C.RESTARTING, False, reason, message)  # so the transition below fires on every resize
    ctx.transition(C.RESTARTING, reason, message)
    ctx.set(C.RUNNING, False, Reason.RESTARTING, message)
    ctx.actions.extend(DeletePod(p.name) for p in current if not p.terminating)
    replica_statuses(ctx, at_width(job, ctx.status), [])  # the new attempt, at its width, has no pods yet


def _record(ctx: Ctx, old: int, new: int, cause: str, *, transition: bool) -> str:
    """Count a width change: the status, and (for a restart already announced) the Resized reason and Event."""
    el = ctx.status.elastic
    assert el is not None
    el.currentReplicas, el.resizes, el.lastResizeTime = new, el.resizes + 1, ctx.stamp
    el.widerSince, el.cause = None, None
    message = f"{old} → {new} workers: {cause}"
    if not transition:
        ctx.set(C.RESTARTING, True, Reason.RESIZED, message)
        ctx.event("Normal", Reason.RESIZED, message)
    return message


def note_cause(status: TFJobStatus, pod: ObservedPod, reason: Reason) -> None:
    """Remember why the gang restarts (a lost worker), for the message of the resize that may follow."""
    if status.elastic is None:
        return
    if reason == Reason.NODE_LOST and pod.node:
        status.elastic.cause = f"node {pod.node} lost"
    else:
        words = {Reason.POD_EVICTED: "evicted", Reason.POD_PREEMPTED: "preempted", Reason.POD_DELETED: "deleted"}
        status.elastic.cause = f"pod {pod.name} {words.get(reason) or f'failed ({reason.value})'}"
