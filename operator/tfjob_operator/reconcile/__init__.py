"""The TFJob reconciler: one pure function, :func:`reconcile`, and one module per policy beside it.

`core` (the flow), `success_policy`, `failure_policy`, `lifecycle` (suspend, deadline, finish, clean-up, TTL),
`resize` (kubeflow.org/v1 only), `elastic` (spec.elasticPolicy's width), `dynamic_workers` (enableDynamicWorker),
over `observe` (pods as reconcile reads them), `conditions` (the status being built), `actions` (what the
controller carries out), `inputs` (options, the gang view) and `reasons`.
Everything other modules use is importable from here.
"""

from tfjob_operator.api.times import format_time
from tfjob_operator.reconcile.actions import (
    Action,
    AnnotateJob,
    CreateObject,
    Decision,
    DeleteJob,
    DeletePod,
    EmitEvent,
)
from tfjob_operator.reconcile.core import fail_job, reconcile, utcnow
from tfjob_operator.reconcile.failure_policy import backoff_used, classify
from tfjob_operator.reconcile.inputs import GangView, ReconcileOptions
from tfjob_operator.reconcile.observe import NODE_REMOVAL_TAINTS, ObservedPod, observe_pod
from tfjob_operator.reconcile.reasons import Reason
from tfjob_operator.reconcile.resize import effective_job, recorded_replicas, spec_replicas

__all__ = [
    "NODE_REMOVAL_TAINTS", "Action", "AnnotateJob", "CreateObject", "Decision", "DeleteJob", "DeletePod", "EmitEvent",
    "GangView",
    "ObservedPod", "Reason", "ReconcileOptions", "backoff_used", "classify", "effective_job", "fail_job",
    "format_time", "observe_pod", "reconcile", "recorded_replicas", "spec_replicas", "utcnow",
]
