"""Kubeflow's `enableDynamicWorker` (kubeflow.org/v1 ParameterServerStrategy jobs), as Kubeflow documents it:
each worker's TF_CONFIG names the PS and itself only (`render.tf_config`), a lost worker restarts alone
(`failure_policy`), and a `replicas` change adds or removes workers one by one, here, without restarting the
others."""

from __future__ import annotations

from tfjob_operator.api import ReplicaType, TFJob
from tfjob_operator.reconcile.actions import DeletePod
from tfjob_operator.reconcile.conditions import Ctx
from tfjob_operator.reconcile.observe import ObservedPod
from tfjob_operator.reconcile.reasons import Reason
from tfjob_operator.render import pod_name


def scale_dynamic_workers(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> bool:
    """Workers beyond Worker.replicas are deleted (True: look again once they are gone); workers above every
    present one are announced as added (`_create_missing` creates them). A worker missing below the highest
    present one is a lost worker being replaced, not a scale-up."""
    want = job.spec.tfReplicaSpecs[ReplicaType.WORKER].replicas if ReplicaType.WORKER in job.spec.tfReplicaSpecs \
        else 0  # type: ignore[comparison-overlap]
    workers = [p for p in current if p.rtype == ReplicaType.WORKER]
    extra = sorted((p for p in workers if p.index >= want and not p.terminating), key=lambda p: p.index)
    if extra:
        ctx.actions.extend(DeletePod(p.name) for p in extra)
        ctx.event("Normal", Reason.WORKERS_SCALED, f"removing {len(extra)} worker(s) "
                  f"({', '.join(p.name for p in extra)}): spec.tfReplicaSpecs.Worker.replicas is {want}")
        return True
    if not workers:
        return False
    top = max(p.index for p in workers)
    added = [pod_name(job.name, ReplicaType.WORKER, i) for i in range(top + 1, want)]
    if added:
        ctx.event("Normal", Reason.WORKERS_SCALED, f"adding {len(added)} worker(s) ({', '.join(added)}): "
                  f"spec.tfReplicaSpecs.Worker.replicas is {want}")
    return False
