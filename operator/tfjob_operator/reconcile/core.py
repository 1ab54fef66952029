"""The TFJob lifecycle as one pure function: (job, observed pods, now) → new status + actions + when to look again.

docs/design.md §5 is the specification; `tests/unit/test_reconcile.py` pins every rule in one table. No I/O here: the
controller reads the job and its pods, calls :func:`reconcile`, then writes the status first and carries out the
actions in order (so a crash between the two never loses a decision such as "this is attempt 3"). The policies
live beside this module, one each: `success_policy`, `failure_policy`, `lifecycle`, `resize`.

The current gang attempt is `status.restartCount`; pods carry it in the `tfjob.dev/attempt` label. Pods of any
other attempt are stale: they are deleted and nothing new is created until they are gone, because the next
attempt reuses their names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tfjob_operator.api import CleanPodPolicy, JobConditionType, RunPolicy, TFJob, TFJobStatus, apigroups, constants
from tfjob_operator.api.observed import JobView, finished, owned_by, prior_status, view_job
from tfjob_operator.reconcile import elastic
from tfjob_operator.reconcile.access import note_not_authorized
from tfjob_operator.reconcile.actions import AnnotateJob, CreateObject, Decision, DeletePod
from tfjob_operator.reconcile.conditions import Ctx, pods_message, refresh_running, replica_statuses
from tfjob_operator.reconcile.dynamic_workers import scale_dynamic_workers
from tfjob_operator.reconcile.failure_policy import handle_failures
from tfjob_operator.reconcile.inputs import ReconcileOptions
from tfjob_operator.reconcile.lifecycle import (
    after_finish,
    cleanup,
    deadline_passed,
    finish,
    force_if_stuck,
    suspend,
    ttl_after_finished,
)
from tfjob_operator.reconcile.observe import ObservedPod, observe_pod
from tfjob_operator.reconcile.reasons import Reason
from tfjob_operator.reconcile.render import Rendered, RenderOptions, pod_name, render
from tfjob_operator.reconcile.resize import effective_job, refuse_resize, spec_replicas
from tfjob_operator.reconcile.success_policy import succeeded

C = JobConditionType


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
    ctx = Ctx(prior.model_copy(deep=True), now, options)
    if not prior.conditions and apigroups.reads_kubeflow_manager_as_ours(group, managed_by):
        ctx.event("Normal", Reason.MANAGED_BY_KUBEFLOW_VALUE,
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
    if finished(ctx.status):
        after_finish(ctx, job, observed)
    else:
        _lifecycle(ctx, job, observed)
    return _decision(ctx, body, prior)


def _decision(ctx: Ctx, obj: Mapping[str, Any], prior: TFJobStatus) -> Decision:
    _printer_fields(ctx.status)
    status = ctx.status
    if status.model_copy(update={"lastReconcileTime": None}) != prior.model_copy(update={"lastReconcileTime": None}):
        status.lastReconcileTime = ctx.stamp  # only when something changed: a quiet reconcile writes nothing
    if apigroups.group_of(obj).kubeflow and (status.restartCount, status.failureRestarts) != (
            prior.restartCount, prior.failureRestarts):
        # Before any pod action: the next attempt's number must be stored before its pods are deleted.
        ctx.actions.insert(0, AnnotateJob(apigroups.counter_annotations(status.restartCount, status.failureRestarts)))
    return Decision(status, ctx.actions, ctx.requeue)


def _printer_fields(status: TFJobStatus) -> None:
    true = [c for c in status.conditions if c.status == "True"]
    status.state = true[-1].type.value if true else None
    if status.elastic is not None:
        status.elastic.summary = elastic.summary(status.elastic)


def _invalid(ctx: Ctx, obj: Mapping[str, Any], observed: list[ObservedPod], messages: list[str]) -> None:
    ctx.status.observedGeneration = (obj.get("metadata") or {}).get("generation")
    if finished(ctx.status):
        cleanup(ctx, observed, CleanPodPolicy.RUNNING)
    else:
        finish(ctx, C.FAILED, Reason.INVALID_SPEC, "; ".join(messages), "Warning", observed, CleanPodPolicy.RUNNING)
    run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
    ttl = run_policy.get("ttlSecondsAfterFinished") if isinstance(run_policy, Mapping) else None
    ttl_after_finished(ctx, ttl if isinstance(ttl, int) and ttl >= 0 else None)


def fail_job(obj: Mapping[str, Any], reason: Reason, message: str, now: datetime,
             pods: Sequence[Mapping[str, Any]] = (), run_policy: RunPolicy | None = None) -> Decision:
    """The job marked Failed with this reason (and its Warning Event), whatever else it holds; then, as for any
    finished job, its pods cleaned up per `run_policy.cleanPodPolicy` and its TTL honoured. For a job the
    operator cannot reconcile at all (see `reconcile_errors`): nothing here renders or parses beyond the pods,
    so a reconcile that keeps raising still stops the job's pods. No run policy (a spec that does not parse)
    cleans as an invalid spec does: the pods still running."""
    prior = prior_status(obj)
    ctx = Ctx(prior.model_copy(deep=True), now, ReconcileOptions())
    meta = obj.get("metadata") or {}
    observed = [observe_pod(p) for p in pods if owned_by(p, str(meta.get("name") or ""), meta.get("uid"))]
    policy = run_policy.cleanPodPolicy if run_policy is not None else CleanPodPolicy.RUNNING
    if finished(ctx.status):
        cleanup(ctx, observed, policy)
    else:
        finish(ctx, C.FAILED, reason, message, "Warning", observed, policy)
    ttl_after_finished(ctx, run_policy.ttlSecondsAfterFinished if run_policy is not None else None)
    return _decision(ctx, obj, prior)


def _lifecycle(ctx: Ctx, job: TFJob, observed: list[ObservedPod]) -> None:
    """A job not finished: suspend or resume, the deadline, stale pods, success, failures, then create what is
    missing and say whether the gang runs. The first rule that decides ends the reconcile."""
    status = ctx.status
    if job.spec.runPolicy.suspend:
        suspend(ctx, job, observed)
        return
    if ctx.is_true(C.SUSPENDED):
        ctx.set(C.SUSPENDED, False, Reason.JOB_RESUMED, "spec.runPolicy.suspend is false: the pods are recreated")
        ctx.event("Normal", Reason.JOB_RESUMED, "Job resumed: recreating its pods")
    if status.startTime is None:
        status.startTime = ctx.stamp
    attempt = status.restartCount
    current = [p for p in observed if p.attempt == attempt]
    stale = [p for p in observed if p.attempt != attempt]
    spec_job = job
    if elastic.is_elastic(job) and not current and not elastic.blocking(stale):
        elastic.start_attempt(ctx, job)  # the width of an attempt is chosen before its pods exist
    job, refusal = effective_job(job, status)
    replica_statuses(ctx, job, current)
    refresh_running(ctx, job, current)
    if deadline_passed(ctx, job, observed):
        return
    for pod in observed:
        if pod.terminating:
            force_if_stuck(ctx, pod)
    if stale:
        # The next attempt reuses these names: wait until the old pods are gone.
        ctx.actions.extend(DeletePod(p.name) for p in stale if not p.terminating)
        if not elastic.is_elastic(spec_job) or elastic.blocks_names(job, stale):
            return
    if ctx.options.pod_create_error:
        finish(ctx, C.FAILED, Reason.POD_CREATION_FAILED, ctx.options.pod_create_error, "Warning", observed,
               job.spec.runPolicy.cleanPodPolicy)
        return
    if succeeded(ctx, job, current, observed):
        return
    if handle_failures(ctx, job, current, observed):
        return
    if elastic.is_elastic(spec_job) and elastic.check_running(ctx, spec_job, current):
        return
    if job.spec.enableDynamicWorker and scale_dynamic_workers(ctx, job, current):
        return
    _create_missing(ctx, job, current)
    _running(ctx, job, current, refusal)
    note_not_authorized(ctx, ctx.options.not_authorized)


def _create_missing(ctx: Ctx, job: TFJob, current: list[ObservedPod]) -> None:
    """Create the Service, gang objects and pods of the current attempt not there yet (or, while the gang
    backend holds them, only its group objects, and say the job is Queued)."""
    present = {p.name for p in current}
    gang = ctx.options.gang
    names_needed = [pod_name(job.name, t, i) for t, s in job.replica_specs() for i in range(s.replicas)]
    missing = [n for n in names_needed if n not in present]
    if not missing:
        return
    if not gang.ready_to_create_pods:
        # The PodGroup must exist before its scheduler can admit it; the pods wait until it does.
        ctx.actions.extend(CreateObject(dict(obj)) for obj in gang.missing_groups)
        ctx.transition(C.QUEUED, Reason.GANG_QUEUED, gang.queued_reason or "waiting for the gang backend")
        if gang.recheck_after is not None:
            # Just created: read it back soon; else as often as the backend asks.
            wait = min(gang.recheck_after, 1.0) if gang.missing_groups else gang.recheck_after
            ctx.requeue_at(ctx.now + timedelta(seconds=wait))
        return
    rendered = ctx.options.rendered
    if rendered is None or ({p["metadata"]["name"] for p in rendered.pods} != set(names_needed) and (
            elastic.is_elastic(job) or job.spec.enableDynamicWorker)):
        rendered = _render(ctx, job, names_needed)  # the width changed since the controller rendered it
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
            # (controller.status_cache.HOLD_SECONDS) created them and announced it already.
            ctx.set(C.CREATED, True, Reason.JOB_CREATED, message)
        else:
            ctx.transition(C.CREATED, Reason.JOB_CREATED, message)


def _annotated(obj: dict[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {**obj, "metadata": meta}


def _render(ctx: Ctx, job: TFJob, names_needed: list[str]) -> Rendered:
    ports = ctx.options.loopback_ports
    if ports is not None and not set(names_needed) <= set(ports):
        raise ValueError(f"loopback addressing: no port recorded for {sorted(set(names_needed) - set(ports))}")
    return render(job, RenderOptions(attempt=ctx.status.restartCount, cluster_domain=ctx.options.cluster_domain,
                                     loopback_ports=ports))


def _running(ctx: Ctx, job: TFJob, current: list[ObservedPod], refusal: str | None) -> None:
    """Running once every pod of the attempt runs; Queued while the gang backend holds them."""
    announced = any(c.status == "True" and c.message == refusal for c in ctx.status.conditions)
    total = job.total_replicas()
    running = [p for p in current if p.phase == "Running" and not p.terminating]
    if len(running) == total and total > 0:
        message = pods_message(job, current, ctx.status.restartCount)
        if refusal is not None and ctx.is_true(C.RUNNING):
            ctx.transition(C.RUNNING, Reason.REPLICAS_CHANGE_REFUSED, refusal)
        elif ctx.status.restartCount > 0:
            ctx.transition(C.RUNNING, Reason.ALL_PODS_RUNNING, message)
        else:
            # The first attempt running is the expected path: the condition (kubectl's STATE) says it, no Event, so
            # a job that goes well posts two (JobCreated, the outcome). Running again after a restart is news.
            ctx.set(C.RUNNING, True, Reason.ALL_PODS_RUNNING, message)
        ctx.set(C.RESTARTING, False, Reason.ALL_PODS_RUNNING, message)
        ctx.set(C.QUEUED, False, Reason.ALL_PODS_RUNNING, message)
    elif ctx.options.gang.queued_reason and current:
        ctx.transition(C.QUEUED, Reason.GANG_QUEUED, ctx.options.gang.queued_reason)
    elif ctx.options.gang.ready_to_create_pods:
        ctx.set(C.QUEUED, False, Reason.GANG_ADMITTED, "the gang backend released the pods")
    refuse_resize(ctx, refusal, announced)


def utcnow() -> datetime:
    return datetime.now(UTC)
