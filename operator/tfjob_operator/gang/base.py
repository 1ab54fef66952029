"""What a gang backend is: a small required interface, and capabilities some backends also have.

A backend says how a gang is made atomic: by the operator's own admission loop (`builtin`), by a gang-aware
scheduler through a PodGroup (`volcano`, `scheduler-plugins`), by Kueue, or not at all (`none`). Every backend
is a :class:`GangBackend` (a name, and :meth:`GangBackend.decorate_pod`). A backend that does more *is* one of
the capabilities below, by subclassing it; callers ask ``isinstance(backend, Capability)``:

* :class:`ChecksJobs`: refuses jobs it cannot run (kueue: a job without a queue).
* :class:`CreatesGroups`: objects (PodGroups) created before the pods, and pods created only once the
  scheduler accepted them (volcano, scheduler-plugins).
* :class:`ReportsWaits`: says why a created gang still waits (kueue, scheduler-plugins, builtin).
* :class:`ReleasedByOperator`: the operator's admission loop (`gang.admission`) releases its pods (builtin).

How the operator uses a job's backend, per gang attempt::

    backend = backends.backend_for(job, settings.gang_backend, options)  # GangBackendError → InvalidSpec
    ChecksJobs:       problems = backend.validate(job)                     # non-empty → InvalidSpec
    CreatesGroups:    groups = backend.group_objects(job, pods)            # create these first (idempotent)
                      ok, why = backend.ready_to_create_pods(job, groups_read_back)  # not ok → Queued `why`
    pods = [backend.decorate_pod(job, pod) for pod in pods]                # then create the pods
    ReportsWaits:     reason = backend.queued_reason(job, pods)            # not None → Queued with it
    ReleasedByOperator: the admission loop's reason replaces it, and the loop releases the pods

Adding a backend takes 5 files (docs/gang.md, "Adding a backend"): its module here (the class, with its
``default_scheduler`` if its pods go to a scheduler of its own); its ``register()`` call in `backends.py`; the
chart's `values.schema.json`, written from the registry by `python deploy/render_manifests.py`; its row in
`docs/gang.md`; its rows in `tests/gang/test_gang_backends.py`. The settings, the CLI's help and the annotation's
check read the registry.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfjob_operator.api import TFJob, apigroups, constants
from tfjob_operator.gang import resources
from tfjob_operator.gang.elastic import elastic_bounds, is_worker

#: Annotation on a TFJob: a node label; all the job's pods must land on nodes sharing one value of it
#: (an NVLink island, a rack). Built-in backend only.
ANNOTATION_GANG_DOMAIN = f"{constants.GROUP}/gang-domain"


class GangBackendError(ValueError):
    """A job names a gang backend that does not exist, or misses a field its backend needs."""


@dataclass(frozen=True)
class GangOptions:
    """Operator-wide settings the backends read (filled from OperatorSettings at start-up)."""

    #: schedulerName for every gang pod (the setting TFJOB_SCHEDULER_NAME); None: each backend's own
    #: (`GangBackend.default_scheduler`), else the template's or the cluster's default.
    scheduler_name: str | None = None
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
    #: The scheduler this backend's pods go to when the operator names none (TFJOB_SCHEDULER_NAME), e.g. Volcano's
    #: "volcano"; None: the pod template's, else the cluster's default scheduler.
    default_scheduler: ClassVar[str | None] = None

    def __init__(self, options: GangOptions | None = None):
        self.options = options or GangOptions()

    @property
    def scheduler_name(self) -> str | None:
        """The schedulerName this backend's pods get: the operator's setting, else the backend's own."""
        return self.options.scheduler_name or self.default_scheduler

    def scheduled_copy(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of the pod to decorate (`copy_pod`), sent to this backend's own scheduler if it has one, with the
        job's priority class."""
        out = copy_pod(pod)
        if self.default_scheduler:
            out["spec"]["schedulerName"] = self.scheduler_name
        set_priority_class(job, out)
        return out

    @abstractmethod
    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a rendered pod with this backend's gates, labels, annotations and schedulerName."""


class ChecksJobs(ABC):
    """Capability: some jobs cannot run under this backend."""

    @abstractmethod
    def validate(self, job: TFJob) -> list[str]:
        """Field errors that make the job impossible under this backend (each names the field)."""


class CreatesGroups(ABC):
    """Capability: objects (PodGroups) made before the pods, which wait until the scheduler accepts them."""

    @abstractmethod
    def group_objects(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Objects to create before the pods, owned by the TFJob."""

    @abstractmethod
    def ready_to_create_pods(self, job: TFJob, groups_observed: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        """Whether pods may be created now, given the group objects read back from the API; else why not."""


class ReportsWaits(ABC):
    """Capability: a created gang may wait for this backend's admission."""

    @abstractmethod
    def queued_reason(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> str | None:
        """Why the created gang is still waiting for admission, or None when it is not waiting on us."""


class ReleasedByOperator(ReportsWaits):
    """Capability: the operator's admission loop (`gang.admission`) places the gang and releases its pods."""


@dataclass(frozen=True)
class GangObjects:
    """What a backend makes of a rendered job: group objects first, then the decorated pods."""

    groups: list[dict[str, Any]]
    pods: list[dict[str, Any]]


def decorate(backend: GangBackend, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
    """A rendered pod as the backend sends it: the operator's schedulerName (TFJOB_SCHEDULER_NAME) on a pod whose
    template names none, then the backend's own decorations (a backend with a scheduler of its own sets it)."""
    scheduler = backend.options.scheduler_name
    if scheduler and not (pod.get("spec") or {}).get("schedulerName"):
        pod = {**pod, "spec": {**(pod.get("spec") or {}), "schedulerName": scheduler}}
    return backend.decorate_pod(job, pod)


def apply_backend(backend: GangBackend, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> GangObjects:
    """The backend's group objects and decorated pods for rendered pods (used by `tfjob render` too)."""
    groups = backend.group_objects(job, pods) if isinstance(backend, CreatesGroups) else []
    return GangObjects(groups, [decorate(backend, job, p) for p in pods])


# Helpers shared by the backends.


def group_name(job: TFJob) -> str:
    """The PodGroup name of a job: the job's own name (as Kubeflow's training-operator does)."""
    return job.name


def _gang_core(job: TFJob, pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]] | None:
    """An elastic job's pods that must run together: every pod but the workers above its minReplicas."""
    bounds = elastic_bounds(job)
    if bounds is None:
        return None
    workers = [p for p in pods if is_worker(p)][: bounds[0]]
    return [p for p in pods if not is_worker(p)] + workers


def min_member(job: TFJob, pods: Sequence[Mapping[str, Any]]) -> int:
    """Pods that must be placed together: schedulingPolicy.minAvailable, else (elastic) every pod but the workers
    above minReplicas, else every pod."""
    policy = job.spec.runPolicy.schedulingPolicy
    if policy is not None and policy.minAvailable is not None:
        return min(policy.minAvailable, len(pods)) if pods else policy.minAvailable
    core = _gang_core(job, pods)
    return len(pods) if core is None else len(core)


def min_resources(job: TFJob, pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """schedulingPolicy.minResources if set, else the summed requests of the minMember pods (the first ones; an
    elastic job's: its pods but the workers above minReplicas)."""
    policy = job.spec.runPolicy.schedulingPolicy
    if policy is not None and policy.minResources:
        return {name: str(value) for name, value in policy.minResources.items()}
    total: resources.Resources = {}
    core = _gang_core(job, pods)
    counted = core if core is not None and (policy is None or policy.minAvailable is None) else \
        list(pods)[: min_member(job, pods)]
    for pod in counted:
        total = resources.add(total, resources.pod_requests(pod))
    return {name: resources.format_quantity(value) for name, value in sorted(total.items()) if value > 0}


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
