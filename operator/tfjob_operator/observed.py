"""How the operator reads what it observes, defined once: a job (parsed once into a :class:`JobView`), its prior
status, whether it finished, whether a pod is terminal, whether a pod is the job's.

The controller, the pure `reconcile`, the admission loop and the gang backends all read objects through these,
so "finished" or "terminal" cannot mean two things in two places, and a job is parsed once per change, not once
per reader.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from tfjob_operator import apigroups, constants
from tfjob_operator.api import JobConditionType, TFJob, TFJobStatus
from tfjob_operator.validation import InvalidSpec, parse_tfjob

#: Strings up to this length are interned in what the operator keeps (:func:`as_kept`): keys, phases, condition
#: types, label values and timestamps repeat across thousands of objects; longer ones (a termination message) rarely.
INTERN_MAX_CHARS = 64


def as_kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator keeps of a watched object (the controller's TFJob index, the pod index): the body without
    `metadata.managedFields`, which nothing here reads and which is over a third of a pod (like client-go's
    TransformStripManagedFields), rebuilt with its keys and short strings interned. A decoded pod repeats every key
    ("metadata", "lastTransitionTime") and most values ("True", "Running", its job's labels) as strings of its own:
    interned, a kept pod takes ~7 KB instead of ~17 KB, and every field stays, equal to the watch's.

    The result is a private copy (kopf keeps the watch's body apart and replaces it on the next event): readers
    share it without copying and never change it."""
    meta = body.get("metadata") or {}
    return _compact({**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
                    if "managedFields" in meta else dict(body))


def _compact(value: Any, _intern: Callable[[str], str] = sys.intern) -> Any:
    """A JSON value rebuilt with its keys and short strings interned (leaves inline: this runs on every event)."""
    kind = type(value)
    if kind is dict:
        return {_intern(k): (_compact(v) if type(v) in _NESTED else
                             _intern(v) if type(v) is str and len(v) <= INTERN_MAX_CHARS else v)
                for k, v in value.items()}
    if kind is list:
        return [_compact(v) if type(v) in _NESTED else
                _intern(v) if type(v) is str and len(v) <= INTERN_MAX_CHARS else v for v in value]
    if kind is str and len(value) <= INTERN_MAX_CHARS:
        return _intern(value)
    return value


_NESTED = (dict, list)


def latest(store: Any) -> Mapping[str, Any] | None:
    """The newest body in an index entry (a store of bodies), or None for a missing or empty one."""
    items = list(store or [])
    return items[-1] if items else None


#: Conditions that end a job for good.
FINISHED_CONDITIONS = frozenset({JobConditionType.SUCCEEDED, JobConditionType.FAILED})
#: Pod phases after which a pod runs nothing and holds no capacity.


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


def owned_by(pod: Mapping[str, Any], job_name: str, job_uid: str | None) -> bool:
    """True if the pod is this job's: its job-name label, and no controller reference to another uid."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME) != job_name:
        return False
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and job_uid and ref.get("uid") and ref.get("uid") != job_uid:
            return False
    return True


@dataclass(frozen=True)
class JobView:
    """One reading of a TFJob: the object, its prior status, and its spec parsed once (or why it is invalid).

    The controller builds one per job change and hands the same view to the gang view, to `reconcile` and to the
    admission loop.
    """

    #: The job as read (status included); a private copy, never the watch's live body.
    obj: Mapping[str, Any]
    status: TFJobStatus
    #: The parsed spec; None when it is invalid (see `problems`).
    job: TFJob | None
    #: Why the spec is invalid, one message per field.
    problems: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return finished(self.status)

    @property
    def uid(self) -> str | None:
        return (self.obj.get("metadata") or {}).get("uid")

    def with_status(self, raw: Mapping[str, Any]) -> JobView:
        """The same job with another status (the controller's own last write, when the watch lags behind it)."""
        obj = {**self.obj, "status": raw}
        return replace(self, obj=obj, status=prior_status(obj))


def view_job(obj: Mapping[str, Any]) -> JobView:
    """Parse the job once. The status is read apart (prior_status): it is the operator's own output, never a
    reason to refuse the spec."""
    status = prior_status(obj)
    try:
        job = parse_tfjob({k: v for k, v in obj.items() if k != "status"})
    except InvalidSpec as exc:
        return JobView(obj, status, None, tuple(exc.messages))
    return JobView(obj, status, job)


def recorded_on_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The gang size and loopback ports the job's pods were created with (annotations on each pod), from the
    first pod that carries them: what a job without them on itself was created with."""
    found: dict[str, str] = {}
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        for key in (constants.ANNOTATION_GANG_REPLICAS, constants.ANNOTATION_LOOPBACK_PORTS):
            if key not in found and annotations.get(key):
                found[key] = str(annotations[key])
    return found
