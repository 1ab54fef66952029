"""What a job's pods record that the job itself may not: the gang size and loopback ports they were created with
(annotations on each pod, so they survive an operator restart mid-creation without a write to the job).

The gang size belongs to the run-time refusal of a replicas change (`reconcile.effective_job`): it is recorded on
the job once a changed spec is refused (`_refusal_to_record`), so the refusal outlives the pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfjob_operator import constants
from tfjob_operator.api import ReplicaType, TFJob
from tfjob_operator.observed import JobView, recorded_on_pods, view_job
from tfjob_operator.reconcile import effective_job, recorded_replicas
from tfjob_operator.render import pod_name


def with_pod_records(view: JobView, store: list[Mapping[str, Any]]
                     ) -> tuple[JobView, list[dict[str, Any]], dict[str, str | None]]:
    """The view with what its pods record and the job does not carry, private copies of the pods, and the
    annotations to write on the job (`_refusal_to_record`)."""
    # Shallow copies: the kept pods are the index's private copies, which nothing changes (observed.as_kept).
    pods = [dict(p) for p in store]
    job = view.job
    if job is None or job.spec.runPolicy.suspend:
        return view, pods, {}  # suspended, the gang may be resized: only what the job itself says counts
    meta = dict(view.obj.get("metadata") or {})
    current = meta.get("annotations") or {}
    missing = {k: v for k, v in recorded_on_pods(pods).items() if k not in current}
    if not missing:
        return view, pods, {}
    view = view_job({**view.obj, "metadata": {**meta, "annotations": {**current, **missing}}})
    return view, pods, _refusal_to_record(view, missing)


def _refusal_to_record(view: JobView, missing: Mapping[str, str]) -> dict[str, str | None]:
    """The gang size to write on the job once a changed spec is refused (a whole-gang restart then recreates the
    pods at the recorded size)."""
    refused = view.job is not None and effective_job(view.job)[1] is not None
    size = missing.get(constants.ANNOTATION_GANG_REPLICAS)
    return {constants.ANNOTATION_GANG_REPLICAS: size} if refused and size else {}


def all_pod_names(job: TFJob) -> list[str]:
    """Pod names of the spec and of the recorded gang size (they differ while a resize is refused), and of an
    elastic job's widest width."""
    counts = {rtype.value: spec.replicas for rtype, spec in job.replica_specs()}
    if job.spec.elasticPolicy is not None and ReplicaType.WORKER.value in counts:  # an elastic gang: up to max
        counts[ReplicaType.WORKER.value] = max(counts[ReplicaType.WORKER.value], job.spec.elasticPolicy.maxReplicas)
    for rtype_name, n in (recorded_replicas(job) or {}).items():
        counts[rtype_name] = max(counts.get(rtype_name, 0), n)
    return [pod_name(job.name, rtype, i) for rtype, _ in job.replica_specs() for i in range(counts[rtype.value])]
