"""The stall watchdog's rule: when a trainer that runs but no longer trains should be stopped. Pure.

A hung collective (a peer's NIC, a wedged GPU, a data pipeline that never yields) holds the gang's
accelerators and makes no progress; nothing fails. The supervisor applies this rule to its trainer's
reports and exits `exit_codes.STALLED` (retryable): the operator restarts the gang from the last backup.

In a synchronous gang every worker stalls when one does. Each says where it was blocked (`blocked`): in its
own code, or inside TensorFlow waiting; the supervisor leaves that, with its last step, as a `StallRecord` line in
the container's termination message, and the operator blames the worker stopped in its own code, naming the
others as only waiting for it (`tfjob_operator.reconcile.stalls`). This module is that contract: the operator
imports it (no TensorFlow).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from . import blocked
from .reports import Report

#: The termination message's line that carries the record, after the supervisor's error line.
RECORD_PREFIX = "[tfjob] stall "

#: Default allowance for the first training step after start-up (graph tracing, XLA compilation, restore).
DEFAULT_FIRST_STEP_GRACE = 600.0


@dataclass(frozen=True)
class StallPolicy:
    """`timeout` seconds without progress is a stall (0 = watchdog off); the first step gets `first_step_grace`."""

    timeout: float = 0.0
    first_step_grace: float = DEFAULT_FIRST_STEP_GRACE

    @property
    def enabled(self) -> bool:
        return self.timeout > 0


def stall_reason(policy: StallPolicy, report: Report | None, now: float, started_at: float | None,
                 progress_at: float | None) -> str | None:
    """Why the trainer counts as stalled at `now`, or None.

    `started_at`: when start-up ended (supervisor's monotonic clock); `progress_at`: when the report's
    activity counter last moved. Roles that run no training steps (ps, evaluator) never stall, and nor does a
    trainer past its last step (evaluating on the test split, exporting the model).
    """
    if (not policy.enabled or report is None or not report.started or not report.trains or report.finishing
            or started_at is None):
        return None
    if report.steps == 0:
        allowance = max(policy.first_step_grace, policy.timeout)
        if now - started_at >= allowance:
            return f"no training step within {allowance:g}s of start-up (first-step grace)"
        return None
    since = progress_at if progress_at is not None else started_at
    if now - since >= policy.timeout:
        return (f"no training progress for {now - since:.0f}s (stall timeout {policy.timeout:g}s; "
                f"last at epoch {report.epoch} step {report.global_step})")
    return None


@dataclass(frozen=True)
class StallRecord:
    """What one stalled worker says of itself."""

    #: blocked.OWN (its own code stopped), blocked.TENSORFLOW (it waited inside TensorFlow), "" (not known).
    blocked: str
    #: For blocked.OWN: `dir/file.py:47 in function`.
    where: str
    #: Its last completed step of the job, and when (Unix seconds) it last made progress.
    global_step: int
    last_progress: float | None
    #: Trainers of its synchronous gang (1: it waits for nobody).
    peers: int

    @classmethod
    def of(cls, report: Report) -> StallRecord:
        return cls(report.blocked, report.blocked_at, report.global_step, report.last_progress, report.world_size)

    def line(self) -> str:
        return RECORD_PREFIX + json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def parse(cls, message: str) -> StallRecord | None:
        """The record in a termination message (its last record line), or None."""
        for line in reversed(message.splitlines()):
            if line.startswith(RECORD_PREFIX):
                try:
                    data = json.loads(line[len(RECORD_PREFIX):])
                    return cls(str(data["blocked"]), str(data["where"]), int(data["global_step"]),
                               float(data["last_progress"]) if data.get("last_progress") is not None else None,
                               int(data["peers"]))
                except (ValueError, KeyError, TypeError):
                    return None
        return None

    def describe(self) -> str:
        """`in its own code at user_model.py:47 in stall_here`, `waiting inside TensorFlow (...)`, or ""."""
        if self.blocked == blocked.OWN:
            return f"in its own code at {self.where}"
        if self.blocked == blocked.TENSORFLOW:
            return "waiting inside TensorFlow (for its peers in a collective, or its input pipeline or device)"
        return ""
