"""A `replicas` change while the gang runs, for `kubeflow.org/v1` jobs: refused at run time, the gang kept at the
size its pods record (`tfjob.dev/gang-replicas`), Worker aside under enableDynamicWorker. `tfjob.dev/v1` jobs
never get here: their CRD refuses the change at apply time (a CEL transition rule,
`api.REPLICAS_FIXED_WHILE_RUNNING`), except an elastic job's Worker width (`elastic`); Kubeflow's CRD is vendored
as published, so it cannot carry that rule."""

from __future__ import annotations

import json

from tfjob_operator.api import ReplicaType, TFJob, TFJobStatus, apigroups, constants
from tfjob_operator.reconcile import elastic
from tfjob_operator.reconcile.conditions import Ctx
from tfjob_operator.reconcile.reasons import Reason


def recorded_replicas(job: TFJob) -> dict[str, int] | None:
    """The gang size its pods were created with, as recorded on the job (None when not recorded)."""
    raw = job.metadata.annotations.get(constants.ANNOTATION_GANG_REPLICAS)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else None


def spec_replicas(job: TFJob) -> dict[str, int]:
    """Replicas per replica type as the spec asks, e.g. {"Worker": 4}: what each pod records."""
    return {rtype.value: spec.replicas for rtype, spec in job.replica_specs()}


def effective_job(job: TFJob, status: TFJobStatus | None = None) -> tuple[TFJob, str | None]:
    """The job as its gang runs and, if the spec differs in a way that is refused, why. `kubeflow.org/v1` jobs:
    at the size the gang was created with (Worker follows the spec under enableDynamicWorker); an elastic
    `tfjob.dev/v1` job: its Worker at the width the status records (`elastic`); other `tfjob.dev/v1` jobs as
    they are (their replicas cannot change while they run)."""
    if job.apiVersion != apigroups.KUBEFLOW.api_version:
        return elastic.at_width(job, status), None
    recorded = recorded_replicas(job)
    wanted = spec_replicas(job)
    if recorded is not None and job.spec.enableDynamicWorker:
        # Dynamic workers: the Worker count follows the spec, workers are added or removed one by one.
        recorded = {**recorded, ReplicaType.WORKER.value: wanted.get(ReplicaType.WORKER.value, 0)}
    if recorded is None or recorded == wanted:
        return job, None
    changes = ", ".join(
        f"{t}.replicas {recorded.get(t, 0)}→{wanted.get(t, 0)}"
        for t in sorted(set(recorded) | set(wanted))
        if recorded.get(t, 0) != wanted.get(t, 0)
    )
    message = (f"replicas change refused ({changes}): MultiWorkerMirroredStrategy cannot resize a running gang; "
               f"the job keeps its {sum(recorded.values())} pods "
               "(suspend the job, then resume it, to apply the change)")
    effective = job.model_copy(deep=True)
    for rtype, spec in effective.replica_specs():
        spec.replicas = recorded.get(rtype.value, spec.replicas)
    return effective, message


def refuse_resize(ctx: Ctx, refusal: str | None, announced: bool) -> None:
    """A replicas change on a running gang is refused: the state condition says so, and one Warning Event."""
    true = [c for c in ctx.status.conditions if c.status == "True"]
    if refusal is None:
        for cond in true:
            if cond.reason == Reason.REPLICAS_CHANGE_REFUSED:
                cond.reason = Reason.REPLICAS_CHANGE_REVERTED
                cond.message = "spec replicas match the running gang again"
        return
    if not announced:
        ctx.event("Warning", Reason.REPLICAS_CHANGE_REFUSED, refusal)
    if not true or true[-1].message == refusal:
        return
    for cond in true:
        if cond.reason == Reason.REPLICAS_CHANGE_REFUSED:
            cond.reason = Reason.REPLICAS_CHANGE_SUPERSEDED
    true[-1].reason, true[-1].message, true[-1].lastUpdateTime = Reason.REPLICAS_CHANGE_REFUSED, refusal, ctx.stamp
