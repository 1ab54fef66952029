"""Which worker of a stalled gang stalled, and which only waited for it.

In a synchronous gang (MultiWorkerMirroredStrategy) one hung worker stops every other at the next collective:
all stop after the same step, and each one's stall watchdog exits 202. Which exits first is chance, and
progress times cannot tell either (the one that hung often made its last progress a millisecond after the
others). Each stalled worker says where it was blocked (`tfjob_worker.stall.StallRecord`, in its termination
message): in its own code, or inside TensorFlow waiting. So the operator waits, a bounded while, for the verdict
of every training peer still up, then blames the worker stopped in its own code (at equal verdicts the one whose
progress stopped first: the lowest step, then the earliest time) and names the others as only waiting for it.
When none was stopped in its own code, it says that it cannot tell (a collective, the input pipeline or a device
hung). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

from tfjob_operator.api import ReplicaType
from tfjob_operator.reconcile.conditions import Ctx
from tfjob_operator.reconcile.observe import ObservedPod
from tfjob_worker import blocked

#: How long after a gang's first stalled exit the operator waits for its training peers' verdicts. Their watchdogs
#: fire within a second or two of each other (the same timeout, from the same stopped step).
VERDICT_WAIT_SECONDS = 10


def _gang(pod: ObservedPod) -> bool:
    return pod.rtype in (ReplicaType.CHIEF, ReplicaType.WORKER)


def verdicts_pending(ctx: Ctx, stalled: Sequence[ObservedPod], current: Sequence[ObservedPod]) -> bool:
    """A worker stalled in a synchronous gang whose other pods are still up: wait (bounded) for their verdicts."""
    if not any(p.stall is not None and p.stall.peers > 1 and _gang(p) for p in stalled):
        return False
    names = {p.name for p in stalled}
    if not any(_gang(p) and p.name not in names and not p.failed and not p.terminating for p in current):
        return False
    first = min((p.finished_at for p in stalled if p.finished_at), default=ctx.now)
    until = first + timedelta(seconds=VERDICT_WAIT_SECONDS)
    if ctx.now >= until:
        return False
    ctx.requeue_at(until)
    return True


def _own(pod: ObservedPod) -> bool:
    return pod.stall is not None and pod.stall.blocked == blocked.OWN


def _order(pod: ObservedPod) -> tuple[bool, float, float, float, str]:
    """Stopped in its own code first; then the one whose progress stopped first; then the first to exit."""
    record = pod.stall
    step = float(record.global_step) if record is not None else math.inf
    at = record.last_progress if record is not None and record.last_progress is not None else math.inf
    exited = pod.finished_at.timestamp() if pod.finished_at else math.inf
    return (not _own(pod), step, at, exited, pod.name)


def culprit(stalled: Sequence[ObservedPod]) -> ObservedPod:
    """The stalled pod to blame."""
    return min(stalled, key=_order)


def describe(pod: ObservedPod) -> str:
    """One stalled pod: where it stopped, after which step."""
    record = pod.stall
    where = record.describe() if record is not None else ""
    after = f" after step {record.global_step}" if record is not None else ""
    return (f"pod {pod.label} stalled{' ' + where if where else ''}{after} (exit 202: no training progress within "
            "runPolicy.stallTimeoutSeconds; its log shows where it hung)")


def _names(pods: Sequence[ObservedPod]) -> str:
    return ", ".join(p.name for p in sorted(pods, key=lambda p: p.name))


def message(stalled: Sequence[ObservedPod]) -> str:
    """Why the gang restarts after a stall: who stalled, and who only waited for it."""
    cause = culprit(stalled)
    others = [p for p in stalled if p is not cause]
    text = describe(cause)
    if not others:
        return text
    waited = [p for p in others if p.stall is not None and p.stall.blocked == blocked.TENSORFLOW]
    own = [p for p in others if _own(p)]
    unknown = [p for p in others if p not in waited and p not in own]
    if _own(cause):
        if waited:
            verb = "was" if len(waited) == 1 else "were"
            text += f"; {_names(waited)} {verb} only waiting for it, inside TensorFlow"
        text += "".join(f"; {p.name} also stalled {p.stall.describe()}" for p in own if p.stall is not None)
    elif waited:
        text += (f"; so did {_names(waited)}: none was stopped in its own code, all waited inside TensorFlow (a "
                 "collective, the input pipeline or a device hung), so which one held the others cannot be told; "
                 "this one's progress stopped first")
    if unknown:
        text += f"; {_names(unknown)} stalled too"
    return text
