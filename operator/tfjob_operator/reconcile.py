"""The TFJob lifecycle as one pure function: (job, observed pods, now) → new status + actions + when to look again.

docs/design.md §5 is the specification; `tests/unit/test_reconcile.py` pins every rule in one table. No I/O here: the
kopf handlers read the job and its pods, call :func:`reconcile`, then write the status first and carry out the
actions in order (so a crash between the two never loses a decision such as "this is attempt 3").

The current gang attempt is `status.restartCount`; pods carry it in the `tfjob.dev/attempt` label. Pods of any
other attempt are stale: they are deleted and nothing new is created until they are gone, because the next
attempt reuses their names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from tfjob_operator import apigroups, constants
from tfjob_operator.api import (
    CleanPodPolicy,
    JobCondition,
    JobConditionType,
    ReplicaStatus,
    ReplicaType,
    RestartPolicy,
    RunPolicy,
    SuccessPolicy,
    TFJob,
    TFJobStatus,
)
from tfjob_operator.diagnosis import explain
from tfjob_operator.observed import JobView, finished, owned_by, prior_status, view_job
from tfjob_operator.render import Rendered, RenderOptions, chief_pod_name, pod_name, render
from tfjob_operator.times import format_time, parse_time
from tfjob_operator.training_progress import final_progress
from tfjob_worker import exit_codes

C = JobConditionType



# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class CreateObject:
    """Create a Service, Pod or gang object; an existing one (409) counts as created."""

    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


@dataclass(frozen=True)
class DeletePod:
    """Delete a pod of the job (404 counts as deleted); `force` means grace period 0 for a pod stuck Terminating."""

    name: str
    force: bool = False


@dataclass(frozen=True)
class AnnotateJob:
    """Merge these annotations into the TFJob's metadata (None removes one)."""

    annotations: dict[str, str | None]


@dataclass(frozen=True)
class DeleteJob:
    """Delete the TFJob itself (ttlSecondsAfterFinished); its pods and Service go by garbage collection."""

    reason: str


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event on the TFJob. `condition` names the condition that became true, for metrics."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    condition: JobConditionType | None = None


Action = CreateObject | DeletePod | AnnotateJob | DeleteJob | EmitEvent


@dataclass
class Decision:
    """What reconcile decided: the status to write, actions in order, and when to reconcile again at the latest."""

    status: TFJobStatus
    actions: list[Action] = field(default_factory=list)
    requeue_after: float | None = None
    #: False when the job belongs to another controller (runPolicy.managedBy): write nothing.
    managed: bool = True

    def of_type(self, kind: type) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]


# ---------------------------------------------------------------- inputs


def _identity(job: TFJob, pod: dict[str, Any]) -> dict[str, Any]:
    return pod


@dataclass(frozen=True)
class GangView:
    """What the gang backend says about this job (the seam for gang scheduling; `none` allows everything)."""

    #: Adds the backend's gates, labels, annotations, schedulerName to a rendered pod. Must be pure.
    decorate_pod: Callable[[TFJob, dict[str, Any]], dict[str, Any]] = _identity
    #: Objects the backend needs before the pods (e.g. a PodGroup), from the rendered pods. Must be pure.
    group_objects: Callable[[TFJob, list[dict[str, Any]]], list[dict[str, Any]]] = lambda job, pods: []
    #: May the pods be created now? (Volcano: only once the PodGroup left Pending.)
    ready_to_create_pods: bool = True
    #: Group objects the backend needs that were not found (created even while pods may not be yet).
    missing_groups: tuple[dict[str, Any], ...] = ()
    #: While pods may not be created: look again after this many seconds (group objects are not watched).
    recheck_after: float | None = None
    #: Why the gang waits, shown on the Queued condition; None when it does not wait.
    queued_reason: str | None = None
    #: Why the job cannot run under its backend (unknown backend name, missing queue ...): fails it as InvalidSpec.
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReconcileOptions:
    cluster_domain: str | None = None
    #: Loopback addressing: pod name → port. Must hold every pod name of the job when set.
    loopback_ports: Mapping[str, int] | None = None
    #: Seconds past a pod's deletion deadline after which it is force-deleted.
    terminating_timeout: float = 60.0
    gang: GangView = GangView()
    #: The API server refused to create a pod for a reason retrying cannot fix (e.g. 422): fails the job.
    pod_create_error: str | None = None
    #: Which `kubeflow.org/v1` jobs are ours (TFJOB_KUBEFLOW_API); `tfjob.dev/v1` jobs are ours unless another
    #: controller manages them.
    kubeflow_api: apigroups.KubeflowApi = apigroups.KubeflowApi.OFF
    #: The job as its gang runs (:func:`effective_job`) rendered for the current attempt with the options above:
    #: the controller renders once and shares it with the gang view. None: reconcile renders it when needed.
    rendered: Rendered | None = None


@dataclass(frozen=True)
class ObservedPod:
    """A pod of the job as reconcile sees it."""

    name: str
    rtype: ReplicaType | None
    index: int
    attempt: int
    phase: str
    terminating: bool
    deletion_deadline: datetime | None
    ready: bool
    container: str | None
    exit_code: int | None
    finished_at: datetime | None
    #: Why the pod went away when it was not its own doing: PodEvicted, PodPreempted, NodeLost; else None.
    disruption: str | None
    disruption_message: str
    node: str | None
    #: In-place container restarts by the kubelet (restartPolicy OnFailure/Always), init containers included.
    restarts: int = 0
    #: The last in-place restart's cause, e.g. "exited with code 1: ValueError: ..."; "" when none.
    last_restart: str = ""
    #: The training container's termination message (its log tail on failure) and reason, e.g. OOMKilled.
    exit_message: str = ""
    exit_reason: str | None = None

    @property
    def active(self) -> bool:
        return not self.terminating and self.phase in ("Pending", "Running", "")

    @property
    def failed(self) -> bool:
        """Failed on its own. A pod being deleted counts only if disrupted: the operator deletes pods too."""
        if self.terminating:
            return self.disruption is not None
        return self.phase in ("Failed", "Unknown")

    @property
    def label(self) -> str:
        rtype = self.rtype.value if self.rtype else "?"
        return f"{self.name} ({rtype} {self.index}" + (f", container {self.container})" if self.container else ")")


# ---------------------------------------------------------------- pods


_DISRUPTION_REASONS = {
    "PreemptionByScheduler": "PodPreempted",
    "PreemptionByKubeScheduler": "PodPreempted",
    "DeletionByTaintManager": "NodeLost",
    "DeletionByPodGC": "NodeLost",
    "EvictionByEvictionAPI": "PodEvicted",
    "TerminationByKubelet": "PodEvicted",
    # Kueue stops a workload's pods (preemption, PodsReady timeout) with a TerminationTarget condition.
    "StoppedByKueue": "PodPreempted",
}


def _training_container(pod: Mapping[str, Any]) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    names = [c.get("name") for c in containers]
    if constants.DEFAULT_CONTAINER_NAME in names:
        return constants.DEFAULT_CONTAINER_NAME
    return names[0] if len(names) == 1 else None


def observe_pod(pod: Mapping[str, Any]) -> ObservedPod:
    """Read what reconcile needs from a pod object: identity, phase, exit code, disruption cause."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    rtype = next((t for t in ReplicaType if t.tf_name == labels.get(constants.LABEL_REPLICA_TYPE)), None)
    container = _training_container(pod)
    statuses = {c.get("name"): c for c in status.get("containerStatuses") or []}
    cstatus = statuses.get(container) or (next(iter(statuses.values())) if len(statuses) == 1 else {})
    terminated = ((cstatus or {}).get("state") or {}).get("terminated") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    disruption: str | None = None
    disruption_message = status.get("message") or ""
    target = conditions.get("DisruptionTarget")
    if not (target and target.get("status") == "True"):
        target = conditions.get("TerminationTarget")  # Kueue's own condition before it deletes the pods
    if target and target.get("status") == "True":
        disruption = _DISRUPTION_REASONS.get(target.get("reason") or "", "PodDisrupted")
        disruption_message = target.get("message") or disruption_message
    if status.get("reason") == "Evicted":
        disruption = "PodEvicted"
    if status.get("reason") == "NodeLost" or status.get("phase") == "Unknown":
        disruption = "NodeLost"
    ready_cond = conditions.get("Ready")
    phase = status.get("phase") or "Pending"
    ready = phase == "Running" and (ready_cond is None or ready_cond.get("status") == "True")
    finished_at = parse_time(terminated.get("finishedAt"))
    if finished_at is None and target:
        finished_at = parse_time(target.get("lastTransitionTime"))
    try:
        attempt = int(labels.get(constants.LABEL_ATTEMPT, "0"))
        index = int(labels.get(constants.LABEL_REPLICA_INDEX, "0"))
    except ValueError:
        attempt, index = -1, 0
    exit_code = terminated.get("exitCode")
    all_statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    restarts = sum(int(c.get("restartCount") or 0) for c in all_statuses if isinstance(c.get("restartCount"), int))
    return ObservedPod(
        name=str(meta.get("name")),
        rtype=rtype,
        index=index,
        attempt=attempt,
        phase=phase,
        terminating=bool(meta.get("deletionTimestamp")),
        deletion_deadline=parse_time(meta.get("deletionTimestamp")),
        ready=ready,
        container=container,
        exit_code=int(exit_code) if isinstance(exit_code, int) else None,
        finished_at=finished_at,
        disruption=disruption,
        disruption_message=disruption_message,
        node=(pod.get("spec") or {}).get("nodeName"),
        restarts=restarts,
        last_restart=_last_restart(all_statuses),
        exit_message=str(terminated.get("message") or ""),
        exit_reason=terminated.get("reason"),
    )


def _last_restart(statuses: Sequence[Mapping[str, Any]]) -> str:
    """What the most recently restarted container last ended with: its exception line (or last words) and a hint
    for a well-known TensorFlow failure, from its termination message."""
    restarted = [c for c in statuses if int(c.get("restartCount") or 0) > 0]
    ended = [(c, ((c.get("lastState") or {}).get("terminated") or {})) for c in restarted]
    ended = [(c, t) for c, t in ended if t]
    if not ended:
        return ""
    container, last = max(ended, key=lambda ct: str(ct[1].get("finishedAt") or ""))
    code, reason = last.get("exitCode"), last.get("reason")
    text = f"container {container.get('name')} exited with code {code}"
    why = explain(str(last.get("message") or ""), code if isinstance(code, int) else None, reason)
    if not why.startswith(":") and reason:
        text += f" ({reason})"
    return text + why


# ---------------------------------------------------------------- conditions


class _Ctx:
    """Mutable scratch state of one reconcile call: the status being built, actions, requeue deadline."""

    def __init__(self, status: TFJobStatus, now: datetime, options: ReconcileOptions) -> None:
        self.status = status
        self.now = now
        self.options = options
        self.actions: list[Action] = []
        self.requeue: float | None = None

    @property
    def stamp(self) -> str:
        return format_time(self.now)

    def requeue_at(self, when: datetime) -> None:
        seconds = max((when - self.now).total_seconds(), 0.0)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def condition(self, ctype: JobConditionType) -> JobCondition | None:
        return next((c for c in self.status.conditions if c.type == ctype), None)

    def is_true(self, ctype: JobConditionType) -> bool:
        cond = self.condition(ctype)
        return cond is not None and cond.status == "True"

    def set(self, ctype: JobConditionType, true: bool, reason: str, message: str) -> bool:
        """Set a condition; True if its status changed. A condition becoming true moves last (it is the state)."""
        value = "True" if true else "False"
        cond = self.condition(ctype)
        if cond is None:
            if not true:
                return False
            cond = JobCondition(type=ctype, status=value, reason=reason, message=message,
                                lastUpdateTime=self.stamp, lastTransitionTime=self.stamp)
            self.status.conditions.append(cond)
            return True
        if cond.status == value:
            if (cond.reason, cond.message) != (reason, message):
                cond.reason, cond.message, cond.lastUpdateTime = reason, message, self.stamp
            return False
        cond.status, cond.reason, cond.message = value, reason, message
        cond.lastUpdateTime = cond.lastTransitionTime = self.stamp
        if true:
            self.status.conditions.remove(cond)
            self.status.conditions.append(cond)
        return True

    def transition(self, ctype: JobConditionType, reason: str, message: str,
                   event_type: Literal["Normal", "Warning"] = "Normal") -> bool:
        """Make a condition true and, if that is a change, post an Event saying so."""
        changed = self.set(ctype, True, reason, message)
        if changed:
            self.event(event_type, reason, message, ctype)
        return changed

    def event(self, event_type: Literal["Normal", "Warning"], reason: str, message: str,
              condition: JobConditionType | None = None) -> None:
        self.actions.append(EmitEvent(event_type, reason, message, condition))


# ---------------------------------------------------------------- the function


def reconcile(
    obj: Mapping[str, Any] | JobView,
    pods: Sequence[Mapping[str, Any]],
    now: datetime,
    options: ReconcileOptions | None = None,
) -> Decision:
    """Decide the job's status and the actions that move it towards its spec, from the job and its live pods.

    The controller passes the :class:`JobView` it already parsed (one parse per reconcile); a plain job object is
    parsed here (the table tests do that).
    """
    options = options or ReconcileOptions()
    view = obj if isinstance(obj, JobView) else view_job(obj)
    body, prior = view.obj, view.status
    group, managed_by = apigroups.group_of(body), apigroups.manager_of(body)
    if not apigroups.managed_here(group, managed_by, options.kubeflow_api):
        return Decision(prior, managed=False)
    ctx = _Ctx(prior.model_copy(deep=True), now, options)
    if not prior.conditions and apigroups.reads_kubeflow_manager_as_ours(group, managed_by):
        ctx.event("Normal", "ManagedByKubeflowValue",
                  f"runPolicy.managedBy {managed_by} on a {group.api_version} TFJob: read as "
                  f"{apigroups.MANAGED_BY_TFJOB}, this operator manages the job")
    meta = body.get("metadata") or {}
    name, uid = str(meta.get("name") or ""), meta.get("uid")
    observed = [observe_pod(p) for p in pods if owned_by(p, name, uid)]
    job = view.job
    if job is None or options.gang.problems:
        _invalid(ctx, body, observed, list(view.problems or options.gang.problems))
        return _decision(ctx, body, prior)
    ctx.status.observedGeneration = job.metadata.generation
    if _finished(ctx):
        _after_finish(ctx, job, observed)
    else:
        _lifecycle(ctx, job, observed)
    return _decision(ctx, body, prior)


def _decision(ctx: _Ctx, obj: Mapping[str, Any], prior: TFJobStatus) -> Decision:
    _printer_fields(ctx.status)
    status = ctx.status
    if status.model_copy(update={"lastReconcileTime": None}) != prior.model_copy(update={"lastReconcileTime": None}):
        status.lastReconcileTime = ctx.stamp  # only when something changed: a quiet reconcile writes nothing
    if apigroups.group_of(obj).kubeflow and (status.restartCount, status.failureRestarts) != (
            prior.restartCount, prior.failureRestarts):
        # Before any pod action: the next attempt's number must be stored before its pods are deleted.
        ctx.actions.insert(0, AnnotateJob(apigroups.counter_annotations(status.restartCount, status.failureRestarts)))
    return Decision(status, ctx.actions, ctx.requeue)


def _finished(ctx: _Ctx) -> bool:
    return finished(ctx.status)


def _printer_fields(status: TFJobStatus) -> None:
    true = [c for c in status.conditions if c.status == "True"]
    status.state = true[-1].type.value if true else None


# ---------------------------------------------------------------- invalid spec


def _invalid(ctx: _Ctx, obj: Mapping[str, Any], observed: list[ObservedPod], messages: list[str]) -> None:
    ctx.status.observedGeneration = (obj.get("metadata") or {}).get("generation")
    if _finished(ctx):
        _cleanup(ctx, observed, CleanPodPolicy.RUNNING)
    else:
        _finish(ctx, C.FAILED, "InvalidSpec", "; ".join(messages), "Warning", observed, CleanPodPolicy.RUNNING)
    run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
    ttl = run_policy.get("ttlSecondsAfterFinished") if isinstance(run_policy, Mapping) else None
    _ttl(ctx, ttl if isinstance(ttl, int) and ttl >= 0 else None)


def fail_job(obj: Mapping[str, Any], reason: str, message: str, now: datetime,
             pods: Sequence[Mapping[str, Any]] = (), run_policy: RunPolicy | None = None) -> Decision:
    """The job marked Failed with this reason (and its Warning Event), whatever else it holds; then, as for any
    finished job, its pods cleaned up per `run_policy.cleanPodPolicy` and its TTL honoured. For a job the
    operator cannot reconcile at all (see `reconcile_errors`): nothing here renders or parses beyond the pods,
    so a reconcile that keeps raising still stops the job's pods. No run policy (a spec that does not parse)
    cleans as an invalid spec does: the pods still running."""
    prior = prior_status(obj)
    ctx = _Ctx(prior.model_copy(deep=True), now, ReconcileOptions())
    meta = obj.get("metadata") or {}
    observed = [observe_pod(p) for p in pods if owned_by(p, str(meta.get("name") or ""), meta.get("uid"))]
    policy = run_policy.cleanPodPolicy if run_policy is not None else CleanPodPolicy.RUNNING
    if _finished(ctx):
        _cleanup(ctx, observed, policy)
    else:
        _finish(ctx, C.FAILED, reason, message, "Warning", observed, policy)
    _ttl(ctx, run_policy.ttlSecondsAfterFinished if run_policy is not None else None)
    return _decision(ctx, obj, prior)


# ---------------------------------------------------------------- finished jobs


def _finish(ctx: _Ctx, ctype: JobConditionType, reason: str, message: str,
            event_type: Literal["Normal", "Warning"], observed: list[ObservedPod], policy: CleanPodPolicy) -> None:
    ctx.transition(ctype, reason, message, event_type)
    for other in (C.RUNNING, C.RESTARTING, C.QUEUED):
        ctx.set(other, False, reason, message)
    ctx.status.completionTime = ctx.status.completionTime or ctx.stamp
    if ctype == C.SUCCEEDED and ctx.status.progress is not None:
        # The chief's endpoint is gone with it: say so rather than show the last figures read as current.
        ctx.status.progress = ctx.status.progress.model_copy(update={"summary": "done"})
    _cleanup(ctx, observed, policy)


def _after_finish(ctx: _Ctx, job: TFJob, observed: list[ObservedPod]) -> None:
    """A finished job: pods are cleaned up per cleanPodPolicy, never recreated; TTL deletes the job."""
    _cleanup(ctx, observed, job.spec.runPolicy.cleanPodPolicy)
    _replica_statuses(ctx, job, [p for p in observed if p.attempt == ctx.status.restartCount])
    _ttl(ctx, job.spec.runPolicy.ttlSecondsAfterFinished)


def _cleanup(ctx: _Ctx, observed: list[ObservedPod], policy: CleanPodPolicy) -> None:
    if policy == CleanPodPolicy.NONE:
        return
    for pod in observed:
        if pod.terminating:
            _force_if_stuck(ctx, pod)
        elif policy == CleanPodPolicy.ALL or pod.phase in ("Pending", "Running", "Unknown"):
            ctx.actions.append(DeletePod(pod.name))


def _ttl(ctx: _Ctx, ttl: int | None) -> None:
    completed = parse_time(ctx.status.completionTime)
    if ttl is None or completed is None:
        return
    expires = completed + timedelta(seconds=ttl)
    if ctx.now >= expires:
        ctx.actions.append(DeleteJob(f"ttlSecondsAfterFinished={ttl} passed since {ctx.status.completionTime}"))
    else:
        ctx.requeue_at(expires)


def _force_if_stuck(ctx: _Ctx, pod: ObservedPod) -> None:
    if pod.deletion_deadline is None:
        return
    limit = pod.deletion_deadline + timedelta(seconds=ctx.options.terminating_timeout)
    if ctx.now >= limit:
        ctx.actions.append(DeletePod(pod.name, force=True))
    else:
        ctx.requeue_at(limit)


# ---------------------------------------------------------------- running jobs


def recorded_replicas(job: TFJob) -> dict[str, int] | None:
    raw = job.metadata.annotations.get(constants.ANNOTATION_GANG_REPLICAS)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else None


def spec_replicas(job: TFJob) -> dict[str, int]:
    return {rtype.value: spec.replicas for rtype, spec in job.replica_specs()}


def effective_job(job: TFJob) -> tuple[TFJob, str | None]:
    """The job as its gang was created (a running gang is never resized) and, if the spec differs, why."""
    recorded = recorded_replicas(job)
    wanted = spec_replicas(job)
    if recorded is None or recorded == wanted:
        return job, None
    changes = ", ".join(
        f"{t}.replicas {recorded.get(t, 0)}→{wanted.get(t, 0)}"
        for t in sorted(set(recorded) | set(wanted))
        if recorded.get(t, 0) != wanted.get(t, 0)
    )
    message = (f"replicas change refused ({changes}): MultiWorkerMirroredStrategy cannot resize a running gang; "
               f"the job keeps its {sum(recorded.values())} pods "
               "(suspend the job, then resume it, to apply the change)")
    effective = job.model_copy(deep=True)
    for rtype, spec in effective.replica_specs():
        spec.replicas = recorded.get(rtype.value, spec.replicas)
    return effective, message


def _lifecycle(ctx: _Ctx, job: TFJob, observed: list[ObservedPod]) -> None:
    status = ctx.status
    if job.spec.runPolicy.suspend:
        _suspend(ctx, job, observed)
        return
    if ctx.is_true(C.SUSPENDED):
        ctx.set(C.SUSPENDED, False, "JobResumed", "spec.runPolicy.suspend is false: the pods are recreated")
        ctx.event("Normal", "JobResumed", "Job resumed: recreating its pods")
    if status.startTime is None:
        status.startTime = ctx.stamp
    job, refusal = effective_job(job)
    attempt = status.restartCount
    current = [p for p in observed if p.attempt == attempt]
    stale = [p for p in observed if p.attempt != attempt]
    _replica_statuses(ctx, job, current)
    if _deadline_passed(ctx, job, observed):
        return
    for pod in observed:
        if pod.terminating:
            _force_if_stuck(ctx, pod)
    if stale:
        # The next attempt reuses these names: wait until the old pods are gone.
        ctx.actions.extend(DeletePod(p.name) for p in stale if not p.terminating)
        return
    if ctx.options.pod_create_error:
        _finish(ctx, C.FAILED, "PodCreationFailed", ctx.options.pod_create_error, "Warning", observed,
                job.spec.runPolicy.cleanPodPolicy)
        return
    if _succeeded(ctx, job, current, observed):
        return
    if _failures(ctx, job, current, observed):
        return
    _create_missing(ctx, job, current, refusal)
    _running(ctx, job, current, refusal)


def _suspend(ctx: _Ctx, job: TFJob, observed: list[ObservedPod]) -> None:
    message = "spec.runPolicy.suspend is true: pods deleted, job kept (set it to false to resume)"
    ctx.transition(C.SUSPENDED, "JobSuspended", message)
    for other in (C.RUNNING, C.RESTARTING, C.QUEUED):
        ctx.set(other, False, "JobSuspended", message)
    # activeDeadlineSeconds counts running time: it starts again on resume.
    ctx.status.startTime = None
    for pod in observed:
        if pod.terminating:
            _force_if_stuck(ctx, pod)
        else:
            ctx.actions.append(DeletePod(pod.name))
    if constants.ANNOTATION_GANG_REPLICAS in job.metadata.annotations:
        # While suspended the gang may be resized: the next creation records the new size.
        ctx.actions.insert(0, AnnotateJob({constants.ANNOTATION_GANG_REPLICAS: None}))
    _replica_statuses(ctx, job, [p for p in observed if p.attempt == ctx.status.restartCount])


def _deadline_passed(ctx: _Ctx, job: TFJob, observed: list[ObservedPod]) -> bool:
    limit = job.spec.runPolicy.activeDeadlineSeconds
    started = parse_time(ctx.status.startTime)
    if limit is None or started is None:
        return False
    deadline = started + timedelta(seconds=limit)
    if ctx.now < deadline:
        ctx.requeue_at(deadline)
        return False
    message = f"the job ran longer than activeDeadlineSeconds={limit} (started {ctx.status.startTime})"
    _finish(ctx, C.FAILED, "DeadlineExceeded", message, "Warning", observed, job.spec.runPolicy.cleanPodPolicy)
    return True


def _succeeded(ctx: _Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod]) -> bool:
    """Success as Kubeflow decides it: the chief when there is one (successPolicy AllWorkers only applies without
    a chief); else worker 0, or every worker under AllWorkers. The deciding pod's exit 0 wins over other pods'
    failures seen at the same time: training finished and the chief saved its work (the message names them)."""
    by_name = {p.name: p for p in current}
    if job.spec.successPolicy == SuccessPolicy.ALL_WORKERS and not job.has_chief():
        names = [pod_name(job.name, ReplicaType.WORKER, i) for i in range(job.spec.tfReplicaSpecs[
            ReplicaType.WORKER].replicas)]
        if not all(n in by_name and by_name[n].phase == "Succeeded" for n in names):
            return False
        reason, message = "AllWorkersSucceeded", f"all {len(names)} workers exited 0"
    else:
        chief = by_name.get(chief_pod_name(job))
        if chief is None or chief.phase != "Succeeded":
            return False
        who = "chief" if chief.rtype == ReplicaType.CHIEF else "worker 0"
        reason = "ChiefSucceeded" if chief.rtype == ReplicaType.CHIEF else "WorkerSucceeded"
        message = f"the {who} ({chief.name}) exited 0"
        if job.spec.successPolicy == SuccessPolicy.ALL_WORKERS:
            message += " (successPolicy AllWorkers does not apply to a job with a Chief: the chief decides)"
    failed = sorted(p.name for p in current if p.failed)
    if failed:
        message += f"; {', '.join(failed)} failed, which does not change the outcome"
    deciding = by_name.get(chief_pod_name(job))
    if deciding is not None and (final := final_progress(deciding.exit_message, ctx.now)) is not None:
        ctx.status.progress = final  # its last figures, which reads an interval apart may have missed
    _finish(ctx, C.SUCCEEDED, reason, message, "Normal", observed, job.spec.runPolicy.cleanPodPolicy)
    return True


@dataclass(frozen=True)
class _Failure:
    pod: ObservedPod
    #: disruption (never counts towards backoffLimit), retryable (counts) or permanent (fails the job).
    kind: Literal["disruption", "retryable", "permanent"]
    reason: str
    message: str

    @property
    def gang(self) -> bool:
        return self.pod.rtype in (ReplicaType.CHIEF, ReplicaType.WORKER)

    def order(self) -> tuple[float, int, str]:
        """Earliest first; at equal times the cause before its consequence (a peer's 'peer lost' exit)."""
        t = self.pod.finished_at.timestamp() if self.pod.finished_at else math.inf
        code = self.pod.exit_code
        if self.kind == "disruption":
            rank = 0
        elif code in exit_codes.PEER_FAILURE:
            rank = 3
        else:
            rank = 1 if self.kind == "permanent" else 2
        return (t, rank, self.pod.name)


def _describe_exit(pod: ObservedPod) -> str:
    code = pod.exit_code
    meaning = f" ({exit_codes.MEANINGS[code]})" if code in exit_codes.MEANINGS else ""
    return f"pod {pod.label} exited with code {code}{meaning}{explain(pod.exit_message, code, pod.exit_reason)}"


def classify(pod: ObservedPod, policy: RestartPolicy) -> _Failure:
    """Why a pod failed and what that means under its replica type's restartPolicy."""
    if pod.disruption:
        detail = f": {pod.disruption_message}" if pod.disruption_message else ""
        where = f" on node {pod.node}" if pod.disruption == "NodeLost" and pod.node else ""
        words = {"PodEvicted": "was evicted", "PodPreempted": "was preempted", "NodeLost": "lost its node"}
        text = f"pod {pod.label} {words.get(pod.disruption, 'was disrupted')}{where}{detail}"
        return _Failure(pod, "disruption", pod.disruption, text)
    if policy == RestartPolicy.NEVER:
        what = _describe_exit(pod) if pod.exit_code is not None else f"pod {pod.label} failed"
        return _Failure(pod, "permanent", "RestartPolicyNever", f"{what}; restartPolicy Never")
    if policy != RestartPolicy.NEVER and pod.exit_code == exit_codes.STALLED:
        return _Failure(pod, "retryable", "TrainingStalled",
                        f"{_describe_exit(pod)}: no training progress within runPolicy.stallTimeoutSeconds "
                        "(its log shows where it hung)")
    if policy == RestartPolicy.EXIT_CODE:
        if pod.exit_code is not None and exit_codes.is_retryable(pod.exit_code):
            return _Failure(pod, "retryable", "RetryableExitCode", _describe_exit(pod))
        if pod.exit_code is None:
            return _Failure(pod, "retryable", "PodFailed", f"pod {pod.label} failed without an exit code")
        return _Failure(pod, "permanent", "NonRetryableExitCode",
                        f"{_describe_exit(pod)}; under restartPolicy ExitCode codes 1-127 are permanent")
    what = _describe_exit(pod) if pod.exit_code is not None else f"pod {pod.label} failed"
    return _Failure(pod, "retryable", "PodFailed", f"{what}; restartPolicy {policy.value}")


def backoff_used(status: TFJobStatus, current: Sequence[ObservedPod]) -> int:
    """Failures that count towards runPolicy.backoffLimit: gang restarts caused by failures, plus in-place
    container restarts (restartPolicy OnFailure/Always) of the current attempt's pods, as Kubeflow sums them."""
    return status.failureRestarts + sum(p.restarts for p in current if not p.terminating)


def _backoff_exceeded(ctx: _Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod]) -> bool:
    """The one backoffLimit rule: the job fails once its failures exceed the limit (limit N allows N retries).
    Here for in-place restarts; `_restart_gang` applies it to a failure that would restart the gang."""
    limit = job.spec.runPolicy.backoffLimit
    restarted = [p for p in current if p.restarts and not p.terminating]
    if limit is None or not restarted or backoff_used(ctx.status, current) <= limit:
        return False
    worst = max(restarted, key=lambda p: p.restarts)
    times = "once" if worst.restarts == 1 else f"{worst.restarts} times"
    message = (f"pod {worst.label} restarted in place {times}"
               + (f", last {worst.last_restart}" if worst.last_restart else "")
               + f"; backoffLimit {limit} exceeded ({backoff_used(ctx.status, current)} failures: "
               f"{sum(p.restarts for p in restarted)} in-place restarts, {ctx.status.failureRestarts} gang restarts)")
    _finish(ctx, C.FAILED, "BackoffLimitExceeded", message, "Warning", observed, job.spec.runPolicy.cleanPodPolicy)
    return True


def _failures(ctx: _Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod]) -> bool:
    """Handle failed pods of the current attempt, earliest first; True if the job stopped or restarts."""
    if _backoff_exceeded(ctx, job, current, observed):
        return True
    failures = [classify(p, job.spec.tfReplicaSpecs[p.rtype].restartPolicy)
                for p in current if p.failed and p.rtype in job.spec.tfReplicaSpecs]
    if ctx.is_true(C.RUNNING):
        failures.extend(_vanished(job, current))
    for failure in sorted(failures, key=_Failure.order):
        if failure.kind == "permanent":
            _finish(ctx, C.FAILED, failure.reason, failure.message, "Warning", observed,
                    job.spec.runPolicy.cleanPodPolicy)
            return True
        if failure.gang:
            return _restart_gang(ctx, job, current, observed, failure)
        _restart_alone(ctx, failure)
    return False


def _vanished(job: TFJob, current: list[ObservedPod]) -> list[_Failure]:
    """Chief/worker pods of a gang that was all running and is now missing: deleted behind our back."""
    present = {p.name for p in current}
    out = []
    for rtype, spec in job.replica_specs():
        if rtype not in (ReplicaType.CHIEF, ReplicaType.WORKER):
            continue
        for i in range(spec.replicas):
            name = pod_name(job.name, rtype, i)
            if name not in present:
                pod = ObservedPod(name, rtype, i, -1, "Unknown", True, None, False, None, None, None,
                                  "PodDeleted", "", None)
                out.append(_Failure(pod, "disruption", "PodDeleted", f"pod {name} ({rtype.value} {i}) was deleted"))
    return out


def _restart_gang(ctx: _Ctx, job: TFJob, current: list[ObservedPod], observed: list[ObservedPod],
                  failure: _Failure) -> bool:
    status = ctx.status
    limit = job.spec.runPolicy.backoffLimit
    used = backoff_used(status, current)
    if failure.kind == "retryable" and limit is not None and used >= limit:
        message = f"{failure.message}; backoffLimit {limit} reached ({used} failures retried already)"
        _finish(ctx, C.FAILED, "BackoffLimitExceeded", message, "Warning", observed,
                job.spec.runPolicy.cleanPodPolicy)
        return True
    status.restartCount += 1
    if failure.kind == "retryable":
        status.failureRestarts += 1
    budget = f"{status.failureRestarts}/{limit}" if limit is not None else f"{status.failureRestarts}"
    message = (f"{failure.message}; restarting the whole gang as attempt {status.restartCount} "
               f"(restarts {status.restartCount}, failure restarts {budget})")
    ctx.set(C.RESTARTING, False, failure.reason, message)  # so the event below fires on every restart
    ctx.set(C.RESTARTING, True, failure.reason, message)
    ctx.event("Warning", failure.reason, message, C.RESTARTING)
    ctx.set(C.RUNNING, False, "Restarting", message)
    ctx.actions.extend(DeletePod(p.name) for p in current if not p.terminating)
    _replica_statuses(ctx, job, [])  # the new attempt has no pods yet
    return True


def _restart_alone(ctx: _Ctx, failure: _Failure) -> None:
    pod = failure.pod
    if not pod.terminating:
        ctx.actions.append(DeletePod(pod.name))
        ctx.event("Warning", "ReplicaRestarting", f"{failure.message}; restarting this pod alone")


def _create_missing(ctx: _Ctx, job: TFJob, current: list[ObservedPod], refusal: str | None) -> None:
    present = {p.name for p in current}
    gang = ctx.options.gang
    names_needed = [pod_name(job.name, t, i) for t, s in job.replica_specs() for i in range(s.replicas)]
    missing = [n for n in names_needed if n not in present]
    if not missing:
        return
    if not gang.ready_to_create_pods:
        # The PodGroup must exist before its scheduler can admit it; the pods wait until it does.
        ctx.actions.extend(CreateObject(dict(obj)) for obj in gang.missing_groups)
        ctx.transition(C.QUEUED, "GangQueued", gang.queued_reason or "waiting for the gang backend")
        if gang.recheck_after is not None:
            # Just created: read it back soon; else as often as the backend asks.
            wait = min(gang.recheck_after, 1.0) if gang.missing_groups else gang.recheck_after
            ctx.requeue_at(ctx.now + timedelta(seconds=wait))
        return
    rendered = ctx.options.rendered or _render(ctx, job, names_needed)
    if {p["metadata"]["name"] for p in rendered.pods} != set(names_needed) or any(
            p["metadata"]["labels"].get(constants.LABEL_ATTEMPT) != str(ctx.status.restartCount)
            for p in rendered.pods):
        raise ValueError(f"the rendered pods are not those of attempt {ctx.status.restartCount}: {names_needed}")
    ctx.actions.append(CreateObject(rendered.service))
    ctx.actions.extend(CreateObject(dict(obj)) for obj in gang.group_objects(job, rendered.pods))
    # Each pod records the gang size it belongs to (and, in loopback mode, every port of the gang): an operator
    # that restarts mid-creation reads them back from the pods it finds, so no write to the job is needed.
    record = {constants.ANNOTATION_GANG_REPLICAS: json.dumps(spec_replicas(job), sort_keys=True)}
    if ctx.options.loopback_ports is not None:
        record[constants.ANNOTATION_LOOPBACK_PORTS] = json.dumps(dict(ctx.options.loopback_ports), sort_keys=True)
    ctx.actions.extend(CreateObject(_annotated(gang.decorate_pod(job, pod), record)) for pod in rendered.pods
                       if pod["metadata"]["name"] in missing)
    if not ctx.is_true(C.CREATED):
        message = f"creating the Service and {len(names_needed)} pods of TFJob {job.namespace}/{job.name}"
        if present:
            # Pods exist but Created is not in the status: an operator that stopped within the status hold
            # (controller.HOLD_SECONDS) created them and announced it already.
            ctx.set(C.CREATED, True, "JobCreated", message)
        else:
            ctx.transition(C.CREATED, "JobCreated", message)


def _annotated(obj: dict[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {**obj, "metadata": meta}


def _render(ctx: _Ctx, job: TFJob, names_needed: list[str]) -> Rendered:
    ports = ctx.options.loopback_ports
    if ports is not None and not set(names_needed) <= set(ports):
        raise ValueError(f"loopback addressing: no port recorded for {sorted(set(names_needed) - set(ports))}")
    return render(job, RenderOptions(attempt=ctx.status.restartCount, cluster_domain=ctx.options.cluster_domain,
                                     loopback_ports=ports))


def _running(ctx: _Ctx, job: TFJob, current: list[ObservedPod], refusal: str | None) -> None:
    announced = any(c.status == "True" and c.message == refusal for c in ctx.status.conditions)
    total = job.total_replicas()
    running = [p for p in current if p.phase == "Running" and not p.terminating]
    if len(running) == total and total > 0:
        message = f"all {total} pods of attempt {ctx.status.restartCount} are running"
        if refusal is not None and ctx.is_true(C.RUNNING):
            ctx.transition(C.RUNNING, "ReplicasChangeRefused", refusal)
        elif ctx.status.restartCount > 0:
            ctx.transition(C.RUNNING, "AllPodsRunning", message)
        else:
            # The first attempt running is the expected path: the condition (kubectl's STATE) says it, no Event, so
            # a job that goes well posts two (JobCreated, the outcome). Running again after a restart is news.
            ctx.set(C.RUNNING, True, "AllPodsRunning", message)
        ctx.set(C.RESTARTING, False, "AllPodsRunning", message)
        ctx.set(C.QUEUED, False, "AllPodsRunning", message)
    elif ctx.options.gang.queued_reason and current:
        ctx.transition(C.QUEUED, "GangQueued", ctx.options.gang.queued_reason)
    elif ctx.options.gang.ready_to_create_pods:
        ctx.set(C.QUEUED, False, "GangAdmitted", "the gang backend released the pods")
    _refuse_resize(ctx, refusal, announced)


def _refuse_resize(ctx: _Ctx, refusal: str | None, announced: bool) -> None:
    """A replicas change on a running gang is refused: the state condition says so, and one Warning Event."""
    true = [c for c in ctx.status.conditions if c.status == "True"]
    if refusal is None:
        for cond in true:
            if cond.reason == "ReplicasChangeRefused":
                cond.reason, cond.message = "ReplicasChangeReverted", "spec replicas match the running gang again"
        return
    if not announced:
        ctx.event("Warning", "ReplicasChangeRefused", refusal)
    if not true or true[-1].message == refusal:
        return
    for cond in true:
        if cond.reason == "ReplicasChangeRefused":
            cond.reason = "ReplicasChangeSuperseded"
    true[-1].reason, true[-1].message, true[-1].lastUpdateTime = "ReplicasChangeRefused", refusal, ctx.stamp


def _replica_statuses(ctx: _Ctx, job: TFJob, current: list[ObservedPod]) -> None:
    statuses: dict[str, ReplicaStatus] = {}
    for rtype, _ in job.replica_specs():
        mine = [p for p in current if p.rtype == rtype]
        statuses[rtype.value] = ReplicaStatus(
            active=sum(p.active for p in mine),
            ready=sum(p.ready and not p.terminating for p in mine),
            succeeded=sum(p.phase == "Succeeded" for p in mine),
            failed=sum(p.phase in ("Failed", "Unknown") for p in mine),
        )
    ctx.status.replicaStatuses = statuses
    ready = sum(s.ready for s in statuses.values())
    ctx.status.workers = f"{ready}/{job.total_replicas()}"


def utcnow() -> datetime:
    return datetime.now(UTC)
