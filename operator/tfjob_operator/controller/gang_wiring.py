"""The gang view a reconcile reads (`reconcile.GangView`): the job's gang backend asked what it needs
(docs/design.md §6), its group objects read from the API server, and, for the builtin backend, the admission
loop's reason for a waiting job. The only place the controller reads the admission loop's reasons.
"""

from __future__ import annotations

from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.gang.admission import AdmissionLoop
from tfjob_operator.gang.backends import backend_for
from tfjob_operator.gang.base import (
    ChecksJobs,
    CreatesGroups,
    GangBackendError,
    GangOptions,
    ReleasedByOperator,
    ReportsWaits,
    decorate,
)
from tfjob_operator.kube import Kube, collection_path
from tfjob_operator.reconcile import GangView

#: A job waiting on its PodGroup (not watched) reads it again this often, e.g. to see Volcano enqueue it.
GROUP_RECHECK_SECONDS = 5.0


def gang_options(settings: OperatorSettings) -> GangOptions:
    """The backends' options that follow from the settings."""
    return GangOptions(scheduler_name=settings.scheduler_name, builtin_priority_class=settings.gang_priority_class)


def loop_reason(admission: AdmissionLoop, job: TFJob, pods: list[dict[str, Any]]) -> str | None:
    """What the admission loop says of a job its backend says is queued: None if it released the gang a moment
    ago (the pod index has not caught up yet), or if no pass has found the gang short yet (the pass follows the
    gated pods within milliseconds and usually releases them; a Queued/admitted flip would cost two writes)."""
    if admission.released(pods):
        return None
    # The loop's reason says what is short ("needs 8 nvidia.com/gpu on ≤ 2 nodes; largest free 6").
    wait = admission.wait_for(job.namespace, job.name)
    return wait.message if wait is not None and wait.shown else None


async def gang_view(settings: OperatorSettings, options: GangOptions, kube: Kube, admission: AdmissionLoop | None,
                    job: TFJob, effective: TFJob, rendered: list[dict[str, Any]],
                    pods: list[dict[str, Any]]) -> GangView:
    """Ask the job's gang backend what it needs (the `none` backend needs nothing). `effective` is the job as its
    gang was created, `rendered` its pods as rendered, `pods` those observed."""
    try:
        backend = backend_for(job, settings.gang_backend, options)
    except GangBackendError as exc:
        return GangView(problems=(str(exc),))
    problems = backend.validate(job) if isinstance(backend, ChecksJobs) else []
    if problems:
        return GangView(problems=tuple(problems))

    def decorate_pod(job: TFJob, pod: dict[str, Any]) -> dict[str, Any]:
        return decorate(backend, job, pod)

    ready, why, missing = True, "", []
    grouping = backend.group_objects if isinstance(backend, CreatesGroups) else GangView().group_objects
    groups = grouping(effective, rendered)
    if groups and isinstance(backend, CreatesGroups):
        found = [await kube.get(f"{collection_path(g)}/{g['metadata']['name']}") for g in groups]
        observed = [g for g in found if g]
        missing = [g for g, got in zip(groups, found, strict=True) if not got]
        ready, why = backend.ready_to_create_pods(job, observed)
    reported = backend.queued_reason(job, pods) if isinstance(backend, ReportsWaits) else None
    queued = (why or None) if not ready else reported
    if queued and isinstance(backend, ReleasedByOperator) and admission is not None:
        queued = loop_reason(admission, job, pods)
    fits = (admission.fits_workers(job, rendered, pods)
            if isinstance(backend, ReleasedByOperator) and admission is not None else None)
    leaving = admission.leaving_nodes() if fits is not None and admission is not None else frozenset()
    return GangView(decorate_pod=decorate_pod, group_objects=grouping, ready_to_create_pods=ready,
                    missing_groups=tuple(missing), queued_reason=queued, fits_workers=fits, leaving_nodes=leaving,
                    recheck_after=GROUP_RECHECK_SECONDS if groups and not ready else None)
