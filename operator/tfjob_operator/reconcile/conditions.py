"""The status being built by one reconcile: conditions set and transitioned (each change an Event), actions
collected, the earliest time to look again, and the pod counts per replica type."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from tfjob_operator.api import JobCondition, JobConditionType, ReplicaStatus, TFJob, TFJobStatus
from tfjob_operator.api.times import format_time
from tfjob_operator.reconcile.actions import Action, EmitEvent
from tfjob_operator.reconcile.inputs import ReconcileOptions
from tfjob_operator.reconcile.observe import ObservedPod
from tfjob_operator.reconcile.reasons import Reason


class Ctx:
    """Mutable scratch state of one reconcile call: the status being built, actions, requeue deadline."""

    def __init__(self, status: TFJobStatus, now: datetime, options: ReconcileOptions) -> None:
        self.status = status
        self.now = now
        self.options = options
        self.actions: list[Action] = []
        self.requeue: float | None = None

    @property
    def stamp(self) -> str:
        return format_time(self.now)

    def requeue_at(self, when: datetime) -> None:
        seconds = max((when - self.now).total_seconds(), 0.0)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def condition(self, ctype: JobConditionType) -> JobCondition | None:
        return next((c for c in self.status.conditions if c.type == ctype), None)

    def is_true(self, ctype: JobConditionType) -> bool:
        cond = self.condition(ctype)
        return cond is not None and cond.status == "True"

    def set(self, ctype: JobConditionType, true: bool, reason: Reason, message: str) -> bool:
        """Set a condition; True if its status changed. A condition becoming true moves last (it is the state)."""
        value = "True" if true else "False"
        cond = self.condition(ctype)
        if cond is None:
            if not true:
                return False
            cond = JobCondition(type=ctype, status=value, reason=reason, message=message,
                                lastUpdateTime=self.stamp, lastTransitionTime=self.stamp)
            self.status.conditions.append(cond)
            return True
        if cond.status == value:
            if (cond.reason, cond.message) != (reason, message):
                cond.reason, cond.message, cond.lastUpdateTime = reason, message, self.stamp
            return False
        cond.status, cond.reason, cond.message = value, reason, message
        cond.lastUpdateTime = cond.lastTransitionTime = self.stamp
        if true:
            self.status.conditions.remove(cond)
            self.status.conditions.append(cond)
        return True

    def transition(self, ctype: JobConditionType, reason: Reason, message: str,
                   event_type: Literal["Normal", "Warning"] = "Normal") -> bool:
        """Make a condition true and, if that is a change, post an Event saying so."""
        changed = self.set(ctype, True, reason, message)
        if changed:
            self.event(event_type, reason, message, ctype)
        return changed

    def event(self, event_type: Literal["Normal", "Warning"], reason: Reason, message: str,
              condition: JobConditionType | None = None) -> None:
        self.actions.append(EmitEvent(event_type, reason, message, condition))


def replica_statuses(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> None:
    """Pod counts per replica type and the Workers column (ready/all) from the current attempt's pods."""
    statuses: dict[str, ReplicaStatus] = {}
    for rtype, _ in job.replica_specs():
        mine = [p for p in current if p.rtype == rtype]
        statuses[rtype.value] = ReplicaStatus(
            active=sum(p.active for p in mine),
            ready=sum(p.ready and not p.terminating for p in mine),
            succeeded=sum(p.phase == "Succeeded" for p in mine),
            failed=sum(p.phase in ("Failed", "Unknown") for p in mine),
        )
    ctx.status.replicaStatuses = statuses
    ready = sum(s.ready for s in statuses.values())
    ctx.status.workers = f"{ready}/{job.total_replicas()}"


#: Pod names a condition message lists per state before it says "and N more".
NAMES_SHOWN = 3


def pods_message(job: TFJob, current: list[ObservedPod], attempt: int) -> str:
    """How the attempt's pods are, in one line: "all 4 pods of attempt 0 are running", or "1 of 4 pods of attempt
    0 are running; 3 failed: j-worker-1, j-worker-2, j-worker-3" (states in the order a job goes through them)."""
    total = job.total_replicas()
    running = [p for p in current if p.phase == "Running" and not p.terminating]
    if len(running) == total:
        return f"all {total} pods of attempt {attempt} are running"
    others: dict[str, list[str]] = {}
    for p in current:
        if p.phase == "Running" and not p.terminating:
            continue
        state = "terminating" if p.terminating else "failed" if p.failed else (p.phase or "pending").lower()
        others.setdefault(state, []).append(p.name)
    missing = total - len(current)
    parts = [f"{len(names)} {state}: " + ", ".join(names[:NAMES_SHOWN])
             + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")
             for state in ("failed", "terminating", "succeeded", "pending") if (names := others.get(state))]
    parts += [f"{missing} not created yet"] if missing > 0 else []
    return f"{len(running)} of {total} pods of attempt {attempt} are running; " + "; ".join(parts)


def refresh_running(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> None:
    """A job still Running says how its pods are now, not how they were when they all ran: a pod that failed,
    finished or went away since changes the message (and the reason, NotAllPodsRunning, until they all run
    again). A condition another rule wrote (a refused resize) is left alone."""
    cond = ctx.condition(JobConditionType.RUNNING)
    if cond is None or cond.status != "True" or cond.reason not in (Reason.ALL_PODS_RUNNING,
                                                                    Reason.NOT_ALL_PODS_RUNNING):
        return
    message = pods_message(job, current, ctx.status.restartCount)
    all_running = message.startswith("all ")
    ctx.set(JobConditionType.RUNNING, True, Reason.ALL_PODS_RUNNING if all_running else Reason.NOT_ALL_PODS_RUNNING,
            message)
