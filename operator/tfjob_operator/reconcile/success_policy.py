"""When a TFJob has succeeded: Kubeflow's success rule (the chief, else worker 0, or every worker)."""

from __future__ import annotations

from tfjob_operator.api import JobConditionType, ReplicaType, SuccessPolicy, TFJob
from tfjob_operator.reconcile.chief_report import final_progress
from tfjob_operator.reconcile.conditions import Ctx
from tfjob_operator.reconcile.lifecycle import finish
from tfjob_operator.reconcile.observe import ObservedPod
from tfjob_operator.reconcile.reasons import Reason
from tfjob_operator.reconcile.render import chief_pod_name, pod_name

C = JobConditionType


def succeeded(ctx: Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod]) -> bool:
    """Success as Kubeflow decides it: the chief when there is one (successPolicy AllWorkers only applies without
    a chief); else worker 0, or every worker under AllWorkers. The deciding pod's exit 0 wins over other pods'
    failures seen at the same time: training finished and the chief saved its work (the message names them)."""
    by_name = {p.name: p for p in current}
    if job.spec.successPolicy == SuccessPolicy.ALL_WORKERS and not job.has_chief():
        names = [pod_name(job.name, ReplicaType.WORKER, i) for i in range(job.spec.tfReplicaSpecs[
            ReplicaType.WORKER].replicas)]
        if not all(n in by_name and by_name[n].phase == "Succeeded" for n in names):
            return False
        reason, message = Reason.ALL_WORKERS_SUCCEEDED, f"all {len(names)} workers exited 0"
    else:
        chief = by_name.get(chief_pod_name(job))
        if chief is None or chief.phase != "Succeeded":
            return False
        who = "chief" if chief.rtype == ReplicaType.CHIEF else "worker 0"
        reason = Reason.CHIEF_SUCCEEDED if chief.rtype == ReplicaType.CHIEF else Reason.WORKER_SUCCEEDED
        message = f"the {who} ({chief.name}) exited 0"
        if job.spec.successPolicy == SuccessPolicy.ALL_WORKERS:
            message += " (successPolicy AllWorkers does not apply to a job with a Chief: the chief decides)"
    failed = sorted(p.name for p in current if p.failed)
    if failed:
        message += f"; {', '.join(failed)} failed, which does not change the outcome"
    deciding = by_name.get(chief_pod_name(job))
    if deciding is not None and (final := final_progress(deciding.exit_message, ctx.now)) is not None:
        ctx.status.progress = final  # its last figures, which reads an interval apart may have missed
    finish(ctx, C.SUCCEEDED, reason, message, "Normal", observed, job.spec.runPolicy.cleanPodPolicy)
    return True
