"""What a job's pods record that the job itself may not: the gang size and loopback ports they were created with
(annotations on each pod, so they survive an operator restart mid-creation without a write to the job).

The gang size belongs to the run-time refusal of a replicas change (`reconcile.effective_job`): it is recorded on
the job once a changed spec is refused (`refusal_to_record`), so the refusal outlives the pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfjob_operator.api import ReplicaType, TFJob, constants
from tfjob_operator.api.observed import JobView, recorded_on_pods
from tfjob_operator.reconcile import effective_job, recorded_replicas
from tfjob_operator.reconcile.render import pod_name


def recorded_under(view: JobView, pods: list[dict[str, Any]]) -> dict[str, str]:
    """What the job's pods record (`observed.recorded_on_pods`), to lay under the job's own annotations; nothing
    for an invalid job, or a suspended one (its gang may be resized: only what the job itself says counts)."""
    job = view.job
    if job is None or job.spec.runPolicy.suspend:
        return {}
    return recorded_on_pods(pods)


def refusal_to_record(view: JobView, added: Mapping[str, str]) -> dict[str, str | None]:
    """The gang size to write on the job once a changed spec is refused (a whole-gang restart then recreates the
    pods at the recorded size); `added`: what the pods recorded and the job did not carry."""
    refused = view.job is not None and effective_job(view.job)[1] is not None
    size = added.get(constants.ANNOTATION_GANG_REPLICAS)
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
