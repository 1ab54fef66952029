"""Time and the end of a job: suspend, activeDeadlineSeconds, finishing (Succeeded or Failed), cleaning up
pods per cleanPodPolicy, pods stuck Terminating, and ttlSecondsAfterFinished."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from tfjob_operator.api import CleanPodPolicy, JobConditionType, TFJob, constants
from tfjob_operator.api.times import parse_time
from tfjob_operator.reconcile.actions import AnnotateJob, DeleteJob, DeletePod
from tfjob_operator.reconcile.conditions import Ctx, replica_statuses
from tfjob_operator.reconcile.observe import ObservedPod
from tfjob_operator.reconcile.reasons import Reason

C = JobConditionType


def finish(ctx: Ctx, ctype: JobConditionType, reason: Reason, message: str,
           event_type: Literal["Normal", "Warning"], observed: list[ObservedPod], policy: CleanPodPolicy) -> None:
    """The job Succeeded or Failed: the condition and its Event, the others false, its pods cleaned up."""
    ctx.transition(ctype, reason, message, event_type)
    for other in (C.RUNNING, C.RESTARTING, C.QUEUED):
        ctx.set(other, False, reason, message)
    ctx.status.completionTime = ctx.status.completionTime or ctx.stamp
    if ctype == C.SUCCEEDED and ctx.status.progress is not None:
        # The chief's endpoint is gone with it: say so rather than show the last figures read as current.
        ctx.status.progress = ctx.status.progress.model_copy(update={"summary": "done"})
    # The counts written with the outcome are those the clean-up leaves: no second write once the pods are gone.
    # Pods already terminating are going too (their phase, once killed, says nothing of the training).
    _uncount(ctx, _cleaned_up(ctx, observed, policy) + [p for p in observed if p.terminating])


def _cleaned_up(ctx: Ctx, observed: list[ObservedPod], policy: CleanPodPolicy) -> list[ObservedPod]:
    """`cleanup`, returning the pods it deletes that are not terminating yet (counted until they are gone)."""
    before = len(ctx.actions)
    cleanup(ctx, observed, policy)
    leaving = {a.name for a in ctx.actions[before:] if isinstance(a, DeletePod) and not a.force}
    return [p for p in observed if p.name in leaving and not p.terminating]


def _uncount(ctx: Ctx, pods: list[ObservedPod]) -> None:
    """Take these pods (of the current attempt) out of the status's pod counts and Workers column."""
    for pod in pods:
        counts = ctx.status.replicaStatuses.get(pod.rtype.value) if pod.rtype is not None else None
        if counts is None or pod.attempt != ctx.status.restartCount:
            continue
        counts.active = max(0, counts.active - pod.active)
        counts.ready = max(0, counts.ready - (pod.ready and not pod.terminating))  # as replica_statuses counts
        counts.succeeded = max(0, counts.succeeded - (pod.phase == "Succeeded"))
        counts.failed = max(0, counts.failed - (pod.phase in ("Failed", "Unknown")))
    if pods and ctx.status.workers and "/" in ctx.status.workers:
        ready = sum(s.ready for s in ctx.status.replicaStatuses.values())
        ctx.status.workers = f"{ready}/{ctx.status.workers.split('/', 1)[1]}"


def after_finish(ctx: Ctx, job: TFJob, observed: list[ObservedPod]) -> None:
    """A finished job: pods are cleaned up per cleanPodPolicy, never recreated; TTL deletes the job. Its counts
    are those the clean-up leaves, as written with the outcome: a pod it deleted is not counted while it
    terminates (killed, it turned Failed and then vanished: two more status writes when the plane was slow)."""
    leaving = {p.name for p in _cleaned_up(ctx, observed, job.spec.runPolicy.cleanPodPolicy)}
    replica_statuses(ctx, job, [p for p in observed if p.attempt == ctx.status.restartCount
                                and p.name not in leaving and not p.terminating])
    ttl_after_finished(ctx, job.spec.runPolicy.ttlSecondsAfterFinished)


def cleanup(ctx: Ctx, observed: list[ObservedPod], policy: CleanPodPolicy) -> None:
    """Delete a finished job's pods per cleanPodPolicy; pods stuck Terminating are forced after the timeout."""
    if policy == CleanPodPolicy.NONE:
        return
    for pod in observed:
        if pod.terminating:
            force_if_stuck(ctx, pod)
        elif policy == CleanPodPolicy.ALL or pod.phase in ("Pending", "Running", "Unknown"):
            ctx.actions.append(DeletePod(pod.name))


def ttl_after_finished(ctx: Ctx, ttl: int | None) -> None:
    """Delete the finished job once ttlSecondsAfterFinished passed; until then, look again at that instant."""
    completed = parse_time(ctx.status.completionTime)
    if ttl is None or completed is None:
        return
    expires = completed + timedelta(seconds=ttl)
    if ctx.now >= expires:
        ctx.actions.append(DeleteJob(f"ttlSecondsAfterFinished={ttl} passed since {ctx.status.completionTime}"))
    else:
        ctx.requeue_at(expires)


def force_if_stuck(ctx: Ctx, pod: ObservedPod) -> None:
    """Force-delete a pod still Terminating `terminating_timeout` seconds past its deletion deadline."""
    if pod.deletion_deadline is None:
        return
    limit = pod.deletion_deadline + timedelta(seconds=ctx.options.terminating_timeout)
    if ctx.now >= limit:
        ctx.actions.append(DeletePod(pod.name, force=True))
    else:
        ctx.requeue_at(limit)


def suspend(ctx: Ctx, job: TFJob, observed: list[ObservedPod]) -> None:
    """runPolicy.suspend: the pods deleted, the job kept, Suspended; the deadline's clock stops."""
    message = "spec.runPolicy.suspend is true: pods deleted, job kept (set it to false to resume)"
    ctx.transition(C.SUSPENDED, Reason.JOB_SUSPENDED, message)
    for other in (C.RUNNING, C.RESTARTING, C.QUEUED):
        ctx.set(other, False, Reason.JOB_SUSPENDED, message)
    # activeDeadlineSeconds counts running time: it starts again on resume.
    ctx.status.startTime = None
    for pod in observed:
        if pod.terminating:
            force_if_stuck(ctx, pod)
        else:
            ctx.actions.append(DeletePod(pod.name))
    if constants.ANNOTATION_GANG_REPLICAS in job.metadata.annotations:
        # While suspended the gang may be resized: the next creation records the new size.
        ctx.actions.insert(0, AnnotateJob({constants.ANNOTATION_GANG_REPLICAS: None}))
    replica_statuses(ctx, job, [p for p in observed if p.attempt == ctx.status.restartCount])


def deadline_passed(ctx: Ctx, job: TFJob, observed: list[ObservedPod]) -> bool:
    """Fail the job once activeDeadlineSeconds passed since startTime; until then, look again at that instant."""
    limit = job.spec.runPolicy.activeDeadlineSeconds
    started = parse_time(ctx.status.startTime)
    if limit is None or started is None:
        return False
    deadline = started + timedelta(seconds=limit)
    if ctx.now < deadline:
        ctx.requeue_at(deadline)
        return False
    message = f"the job ran longer than activeDeadlineSeconds={limit} (started {ctx.status.startTime})"
    finish(ctx, C.FAILED, Reason.DEADLINE_EXCEEDED, message, "Warning", observed, job.spec.runPolicy.cleanPodPolicy)
    return True
