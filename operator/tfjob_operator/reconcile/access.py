"""The operator's own missing permission, told on the job: when the API server's authorizer refused one of the
operator's requests for it (the controller retries with back-off and posts the Warning Event), the condition that
holds the job's state says what was refused and what to do; once the request goes through, it says so."""

from __future__ import annotations

from tfjob_operator.reconcile.conditions import Ctx
from tfjob_operator.reconcile.reasons import Reason

ALLOWED_AGAIN = "the operator's requests for this job are allowed again"


def note_not_authorized(ctx: Ctx, refusal: str | None) -> None:
    """`refusal` (`kube.not_authorized`'s line) on the state condition; None: a refusal written earlier is over."""
    true = [c for c in ctx.status.conditions if c.status == "True"]
    if refusal is None:
        for cond in true:
            if cond.reason == Reason.OPERATOR_FORBIDDEN:
                cond.reason, cond.message, cond.lastUpdateTime = Reason.OPERATOR_PERMITTED, ALLOWED_AGAIN, ctx.stamp
        return
    if true and true[-1].message != refusal:
        true[-1].reason, true[-1].message, true[-1].lastUpdateTime = Reason.OPERATOR_FORBIDDEN, refusal, ctx.stamp
