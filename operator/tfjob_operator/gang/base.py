"""The gang backend interface and how a job picks its backend.

A backend says how a gang is made atomic: by the operator's own admission loop (`builtin`), by a
gang-aware scheduler through a PodGroup (`volcano`, `scheduler-plugins`), by Kueue, or not at all
(`none`). Each backend is one module in this package holding one :class:`GangBackend` subclass;
adding a backend means adding one file (the registry finds subclasses by their ``name``).

How the operator uses a backend, per job and gang attempt::

    backend = backend_for(job, settings.gang_backend, options)    # GangBackendError → InvalidSpec
    problems = backend.validate(job)                             # non-empty → InvalidSpec
    groups = backend.group_objects(job, pods)                    # create these first (idempotent)
    ok, why = backend.ready_to_create_pods(job, observed_groups) # not ok → Queued with reason `why`
    pods = [backend.decorate_pod(job, pod) for pod in pods]      # then create the pods
    reason = backend.queued_reason(job, observed_pods)           # not None → Queued with this reason
    if backend.uses_admission_loop: ...                          # builtin: the admission timer releases pods
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from typing import Any, ClassVar

from tfjob_operator import apigroups, constants, resources
from tfjob_operator.api import TFJob

#: Annotation on a TFJob: a node label; all the job's pods must land on nodes sharing one value of it
#: (an NVLink island, a rack). Built-in backend only.
ANNOTATION_GANG_DOMAIN = f"{constants.GROUP}/gang-domain"

#: Where a job's backend override can be written, in the order they are read.
OVERRIDE_FIELDS = (
    f"metadata.annotations[{constants.ANNOTATION_GANG_BACKEND}]",
    "spec.runPolicy.schedulingPolicy.backend",
)


class GangBackendError(ValueError):
    """A job names a gang backend that does not exist, or misses a field its backend needs."""


@dataclass(frozen=True)
class GangOptions:
    """Operator-wide settings the backends read (filled from OperatorSettings at start-up)."""

    #: schedulerName for Volcano pods.
    volcano_scheduler_name: str = "volcano"
    #: schedulerName of the scheduler-plugins scheduler with the Coscheduling plugin (its Helm default).
    scheduler_plugins_scheduler_name: str = "scheduler-plugins-scheduler"
    #: PriorityClass (preemptionPolicy: Never) the chart installs for built-in gang pods; None: none.
    builtin_priority_class: str | None = None
    #: Seconds a released gang may take to be fully scheduled when the job does not say.
    schedule_timeout_seconds: int = 300
    #: Extra labels put on PodGroups (e.g. the operator's component label).
    group_labels: Mapping[str, str] = field(default_factory=dict)


class GangBackend(ABC):
    """One way of making a gang atomic. Methods are pure: they read the job and plain dicts only."""

    #: The name users write in the annotation or setting (e.g. "scheduler-plugins").
    name: ClassVar[str]
    #: True when the operator's admission loop must release the pods (builtin only).
    uses_admission_loop: ClassVar[bool] = False

    def __init__(self, options: GangOptions | None = None):
        self.options = options or GangOptions()

    def validate(self, job: TFJob) -> list[str]:
        """Field errors that make the job impossible under this backend (each names the field)."""
        return []

    @abstractmethod
    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a rendered pod with this backend's gates, labels, annotations and schedulerName."""

    def group_objects(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Objects to create before the pods (PodGroups), owned by the TFJob. Default: none."""
        return []

    def ready_to_create_pods(self, job: TFJob, groups_observed: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        """Whether pods may be created now, given the group objects read back from the API; else why not."""
        return True, ""

    def queued_reason(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> str | None:
        """Why the created gang is still waiting for admission, or None when it is not waiting on us."""
        return None


@dataclass(frozen=True)
class GangObjects:
    """What a backend makes of a rendered job: group objects first, then the decorated pods."""

    groups: list[dict[str, Any]]
    pods: list[dict[str, Any]]


def apply_backend(backend: GangBackend, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> GangObjects:
    """The backend's PodGroups and decorated pods for rendered pods (used by `tfjob render` too)."""
    return GangObjects(backend.group_objects(job, pods), [backend.decorate_pod(job, p) for p in pods])


@cache
def registry() -> dict[str, type[GangBackend]]:
    """Every backend class in this package, by name (imports each module once)."""
    package = importlib.import_module(__package__ or "tfjob_operator.gang")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")

    def walk(cls: type[Any]) -> list[type[GangBackend]]:
        found: list[type[GangBackend]] = []
        for sub in cls.__subclasses__():
            found += [sub, *walk(sub)]
        return found

    return {cls.name: cls for cls in walk(GangBackend) if "name" in cls.__dict__}


def backend_names() -> list[str]:
    return sorted(registry())


def chosen_backend_name(job: TFJob, default_name: str) -> tuple[str, str]:
    """(backend name, the field it came from): annotation, then schedulingPolicy.backend, then the default."""
    annotated = job.metadata.annotations.get(constants.ANNOTATION_GANG_BACKEND)
    if annotated:
        return annotated.strip(), OVERRIDE_FIELDS[0]
    policy = job.spec.runPolicy.schedulingPolicy
    # schedulingPolicy.backend is read if the API offers it; Kubeflow's schema has no such field.
    from_policy = getattr(policy, "backend", None) if policy is not None else None
    if from_policy:
        return str(from_policy).strip(), OVERRIDE_FIELDS[1]
    return str(default_name), "operator setting TFJOB_GANG_BACKEND"


def backend_for(job: TFJob, default_name: str, options: GangOptions | None = None) -> GangBackend:
    """The job's gang backend: its override if any, else ``default_name``.

    Raises GangBackendError naming the field when the name is unknown.
    """
    name, source = chosen_backend_name(job, default_name)
    cls = registry().get(name)
    if cls is None:
        raise GangBackendError(f"{source}: unknown gang backend {name!r} (choose one of {', '.join(backend_names())})")
    return cls(options)


# Helpers shared by the backends.


def group_name(job: TFJob) -> str:
    """The PodGroup name of a job: the job's own name (as Kubeflow's training-operator does)."""
    return job.name


def min_member(job: TFJob, pods: Sequence[Mapping[str, Any]]) -> int:
    """Pods that must be placed together: schedulingPolicy.minAvailable, else every pod."""
    policy = job.spec.runPolicy.schedulingPolicy
    if policy is not None and policy.minAvailable is not None:
        return min(policy.minAvailable, len(pods)) if pods else policy.minAvailable
    return len(pods)


def quantity(value: Decimal) -> str:
    """A Decimal as a Kubernetes quantity string ("2", "500m", "1073741824")."""
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return f"{value.normalize():f}"


def min_resources(job: TFJob, pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """schedulingPolicy.minResources if set, else the summed requests of the first minMember pods."""
    policy = job.spec.runPolicy.schedulingPolicy
    if policy is not None and policy.minResources:
        return {name: str(value) for name, value in policy.minResources.items()}
    total: resources.Resources = {}
    for pod in list(pods)[: min_member(job, pods)]:
        total = resources.add(total, resources.pod_requests(pod))
    return {name: quantity(value) for name, value in sorted(total.items()) if value > 0}


def priority_class(job: TFJob) -> str | None:
    policy = job.spec.runPolicy.schedulingPolicy
    return policy.priorityClass if policy is not None else None


def schedule_timeout_seconds(job: TFJob, options: GangOptions) -> int:
    policy = job.spec.runPolicy.schedulingPolicy
    if policy is not None and policy.scheduleTimeoutSeconds is not None:
        return policy.scheduleTimeoutSeconds
    return options.schedule_timeout_seconds


def copy_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy with metadata.labels, metadata.annotations and spec present, ready to decorate."""
    out = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    meta["labels"] = dict(meta.get("labels") or {})
    meta["annotations"] = dict(meta.get("annotations") or {})
    out["spec"] = dict(out.get("spec") or {})
    return out


def set_priority_class(job: TFJob, pod: dict[str, Any], fallback: str | None = None) -> None:
    """schedulingPolicy.priorityClass (else ``fallback``) on a pod whose template sets none."""
    chosen = priority_class(job) or fallback
    if chosen and not pod["spec"].get("priorityClassName") and pod["spec"].get("priority") is None:
        pod["spec"]["priorityClassName"] = chosen


def observed_group(job: TFJob, groups_observed: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The job's PodGroup among the observed objects (matched by name and namespace)."""
    for group in groups_observed:
        meta = group.get("metadata") or {}
        if meta.get("name") == group_name(job) and (meta.get("namespace") or job.namespace) == job.namespace:
            return group
    return None


def podgroup(api_version: str, job: TFJob, options: GangOptions, spec: dict[str, Any]) -> dict[str, Any]:
    """A PodGroup object of the given API version for the job (Volcano's and scheduler-plugins' share a shape)."""
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": podgroup_metadata(job, options), "spec": spec}


def podgroup_metadata(job: TFJob, options: GangOptions) -> dict[str, Any]:
    return {
        "name": group_name(job),
        "namespace": job.namespace,
        "labels": {**options.group_labels, constants.LABEL_JOB_NAME: job.name},
        "ownerReferences": [apigroups.owner_reference(job)],
    }
