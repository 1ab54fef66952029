"""What one job's reconcile may cost the operator: a memory budget (the bytes of the pods it renders) and a time
budget (seconds of deciding, API waits excluded). A job over either is failed with reason
`ReconcileBudgetExceeded`, a condition and a Warning Event, instead of stalling the operator for every job.

The limits of `limits.py` say what a job may ask for; this says what one reconcile may spend. They differ
because a job within every limit can still be costly: 1000 pods that each copy a 200 KiB template and a 70 KiB
TF_CONFIG is ~270 MB of pods to build, send and keep in the index. The estimate is read from the spec before
anything is rendered (sizes only), so an over-budget job costs almost nothing to refuse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from tfjob_operator.api import RunPolicy, TFJob
from tfjob_operator.reconcile import Decision, Reason, fail_job

#: Condition and Event reason of a job whose reconcile would exceed its budget.
REASON: Final = Reason.RECONCILE_BUDGET_EXCEEDED
#: Default bytes of rendered pods one job may need (TFJOB_RECONCILE_BUDGET_BYTES).
DEFAULT_BYTES: Final = 128 * 1024 * 1024
#: Default seconds one reconcile may spend deciding (TFJOB_RECONCILE_BUDGET_SECONDS).
DEFAULT_SECONDS: Final = 30.0
#: Bytes one peer adds to every pod's TF_CONFIG beyond the job name (twice) and namespace:
#: `"<job>-evaluator-999.<job>.<namespace>.svc.cluster.local:65535",` and JSON escaping headroom.
PEER_ADDRESS_BYTES: Final = 48
#: Bytes a pod adds to its template: metadata, labels, owner reference, the operator's environment.
POD_OVERHEAD_BYTES: Final = 2048


def rendered_bytes(job: TFJob) -> int:
    """An upper estimate of the bytes of every pod the job renders, from sizes only (nothing is rendered):
    each pod is its template, the operator's additions, and a TF_CONFIG naming every peer."""
    pods = sum(spec.replicas for _, spec in job.replica_specs())
    peer = 2 * len(job.name) + len(job.namespace or "default") + PEER_ADDRESS_BYTES
    total = 0
    for _, spec in job.replica_specs():
        template = len(json.dumps(spec.template, separators=(",", ":"), default=str))
        total += spec.replicas * (template + POD_OVERHEAD_BYTES + pods * peer)
    return total


def over_bytes(job: TFJob, budget: int) -> str | None:
    """Why the job is over the memory budget (the message its owner reads), or None."""
    need = rendered_bytes(job)
    if need <= budget:
        return None
    pods = sum(spec.replicas for _, spec in job.replica_specs())
    return (f"its {pods} pods would take about {_mib(need)} to render, over the operator's budget of {_mib(budget)} "
            "per job (TFJOB_RECONCILE_BUDGET_BYTES); lower replicas or shrink the pod template (move data into a "
            "ConfigMap or the image)")


def over_seconds(spent: float, budget: float) -> str:
    """The message for a reconcile that spent longer than its time budget deciding."""
    return (f"deciding what to do for this job took longer than the operator's budget of {budget:g} s per reconcile "
            "(TFJOB_RECONCILE_BUDGET_SECONDS); it was stopped so that other jobs are not held up. Lower replicas or "
            f"shrink the pod template; if the job is small, report it with the operator's log (spent {spent:.1f} s)")


def fail(obj: Mapping[str, Any], why: str, now: datetime, pods: Sequence[Mapping[str, Any]] = (),
         run_policy: RunPolicy | None = None) -> Decision:
    """The job Failed with reason ReconcileBudgetExceeded and this message (a condition and a Warning Event); its
    pods cleaned up per its cleanPodPolicy like any Failed job's (`fail_job`)."""
    return fail_job(obj, REASON, f"the operator will not reconcile this job: {why}", now, pods, run_policy)


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB"
