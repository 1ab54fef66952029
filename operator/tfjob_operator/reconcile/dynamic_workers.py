"""Kubeflow's `enableDynamicWorker` (kubeflow.org/v1 ParameterServerStrategy jobs), as Kubeflow documents it:
each worker's TF_CONFIG names the PS and itself only (`render.tf_config`), a lost worker restarts alone
(`failure_policy`), and a `replicas` change adds or removes workers one by one, here, without restarting the
others."""

from __future__ import annotations

from tfjob_operator.api import ReplicaType, TFJob
from tfjob_operator.reconcile.actions import DeletePod
from tfjob_operator.reconcile.conditions import Ctx
from tfjob_operator.reconcile.observe import ObservedPod


def scale_dynamic_workers(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> bool:
    """Workers beyond Worker.replicas are deleted, the others left running (True: look again once they are
    gone); workers below it that are missing are created by `_create_missing`, alone. No Event: the pods'
    own creation and deletion show it, and a repeated reconcile would repeat it."""
    specs = job.spec.tfReplicaSpecs
    want = specs[ReplicaType.WORKER].replicas if ReplicaType.WORKER in specs else 0  # type: ignore[comparison-overlap]
    extra = [p for p in current if p.rtype == ReplicaType.WORKER and p.index >= want and not p.terminating]
    ctx.actions.extend(DeletePod(p.name) for p in sorted(extra, key=lambda p: p.index))
    return bool(extra)
