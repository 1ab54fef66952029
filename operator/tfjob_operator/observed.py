"""How the operator reads what it observes, defined once: a job's prior status, whether it finished, whether a
pod is terminal, whether a pod is the job's.

The controller, the pure `reconcile`, the admission loop and the gang backends all read objects through these,
so "finished" or "terminal" cannot mean two things in two places.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tfjob_operator import apigroups, constants
from tfjob_operator.api import JobConditionType, TFJobStatus


def latest(store: Any) -> Mapping[str, Any] | None:
    """The newest body in a kopf index entry (a store of bodies), or None for a missing or empty one."""
    items = list(store or [])
    return items[-1] if items else None


#: Conditions that end a job for good.
FINISHED_CONDITIONS = frozenset({JobConditionType.SUCCEEDED, JobConditionType.FAILED})
#: Pod phases after which a pod runs nothing and holds no capacity.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def prior_status(obj: Mapping[str, Any]) -> TFJobStatus:
    """The status the job carries, or an empty one if it is missing or unreadable. A `kubeflow.org/v1` job keeps
    its gang counters in annotations (its CRD would prune them from the status)."""
    raw = dict(obj.get("status") or {})
    if apigroups.group_of(obj).kubeflow:
        raw.update(apigroups.counters_from_annotations((obj.get("metadata") or {}).get("annotations") or {}))
        raw["replicaStatuses"] = apigroups.replica_counts(raw.get("replicaStatuses"))
    try:
        return TFJobStatus.model_validate({k: v for k, v in raw.items() if k in TFJobStatus.model_fields})
    except ValidationError:
        return TFJobStatus()


def finished(status: TFJobStatus) -> bool:
    """Succeeded or Failed is true: the job runs no more pods (only cleanup and TTL remain)."""
    return any(c.type in FINISHED_CONDITIONS and c.status == "True" for c in status.conditions)


def is_finished(obj: Mapping[str, Any]) -> bool:
    """:func:`finished` of the status the job object carries."""
    return finished(prior_status(obj))


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """The pod ended (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def owned_by(pod: Mapping[str, Any], job_name: str, job_uid: str | None) -> bool:
    """True if the pod is this job's: its job-name label, and no controller reference to another uid."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME) != job_name:
        return False
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and job_uid and ref.get("uid") and ref.get("uid") != job_uid:
            return False
    return True
