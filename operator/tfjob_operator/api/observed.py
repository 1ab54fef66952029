"""How the operator reads what it observes, defined once: a job (parsed once into a :class:`JobView`), its prior
status, whether it finished, whether a pod is terminal, whether a pod is the job's.

The controller, the pure `reconcile`, the admission loop and the gang backends all read objects through these,
so "finished" or "terminal" cannot mean two things in two places, and a job is parsed once per change, not once
per reader.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from tfjob_operator.api import JobConditionType, TFJob, TFJobStatus, apigroups, constants
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob

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


#: `status.state` of a finished job: the controller's TFJob index keeps its body packed (:class:`PackedStore`),
#: and the resync skips it once no pod is left (`JobController.settled`).
FINISHED_STATES = frozenset({"Succeeded", "Failed"})


class PackedStore(Sequence[Mapping[str, Any]]):
    """A finished job's entry in the controller's TFJob index: its one kept body as compressed JSON, decoded afresh
    on each read (about 35 µs), equal to the body kept unpacked.

    Most of a long-lived cluster's TFJobs have finished, and nothing reads them but a change of their own: at
    10,000 jobs, 8,000 finished took 31 MiB as kept dicts (4 KB each) and take 5 MiB packed (700 bytes). What the
    census and the resync read of every job, its state and whether it has a TTL, is kept unpacked."""

    __slots__ = ("_packed", "has_ttl", "state")

    def __init__(self, body: Mapping[str, Any]) -> None:
        self._packed = zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 1)
        self.state = _state(body)
        self.has_ttl = _has_ttl(body)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(1)[index]]
        if index not in (0, -1):
            raise IndexError(index)
        body: Mapping[str, Any] = json.loads(zlib.decompress(self._packed))
        return body


def job_store(kept: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """The TFJob index's entry for a kept job body: packed once it has finished (:class:`PackedStore`)."""
    return PackedStore(kept) if _state(kept) in FINISHED_STATES else (kept,)


def job_state(store: Any) -> str | None:
    """`status.state` of a TFJob index entry's newest body, without unpacking a packed one."""
    if isinstance(store, PackedStore):
        return store.state
    body = latest(store)
    return _state(body) if body is not None else None


def job_has_ttl(store: Any) -> bool:
    """Whether a TFJob index entry's newest body sets `spec.runPolicy.ttlSecondsAfterFinished`."""
    if isinstance(store, PackedStore):
        return store.has_ttl
    body = latest(store)
    return body is not None and _has_ttl(body)


def _state(body: Mapping[str, Any]) -> str | None:
    status = body.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    return state if isinstance(state, str) else None


def _has_ttl(body: Mapping[str, Any]) -> bool:
    return ((body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished") is not None


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
