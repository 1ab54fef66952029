"""What a failed pod means: a disruption (never counted), a retryable failure (counts towards backoffLimit) or a
permanent one (fails the job); a chief/worker failure restarts the whole gang as the next attempt, a PS or
evaluator pod restarts alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from tfjob_operator.api import JobConditionType, ReplicaType, RestartPolicy, TFJob, TFJobStatus
from tfjob_operator.api.observed import owned_by
from tfjob_operator.reconcile import elastic, stalls
from tfjob_operator.reconcile.actions import DeletePod
from tfjob_operator.reconcile.conditions import Ctx, replica_statuses
from tfjob_operator.reconcile.diagnosis import explain
from tfjob_operator.reconcile.lifecycle import finish
from tfjob_operator.reconcile.observe import ObservedPod, observe_pod
from tfjob_operator.reconcile.reasons import Reason
from tfjob_operator.reconcile.render import pod_name
from tfjob_worker import exit_codes

C = JobConditionType


@dataclass(frozen=True)
class Failure:
    """A failed pod, what kind of failure it is, and the reason and message the job records for it."""

    pod: ObservedPod
    #: disruption (never counts towards backoffLimit), retryable (counts) or permanent (fails the job).
    kind: Literal["disruption", "retryable", "permanent"]
    reason: Reason
    message: str

    @property
    def gang(self) -> bool:
        return self.pod.rtype in (ReplicaType.CHIEF, ReplicaType.WORKER)

    @property
    def consequence(self) -> bool:
        """A peer's 'peer lost' (or start-up timeout) exit: the effect of another pod's failure, never its cause."""
        return self.kind != "disruption" and self.pod.exit_code in exit_codes.PEER_FAILURE

    def order(self) -> tuple[bool, float, int, str]:
        """Causes before consequences (a peer's 'peer lost' exit, even an earlier one: a lost node shows only
        after its peers noticed), then earliest first; at equal times a disruption, then a permanent failure."""
        t = self.pod.finished_at.timestamp() if self.pod.finished_at else math.inf
        rank = 0 if self.kind == "disruption" else 1 if self.kind == "permanent" else 2
        return (self.consequence, t, rank, self.pod.name)


def _describe_exit(pod: ObservedPod) -> str:
    code = pod.exit_code
    meaning = f" ({exit_codes.MEANINGS[code]})" if code in exit_codes.MEANINGS else ""
    if pod.exit_reason == "OOMKilled":  # the runtime saw the kernel's OOM killer: that, not the signal, is the news
        meaning = " (OOMKilled)"
    return f"pod {pod.label} exited with code {code}{meaning}{explain(pod.exit_message, code, pod.exit_reason)}"


def classify(pod: ObservedPod, policy: RestartPolicy) -> Failure:
    """Why a pod failed and what that means under its replica type's restartPolicy."""
    if pod.disruption:
        detail = f": {pod.disruption_message}" if pod.disruption_message else ""
        where = f" on node {pod.node}" if pod.disruption == Reason.NODE_LOST and pod.node else ""
        words = {Reason.POD_EVICTED: "was evicted", Reason.POD_PREEMPTED: "was preempted",
                 Reason.NODE_LOST: "lost its node"}
        text = f"pod {pod.label} {words.get(pod.disruption, 'was disrupted')}{where}{detail}"
        return Failure(pod, "disruption", pod.disruption, text)
    if policy == RestartPolicy.NEVER:
        what = _describe_exit(pod) if pod.exit_code is not None else f"pod {pod.label} failed"
        return Failure(pod, "permanent", Reason.RESTART_POLICY_NEVER, f"{what}; restartPolicy Never")
    if policy != RestartPolicy.NEVER and pod.exit_code == exit_codes.STALLED:
        return Failure(pod, "retryable", Reason.TRAINING_STALLED, stalls.describe(pod))
    if policy == RestartPolicy.EXIT_CODE:
        if pod.exit_code is not None and exit_codes.is_retryable(pod.exit_code):
            return Failure(pod, "retryable", Reason.RETRYABLE_EXIT_CODE, _describe_exit(pod))
        if pod.exit_code is None:
            return Failure(pod, "retryable", Reason.POD_FAILED, f"pod {pod.label} failed without an exit code")
        return Failure(pod, "permanent", Reason.NON_RETRYABLE_EXIT_CODE,
                       f"{_describe_exit(pod)}; under restartPolicy ExitCode codes 1-127 are permanent")
    what = _describe_exit(pod) if pod.exit_code is not None else f"pod {pod.label} failed"
    return Failure(pod, "retryable", Reason.POD_FAILED, f"{what}; restartPolicy {policy.value}")


def backoff_used(status: TFJobStatus, current: Sequence[ObservedPod]) -> int:
    """Failures that count towards runPolicy.backoffLimit: gang restarts caused by failures, plus in-place
    container restarts (restartPolicy OnFailure/Always) of the current attempt's pods, as Kubeflow sums them."""
    return status.failureRestarts + sum(p.restarts for p in current if not p.terminating)


def _backoff_exceeded(ctx: Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod]) -> bool:
    """The one backoffLimit rule: the job fails once its failures exceed the limit (limit N allows N retries).
    Here for in-place restarts; `_restart_gang` applies it to a failure that would restart the gang."""
    limit = job.spec.runPolicy.backoffLimit
    restarted = [p for p in current if p.restarts and not p.terminating]
    if limit is None or not restarted or backoff_used(ctx.status, current) <= limit:
        return False
    worst = max(restarted, key=lambda p: p.restarts)
    times = "once" if worst.restarts == 1 else f"{worst.restarts} times"
    message = (f"pod {worst.label} restarted in place {times}"
               + (f", last {worst.last_restart}" if worst.last_restart else "")
               + f"; backoffLimit {limit} exceeded ({backoff_used(ctx.status, current)} failures: "
               f"{sum(p.restarts for p in restarted)} in-place restarts, {ctx.status.failureRestarts} gang restarts)")
    finish(ctx, C.FAILED, Reason.BACKOFF_LIMIT_EXCEEDED, message, "Warning", observed,
           job.spec.runPolicy.cleanPodPolicy)
    return True


def handle_failures(ctx: Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod]) -> bool:
    """Handle failed pods of the current attempt, earliest first; True if the job stopped or restarts."""
    if _backoff_exceeded(ctx, job, current, observed):
        return True
    failures = [classify(p, job.spec.tfReplicaSpecs[p.rtype].restartPolicy)
                for p in current if p.failed and p.rtype in job.spec.tfReplicaSpecs]
    if ctx.is_true(C.RUNNING):
        failures.extend(_vanished(ctx, job, current))
    if elastic.is_elastic(job) and _cause_pending(ctx, failures, current):
        return True
    stalled = [f for f in failures if f.reason == Reason.TRAINING_STALLED and f.gang]
    if stalled and stalls.verdicts_pending(ctx, [f.pod for f in stalled], current):
        return True
    if len(stalled) > 1:  # one gang stall: the worker that stalled on its own, naming those that waited for it
        cause = stalls.culprit([f.pod for f in stalled])
        failures = [f for f in failures if f not in stalled] + [
            Failure(cause, "retryable", Reason.TRAINING_STALLED, stalls.message([f.pod for f in stalled]))]
    for failure in sorted(failures, key=Failure.order):
        if failure.kind == "permanent":
            finish(ctx, C.FAILED, failure.reason, failure.message, "Warning", observed,
                   job.spec.runPolicy.cleanPodPolicy)
            return True
        if failure.gang and not (job.spec.enableDynamicWorker and failure.pod.rtype == ReplicaType.WORKER):
            return _restart_gang(ctx, job, current, observed, failure)
        _restart_alone(ctx, failure)
    return False


#: An elastic gang whose only failures are peers' 'peer lost' exits waits for the cause to show (a peer evicted,
#: preempted, deleted, crashed, or its node found lost): its width, and whether backoffLimit counts, follow it. A lost
#: node shows last: after the cluster's node-monitor-grace-period (`ReconcileOptions.node_monitor_grace`), when the
#: node turns unreachable and the taint manager evicts the gang's pods (they tolerate that taint 0 s: render.py).
#: So the wait is that grace plus this much for the eviction and the watches to reach the operator.
PEER_CAUSE_SLACK_SECONDS = 10.0


def peer_cause_wait(node_monitor_grace: float) -> float:
    """Seconds an elastic gang waits for the cause of its peers' 'peer lost' exits (docs/elastic.md, the timeline)."""
    return node_monitor_grace + PEER_CAUSE_SLACK_SECONDS


def _cause_pending(ctx: Ctx, failures: list[Failure], current: list[ObservedPod]) -> bool:
    """Only consequences so far, and a gang pod still up as the API says: wait (bounded) for its fate."""
    gang = [f for f in failures if f.gang]
    if not gang or not all(f.consequence for f in gang):
        return False
    failed = {f.pod.name for f in gang}
    if not any(p.rtype in (ReplicaType.CHIEF, ReplicaType.WORKER) and p.name not in failed and not p.failed
               and not p.terminating for p in current):
        return False
    first = min((f.pod.finished_at for f in gang if f.pod.finished_at), default=ctx.now)
    until = first + timedelta(seconds=peer_cause_wait(ctx.options.node_monitor_grace))
    if ctx.now >= until:
        return False
    ctx.requeue_at(until)
    return True


def _vanished(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> list[Failure]:
    """Chief/worker pods of a gang that was all running and is now missing: deleted behind our back, or with a
    cause on them that their last body says (`ReconcileOptions.departed`: preempted, evicted, node lost)."""
    present = {p.name for p in current}
    departed = [observe_pod(body) for body in ctx.options.departed.values()
                if owned_by(body, job.name, job.metadata.uid)]
    causes = {p.name: p for p in departed if p.attempt == ctx.status.restartCount and p.disruption}
    out = []
    for rtype, spec in job.replica_specs():
        if rtype not in (ReplicaType.CHIEF, ReplicaType.WORKER) or (
                rtype == ReplicaType.WORKER and job.spec.enableDynamicWorker):
            continue  # a dynamic worker deleted is created again alone
        for i in range(spec.replicas):
            name = pod_name(job.name, rtype, i)
            if name in present:
                continue
            if name in causes:
                out.append(classify(causes[name], spec.restartPolicy))
                continue
            pod = ObservedPod(name, rtype, i, -1, "Unknown", True, None, False, None, None, None,
                              Reason.POD_DELETED, "", None)
            message = f"pod {name} ({rtype.value} {i}) was deleted"
            out.append(Failure(pod, "disruption", Reason.POD_DELETED, message))
    return out


def _restart_gang(ctx: Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod],
                  failure: Failure) -> bool:
    """Restart the whole gang as the next attempt (its pods deleted), or fail the job past backoffLimit."""
    status = ctx.status
    limit = job.spec.runPolicy.backoffLimit
    used = backoff_used(status, current)
    if failure.kind == "retryable" and limit is not None and used >= limit:
        message = f"{failure.message}; backoffLimit {limit} reached ({used} failures retried already)"
        finish(ctx, C.FAILED, Reason.BACKOFF_LIMIT_EXCEEDED, message, "Warning", observed,
               job.spec.runPolicy.cleanPodPolicy)
        return True
    status.restartCount += 1
    if failure.kind == "retryable":
        status.failureRestarts += 1
    elastic.note_cause(status, failure.pod, failure.reason)
    budget = f"{status.failureRestarts}/{limit}" if limit is not None else f"{status.failureRestarts}"
    message = (f"{failure.message}; restarting the whole gang as attempt {status.restartCount} "
               f"(restarts {status.restartCount}, failure restarts {budget})")
    ctx.set(C.RESTARTING, False, failure.reason, message)  # so the event below fires on every restart
    ctx.set(C.RESTARTING, True, failure.reason, message)
    ctx.event("Warning", failure.reason, message, C.RESTARTING)
    ctx.set(C.RUNNING, False, Reason.RESTARTING, message)
    ctx.actions.extend(DeletePod(p.name) for p in current if not p.terminating)
    replica_statuses(ctx, job, [])  # the new attempt has no pods yet
    return True


def _restart_alone(ctx: Ctx, failure: Failure) -> None:
    pod = failure.pod
    if not pod.terminating:
        ctx.actions.append(DeletePod(pod.name))
        ctx.event("Warning", Reason.REPLICA_RESTARTING, f"{failure.message}; restarting this pod alone")
