"""What the controller does when reconciling a job raises something unexpected (a bug, or a spec no check
foresaw): retry a few times with back-off, then tell the job's owner instead of retrying forever.

API errors (`KubeError`: outages, conflicts, throttling) are not counted here: they are the cluster's, not the
job's, and are retried with back-off for as long as they last. The authorizer's refusal of the operator's own
request (`KubeError.not_authorized`: its RBAC lacks a rule) waits longer between tries (`not_authorized_delay`):
nothing changes until an admin grants the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from tfjob_operator.api import RunPolicy
from tfjob_operator.reconcile import Decision, Reason, fail_job

#: Unexpected errors in a row after which the job is failed (with back-off 1, 2, 4, 8 s that is ~15 s).
MAX_UNEXPECTED_ERRORS = 5
#: Longest wait between two retries of a job whose request the authorizer refused.
NOT_AUTHORIZED_MAX_BACKOFF = 60.0
#: Condition reason (and Event reason) of a job the operator gave up on.
REASON: Final = Reason.RECONCILE_ERROR


def gives_up(failures_in_a_row: int) -> bool:
    """Whether this many unexpected errors in a row are enough to stop retrying and fail the job."""
    return failures_in_a_row >= MAX_UNEXPECTED_ERRORS


def give_up(obj: Mapping[str, Any], error: BaseException, failures_in_a_row: int, now: datetime,
            pods: Sequence[Mapping[str, Any]] = (), run_policy: RunPolicy | None = None) -> Decision:
    """The job Failed with reason ReconcileError, the error named, and what to do about it; its pods cleaned up
    per its cleanPodPolicy like any Failed job's (`fail_job`)."""
    text = " ".join(str(error).split())[:300] or "(no message)"
    message = (f"the operator could not reconcile this job ({failures_in_a_row} attempts): "
               f"{type(error).__name__}: {text}. This is an operator bug: report it with the operator's log; "
               "delete and resubmit the job once fixed")
    return fail_job(obj, REASON, message, now, pods, run_policy)


def not_authorized_delay(failures_in_a_row: int, delay: float) -> float:
    """Seconds before retrying a job whose request the authorizer refused: 2, 4, 8, ... 60 (never less than the
    queue's own back-off `delay`)."""
    return max(delay, min(NOT_AUTHORIZED_MAX_BACKOFF, 2.0 ** failures_in_a_row))
