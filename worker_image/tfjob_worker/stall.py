"""The stall watchdog's rule: when a trainer that runs but no longer trains should be stopped. Pure.

A hung collective (a peer's NIC, a wedged GPU, a data pipeline that never yields) holds the gang's
accelerators and makes no progress; nothing fails. The supervisor applies this rule to its trainer's
reports and exits `exit_codes.STALLED` (retryable): the operator restarts the gang from the last backup.
"""

from __future__ import annotations

from dataclasses import dataclass

from .reports import Report

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
    activity counter last moved. Roles that run no training steps (ps, evaluator) never stall.
    """
    if not policy.enabled or report is None or not report.started or not report.trains or started_at is None:
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
