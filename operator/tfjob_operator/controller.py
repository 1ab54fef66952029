"""The controller runtime: a per-job work queue, timers, back-off, and the acts that carry out a decision.

Every TFJob event and every event of a pod labelled with a job name asks :meth:`JobController.trigger` to
reconcile that job (the kopf registrations in `tfjob_operator.handlers` do only that). Requests for one job are
coalesced and run one at a time; a job is read from kopf's index of TFJobs and its pods from an index of pods by
job (no API reads). Timers (`loop.call_later`) bring a job back at the time `reconcile` asks for: deadline, TTL,
stuck-Terminating timeout. An API error retries the job with exponential back-off.
No finalizers are added: deletion is Kubernetes garbage collection through owner references.
Jobs of the builtin gang backend are released by the admission loop (`tfjob_operator.gang.admission`), which the
controller starts and stops with itself and which pod events wake; its reason for a waiting job reaches the
status through `GangView.queued_reason`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import json
import logging
import socket
import time
from collections import ChainMap
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tfjob_operator import apigroups, constants, dispatch, reconcile_budget, reconcile_errors
from tfjob_operator.api import JobConditionType, TFJob
from tfjob_operator.gang.admission import AdmissionLoop
from tfjob_operator.gang.backends import backend_for
from tfjob_operator.gang.base import (
    ChecksJobs,
    CreatesGroups,
    GangBackendError,
    GangOptions,
    ReleasedByOperator,
    ReportsWaits,
)
from tfjob_operator.gang.host import OnEvent
from tfjob_operator.informer import Informer
from tfjob_operator.kube import (
    Kube,
    KubeError,
    RetryPolicy,
    collection_path,
    load_api_client,
    pods_path,
    refusal_is_permanent,
)
from tfjob_operator.metrics import Metrics
from tfjob_operator.observed import JobView, latest, recorded_on_pods, view_job
from tfjob_operator.pod_index import PodIndex, job_of
from tfjob_operator.progress_poll import ProgressPoller
from tfjob_operator.reconcile import (
    AnnotateJob,
    CreateObject,
    Decision,
    DeleteJob,
    DeletePod,
    EmitEvent,
    GangView,
    ReconcileOptions,
    effective_job,
    reconcile,
    recorded_replicas,
    utcnow,
)
from tfjob_operator.render import RenderOptions, pod_name, render
from tfjob_operator.settings import Addressing, GangBackendName, OperatorSettings

log = logging.getLogger("tfjob_operator")

JobKey = tuple[str, str]  # (namespace, name)
T = TypeVar("T")

#: Triggers for one job within this many seconds are served by one reconcile.
RECONCILE_DEBOUNCE_SECONDS = 0.05
#: Identical Events for one job within this many seconds are posted once (like Kubernetes' event correlator).
EVENT_DEDUP_SECONDS = 60.0
#: At most this long after creating pods, a reconcile waits for the pod watch to show them.
UNTIL_SEEN_SECONDS = 10.0
#: At stop, Events still being sent get this long.
STOP_GRACE_SECONDS = 2.0
#: A job waiting on its PodGroup (not watched) reads it again this often, e.g. to see Volcano enqueue it.
GROUP_RECHECK_SECONDS = 5.0


@dataclass
class _JobState:
    """What the controller remembers about one job between reconciles (lost on restart, by design)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dirty: bool = False
    task: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    #: (uid, status) last decided: the next reconcile starts from it (the index may not have caught up with our
    #: own write yet, or the write is held back: see _hold_seconds).
    status: tuple[str | None, dict[str, Any]] | None = None
    #: (uid, status) last written to the API server (or read from it, until we write).
    written: tuple[str | None, dict[str, Any]] | None = None
    #: When a status change that may wait was first held back (monotonic), until it is written.
    held_since: float | None = None
    #: (uid, annotations) last written, for the same reason (a kubeflow.org job's gang counters live there).
    annotations: tuple[str | None, dict[str, str | None]] | None = None
    recent_events: dict[tuple[str, str], float] = field(default_factory=dict)
    failures: int = 0
    #: A reconcile has started since the controller first saw the job (later ones are debounced).
    reconciled: bool = False
    pod_create_error: str | None = None
    #: Set by every event of one of the job's pods (read-your-writes after creating them waits on it).
    pods_changed: asyncio.Event = field(default_factory=asyncio.Event)


class JobController:
    """Runs reconciles: one at a time per job, coalesced, retried with back-off on API errors."""

    def __init__(self, settings: OperatorSettings, kube: Kube, metrics: Metrics) -> None:
        self.settings = settings
        self.kube = kube
        self.metrics = metrics
        self.jobs: Mapping[JobKey, Any] = {}
        #: TFJob pods by job, fed by the pod watch (`watch_pods`).
        self.pods = PodIndex()
        self._states: dict[JobKey, _JobState] = {}
        self._ports_in_use: set[int] = set()
        self._ports_indexed = False
        #: Parsed jobs by key, with the (uid, resourceVersion) they were parsed from.
        self._views: dict[JobKey, tuple[tuple[str | None, str | None], JobView]] = {}
        self._resync_task: asyncio.Task[None] | None = None
        #: Work nobody waits for (Events), kept referenced until done.
        self._background: set[asyncio.Task[None]] = set()
        #: The threads of reconciles' CPU work (parsing, rendering, deciding), a reconcile's steps ahead of later
        #: reconciles': a few suffice, the GIL serialises the work anyway; more would only interleave it.
        self.work = dispatch.PriorityThreadPool(4, "tfjob-reconcile")
        self.gang_options = GangOptions()
        #: The builtin backend's admission loop (started with the operator).
        self.admission: AdmissionLoop | None = None
        #: Reads running jobs' chief progress into status.progress; sets the job census metrics.
        self.progress: ProgressPoller | None = None
        #: Watches of nodes and pods for the admission loop (started by its first pass with a gang to place).
        self.informers: list[Informer] = []

    @classmethod
    def create(cls, settings: OperatorSettings, metrics: Metrics) -> JobController:
        """A controller for these settings, talking to the cluster of the kubeconfig (or in-cluster account)."""
        retry = RetryPolicy(attempts=settings.retry_attempts, backoff=settings.retry_backoff,
                            max_backoff=settings.retry_max_backoff, timeout=settings.request_timeout)
        controller = cls(settings, Kube(load_api_client(), retry), metrics)
        controller.gang_options = GangOptions(
            volcano_scheduler_name=settings.scheduler_name or "volcano",
            scheduler_plugins_scheduler_name=settings.scheduler_name or GangOptions.scheduler_plugins_scheduler_name,
            builtin_priority_class=settings.gang_priority_class,
        )
        return controller

    # ------------------------------------------------------------ lifetime

    def start(self) -> None:
        """Start the resync loop and the gang admission loop (call from the running event loop)."""
        # Reconciles' CPU work runs on self.work, API calls on Kube's own threads; the default executor serves the
        # rest (a library's blocking call): a few threads, the GIL serialises the work anyway.
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(4, "tfjob-work"))
        self._resync_task = asyncio.create_task(self.resync_forever(), name="tfjob resync")
        # One loop per operator process; only the active replica runs kopf at all (Lease leader election, or one
        # replica).
        self.admission = AdmissionLoop(self)
        self.admission.start()
        if self.settings.gang_backend == GangBackendName.BUILTIN:
            # Capacity is watched from the start (a job naming another backend watches it at its first gang), and
            # that watch of every pod feeds the pod index too.
            self.admission.watch_cluster()
        self.progress = ProgressPoller(self, self.settings.progress_interval)
        self.progress.start()

    async def stop(self) -> None:
        """Cancel the resync loop, the admission loop, every pending reconcile and timer."""
        if self._resync_task is not None:
            self._resync_task.cancel()
        if self.admission is not None:
            await self.admission.stop()
        if self.progress is not None:
            await self.progress.stop()
        for informer in self.informers:
            informer.stop()
        for key in list(self._states):
            state = self._states[key]
            if state.task is not None:
                state.task.cancel()
            self.forget(key)
        if self._background:  # Events on their way: a moment to be sent, not a wait on a dead API server
            await asyncio.wait(self._background, timeout=STOP_GRACE_SECONDS)

    @property
    def _one_pod_watch(self) -> bool:
        """Whether the admission loop's watch of every pod (builtin backend, started with the operator) feeds the
        pod index too: one watch, not two."""
        return self.settings.gang_backend == GangBackendName.BUILTIN

    async def watch_pods(self) -> None:
        """Fill the pod index (the list) before it returns, then follow the watch: call at start-up, before kopf
        starts its TFJob watch, so no reconcile reads an index that has not been listed (it would create the pods
        again). Under the builtin gang backend the admission loop's watch of every pod is this one too; otherwise
        only TFJob pods are watched (label selector), in the watched namespaces."""
        if self._one_pod_watch and self.admission is not None:
            await self.admission.watch_cluster()
            return
        paths = [pods_path(namespace) for namespace in self.settings.namespaces] or ["/api/v1/pods"]
        for path in paths:
            informer = Informer(self.kube, path, self._index_pod, name=f"TFJob pods ({path})",
                                selector=constants.LABEL_JOB_NAME)
            await informer.start()
            self.informers.append(informer)

    def _index_pod(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """A pod watch event: a TFJob pod (of a watched namespace) goes into the index, and its job is told."""
        key = job_of(pod)
        if key is None or (self.settings.namespaces and key[0] not in self.settings.namespaces):
            return
        self.pods.apply(key, event_type, pod)
        self.pod_changed(key, event_type, pod)

    def pod_changed(self, key: JobKey, event_type: str, pod: Mapping[str, Any]) -> None:
        """A pod of job `key` changed: tell the admission loop (gated or ended pods), reconcile the job."""
        if self.admission is not None:
            self.admission.notice_pod(event_type, pod)
        state = self._states.get(key)
        if state is not None:
            state.pods_changed.set()
        if key in self.jobs:
            self.trigger(key)

    async def watch_cluster(self, on_node: OnEvent, on_pod: OnEvent) -> None:
        """Watch nodes and every pod for the admission loop's free capacity: cluster-wide, or only the watched
        namespaces' pods if the operator may not read pods cluster-wide (the watchdog covers the rest)."""
        nodes = Informer(self.kube, "/api/v1/nodes", on_node, name="nodes")
        await nodes.start()
        self.informers.append(nodes)
        if self._one_pod_watch:
            admission_on_pod = on_pod

            def on_pod(event_type: str, pod: Mapping[str, Any]) -> None:
                self._index_pod(event_type, pod)
                admission_on_pod(event_type, pod)

        pods = Informer(self.kube, "/api/v1/pods", on_pod, name="pods")
        try:
            await pods.start()
            self.informers.append(pods)
            return
        except KubeError as exc:
            if exc.status != 403 or not self.settings.namespaces:
                raise
            log.warning("cannot watch pods cluster-wide (%s): admission counts only the pods of %s", exc,
                        ", ".join(self.settings.namespaces))
        for namespace in self.settings.namespaces:
            informer = Informer(self.kube, pods_path(namespace), on_pod, name=f"pods in {namespace}")
            await informer.start()
            self.informers.append(informer)

    def job_deleted(self, key: JobKey) -> None:
        """A TFJob is gone: forget it (its pods go by garbage collection), and let admission see freed room."""
        self.forget(key)
        if self.admission is not None:
            self.admission.wake()

    # ------------------------------------------------------------ scheduling

    def bind(self, jobs: Mapping[JobKey, Any], kubeflow_jobs: Mapping[JobKey, Any] | None = None) -> None:
        """Remember kopf's live indices of TFJobs (they are passed to handlers only). Kubeflow's `kubeflow.org/v1`
        TFJobs, when served, join ours in one view: a job is a job, its apiVersion says which API it came
        through."""
        # ChainMap only reads here; the indices stay live (kopf updates them in place).
        self.jobs = jobs if kubeflow_jobs is None else ChainMap(jobs, kubeflow_jobs)  # type: ignore[arg-type]

    def trigger(self, key: JobKey) -> None:
        """Reconcile this job soon; many triggers while one runs cause one more run."""
        state = self._state(key)
        state.dirty = True
        if state.task is None or state.task.done():
            state.task = asyncio.create_task(self._drain(key, state), name=f"reconcile {key[0]}/{key[1]}")

    def _state(self, key: JobKey) -> _JobState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _JobState()
        return state

    def forget(self, key: JobKey) -> None:
        self._views.pop(key, None)
        state = self._states.pop(key, None)
        if state is not None and state.timer is not None:
            state.timer.cancel()

    def _schedule(self, key: JobKey, state: _JobState, delay: float | None) -> None:
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        if delay is not None:
            # A little past the instant, so a deadline computed at second precision has surely passed.
            state.timer = asyncio.get_running_loop().call_later(delay + 0.05, self.trigger, key)

    async def _drain(self, key: JobKey, state: _JobState) -> None:
        while state.dirty:
            # Pod events come in bursts (a gang starts together): one reconcile for the burst. A job's first
            # reconcile does not wait: nothing of it is bursting yet, and it creates the pods.
            await asyncio.sleep(RECONCILE_DEBOUNCE_SECONDS if state.reconciled else 0)
            state.reconciled = True
            state.dirty = False
            async with state.lock:
                # This reconcile's work (and the tasks and threads it starts) queues by its start: ahead of
                # later reconciles' (tfjob_operator.dispatch).
                dispatch.reconcile_started.set(time.monotonic())
                started = time.perf_counter()
                try:
                    delay = await self.reconcile_once(key, state)
                    state.failures = 0
                except Exception as exc:  # an API outage must not kill the controller: retry with back-off
                    self.metrics.reconcile_errors.inc()
                    state.failures += 1
                    delay = min(self.settings.retry_backoff * 2 ** state.failures, self.settings.retry_max_backoff)
                    log.warning("reconcile %s/%s failed (%s); retrying in %.1fs", *key, exc, delay,
                                exc_info=not isinstance(exc, KubeError))
                    if not isinstance(exc, KubeError) and reconcile_errors.gives_up(state.failures):
                        delay = await self._give_up(key, state, exc, delay)
                finally:
                    self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
                if self._states.get(key) is state:
                    self._schedule(key, state, delay)

    async def _give_up(self, key: JobKey, state: _JobState, exc: Exception, delay: float) -> float | None:
        """Fail a job that keeps raising (reconcile_errors): a condition and an Event, then no more retries
        until it changes (or the resync comes by). Returns the next delay."""
        view = self.view(key)
        if view is None:
            return None
        # Only what cannot raise again: the job's parsed run policy and its pods as indexed (no render, no gang).
        pods = [dict(p) for p in (self.pods.get(key) or [])]
        run_policy = view.job.spec.runPolicy if view.job is not None else None
        decision = reconcile_errors.give_up(view.obj, exc, state.failures, utcnow(), pods, run_policy)
        try:
            held = await self._act(key, view, decision, state, {})
        except Exception as write_error:  # still inside the error path: never kill the drain task
            log.warning("could not mark %s/%s failed: %s", *key, write_error)
            return delay
        # No retry until the job changes or the resync comes by; but the TTL of the failed job still counts.
        return _next_delay(held, decision)

    async def resync_forever(self) -> None:
        """Safety net: every job is reconciled at least every resync_seconds (no writes when nothing changed)."""
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            for key in list(self.jobs):
                self.trigger(key)

    # ------------------------------------------------------------ one reconcile

    def view(self, key: JobKey) -> JobView | None:
        """The job as last seen on the watch, parsed once per version (the admission loop reads the same views)."""
        body = latest(self.jobs.get(key))
        if body is None:
            self._views.pop(key, None)
            return None
        meta = body.get("metadata") or {}
        version = (meta.get("uid"), meta.get("resourceVersion"))
        cached = self._views.get(key)
        if cached is not None and version[1] is not None and cached[0] == version:
            return cached[1]
        # The kept body is the index's private copy (observed.as_kept), which nothing changes: shared, not copied.
        view = view_job(body)
        if view.finished:
            # A finished job is read again only by the resync, its TTL and its pods' clean-up: parsing it then
            # costs less than keeping a parsed copy of every finished job (thousands, until their TTL).
            self._views.pop(key, None)
        else:
            self._views[key] = (version, view)
        return view

    async def reconcile_once(self, key: JobKey, state: _JobState) -> float | None:
        """Read the job and its pods from the indices, decide, write status, act. Returns the requeue delay."""
        # Parsing, rendering and deciding are CPU work that grows with the job: done on worker threads, so the
        # event loop keeps serving every other job's events and API calls meanwhile (issue 15: isolation).
        # One hop for the reading (each hop waits its turn behind every other job's in a burst). The pod index is
        # listed here, on the event loop, which alone updates it.
        read = await dispatch.run_in(self.work, self._read, key, state, list(self.pods.get(key) or []))
        if read is None:
            self.forget(key)
            return None
        if not read:
            return None  # another controller's job (reconcile would say so too): not even its gang is looked up
        view, pods, record = read
        job = view.job
        over = reconcile_budget.over_bytes(job, self.settings.reconcile_budget_bytes) if job is not None else None
        run_policy = job.spec.runPolicy if job is not None else None
        if over is not None and not view.finished:
            decision = reconcile_budget.fail(view.obj, over, utcnow(), pods, run_policy)
            return _next_delay(await self._act(key, view, decision, state, {}), decision)
        # An over-budget job that has finished is never rendered again (its gang view would render every pod).
        budget = _TimeBudget(self.work, self.settings.reconcile_budget_seconds)
        try:
            options = await self._options(view, pods, state, None if over else job, budget)
            decision = await budget.run(reconcile, view, pods, utcnow(), options)
        except _OverBudget:
            meta = view.obj.get("metadata") or {}
            log.warning("reconcile of %s/%s over its time budget (%g s): failing the job", meta.get("namespace"),
                        meta.get("name"), budget.seconds)
            decision = reconcile_budget.fail(
                view.obj, reconcile_budget.over_seconds(budget.spent, budget.seconds), utcnow(), pods, run_policy)
        if not decision.managed:
            return None
        return _next_delay(await self._act(key, view, decision, state, record), decision)

    def _read(self, key: JobKey, state: _JobState, store: list[Mapping[str, Any]]
              ) -> tuple[JobView, list[dict[str, Any]], dict[str, str | None]] | tuple[()] | None:
        """On a worker thread: the job's view with the controller's own writes over it, private copies of its pods
        and the annotations to record (`_with_pod_records`). None if the job is gone, () if it is not ours."""
        view = self.view(key)
        if view is None:
            return None
        if state.written is None or state.written[0] != view.uid:
            # What the server holds, as far as we know: the watch's copy until we write ourselves.
            state.written = (view.uid, apigroups.status_for_group(
                apigroups.group_of(view.obj), key[1], view.status.model_dump(mode="json")))
        view = _with_own_writes(view, state)
        if not apigroups.managed_here(apigroups.group_of(view.obj), apigroups.manager_of(view.obj),
                                      self.settings.kubeflow_api):
            return ()
        return _with_pod_records(view, store)

    async def _options(self, view: JobView, pods: list[dict[str, Any]], state: _JobState,
                       job: TFJob | None, budget: _TimeBudget) -> ReconcileOptions:
        """What reconcile needs beside the job and its pods: the job rendered once (with its loopback ports, if
        any) and the gang view. `job` is None for an invalid job, or one over its budget: nothing is rendered."""
        if job is None:
            return ReconcileOptions(terminating_timeout=self.settings.terminating_timeout,
                                    kubeflow_api=self.settings.kubeflow_api)
        ports: dict[str, int] | None = None
        if self.settings.addressing == Addressing.LOOPBACK and not view.finished:
            ports = self._loopback_ports(view.obj, job)
        effective, _ = effective_job(job)
        # A finished job in loopback mode has no ports: the rendering then only sizes the gang objects.
        rendered = await budget.run(render, effective, RenderOptions(
            attempt=view.status.restartCount, cluster_domain=self.settings.cluster_domain, loopback_ports=ports))
        options = ReconcileOptions(
            cluster_domain=self.settings.cluster_domain,
            loopback_ports=ports,
            terminating_timeout=self.settings.terminating_timeout,
            gang=await self._gang_view(job, effective, rendered.pods, pods),
            pod_create_error=state.pod_create_error,
            kubeflow_api=self.settings.kubeflow_api,
            rendered=rendered,
        )
        return options

    async def _gang_view(self, job: TFJob, effective: TFJob, rendered: list[dict[str, Any]],
                         pods: list[dict[str, Any]]) -> GangView:
        """Ask the job's gang backend what it needs (docs/design.md §6; the `none` backend needs nothing)."""
        try:
            backend = backend_for(job, self.settings.gang_backend.value, self.gang_options)
        except GangBackendError as exc:
            return GangView(problems=(str(exc),))
        problems = backend.validate(job) if isinstance(backend, ChecksJobs) else []
        if problems:
            return GangView(problems=tuple(problems))
        scheduler = self.settings.scheduler_name

        def decorate(job: TFJob, pod: dict[str, Any]) -> dict[str, Any]:
            if scheduler and not pod["spec"].get("schedulerName"):
                pod = {**pod, "spec": {**pod["spec"], "schedulerName": scheduler}}
            return backend.decorate_pod(job, pod)

        ready, why, missing = True, "", []
        grouping = backend.group_objects if isinstance(backend, CreatesGroups) else GangView().group_objects
        groups = grouping(effective, rendered)
        if groups and isinstance(backend, CreatesGroups):
            found = [await self.kube.get(f"{collection_path(g)}/{g['metadata']['name']}") for g in groups]
            observed = [g for g in found if g]
            missing = [g for g, got in zip(groups, found, strict=True) if not got]
            ready, why = backend.ready_to_create_pods(job, observed)
        reported = backend.queued_reason(job, pods) if isinstance(backend, ReportsWaits) else None
        queued = (why or None) if not ready else reported
        if queued and isinstance(backend, ReleasedByOperator) and self.admission is not None:
            if self.admission.released(pods):
                queued = None  # released a moment ago; the pod index has not caught up yet
            else:
                # The loop's reason says what is short ("needs 8 nvidia.com/gpu on ≤ 2 nodes; largest free 6").
                # Until a pass has found the gang short it is not reported Queued: the pass follows the gated pods
                # within milliseconds and usually releases them, and a Queued/admitted flip would cost two writes.
                wait = self.admission.wait_for(job.namespace, job.name)
                queued = wait.message if wait is not None and wait.shown else None
        return GangView(decorate_pod=decorate, group_objects=grouping, ready_to_create_pods=ready,
                        missing_groups=tuple(missing), queued_reason=queued,
                        recheck_after=GROUP_RECHECK_SECONDS if groups and not ready else None)

    def _loopback_ports(self, obj: Mapping[str, Any], job: TFJob) -> dict[str, int]:
        """Pod name → 127.0.0.1 port (and `<pod>/metrics` → its metrics port): those recorded on the job or its
        pods (each pod carries its gang's ports, so they survive an operator restart mid-creation), new ones for
        pods without, never one promised to another pod."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        ports = _parse_ports(annotations.get(constants.ANNOTATION_LOOPBACK_PORTS))
        names = _all_pod_names(job)
        wanted = {*names, *(n + constants.LOOPBACK_METRICS_SUFFIX for n in names)}
        missing = sorted(wanted - set(ports))
        if not missing:
            return ports
        in_use = self._ports_promised()
        for name in missing:
            ports[name] = _free_port(in_use)
            in_use.add(ports[name])
        return ports

    def _ports_promised(self) -> set[int]:
        """Every loopback port promised so far (the live set, which callers add to). Read once from the jobs and
        pods kopf listed at start (an earlier operator's promises); afterwards kept by the allocations, so a new
        job costs no scan of every other job."""
        if not self._ports_indexed:
            for store in [*self.jobs.values(), *self.pods.values()]:
                for body in list(store or []):
                    raw = ((body.get("metadata") or {}).get("annotations") or {}).get(
                        constants.ANNOTATION_LOOPBACK_PORTS)
                    self._ports_in_use |= set(_parse_ports(raw).values())
            self._ports_indexed = True
        return self._ports_in_use

    async def _act(self, key: JobKey, view: JobView, decision: Decision, state: _JobState,
                   pending: dict[str, str | None]) -> float | None:
        """Status first (a decision such as 'attempt 3' must survive a crash), its Events, then actions in order.
        `pending` annotations (a gang size read from the pods, to keep refusing a resize) are written with the
        decision's own. Returns in how many seconds to come back for a status change held back (see
        _hold_seconds)."""
        namespace, name = key
        obj = view.obj
        group = apigroups.group_of(obj)
        # Stored as its API keeps it: Kubeflow's CRD would prune our extra fields (the counters go to annotations).
        new_status = apigroups.status_for_group(group, name, decision.status.model_dump(mode="json"))
        on_server = state.written[1] if state.written is not None and state.written[0] == view.uid else None
        held = None
        if new_status == on_server:
            state.held_since = None
        else:
            held = _hold_seconds(on_server or {}, new_status, state)
            if held is None:
                if await self.kube.patch_status(namespace, name, new_status, group=group) is None:
                    return None  # the job is gone
                state.held_since = None
                state.written = (view.uid, new_status)
        state.status = (view.uid, new_status)
        # Events right after the status they announce, in the background: the API pool sends them after every
        # queued create (tfjob_operator.dispatch), and the reconcile does not wait for them (the job's next
        # reconcile, e.g. its Running status, would wait behind the burst's creates too). Started here, so an error
        # below cannot leave them unsent.
        for event in decision.of_type(EmitEvent):
            self._in_background(self._post_event(obj, event, state))
        for event in decision.of_type(EmitEvent):
            if event.condition == JobConditionType.RUNNING:
                self.metrics.running(view.status, obj["metadata"].get("creationTimestamp"), utcnow())
        deletes: list[DeletePod] = []
        creates: list[CreateObject] = []
        annotations: dict[str, str | None] = dict(pending)
        for action in decision.actions:
            if isinstance(action, AnnotateJob):
                annotations.update(action.annotations)
            elif isinstance(action, DeletePod):
                deletes.append(action)
            elif isinstance(action, CreateObject):
                creates.append(action)
        if annotations:
            await self.kube.annotate_job(namespace, name, annotations, group=group)
            state.annotations = (view.uid, annotations)
        await asyncio.gather(*(self._delete(namespace, d) for d in deletes))
        await self._create(creates, state)
        await self._until_seen(key, state, {c.name for c in creates if c.kind == "Pod"})
        for action in decision.of_type(DeleteJob):
            log.info("deleting TFJob %s/%s: %s", namespace, name, action.reason)
            await self.kube.delete_job(namespace, name, view.uid, group=group)
        return held

    async def write_progress(self, key: JobKey, progress: dict[str, Any]) -> bool:
        """Merge-patch status.progress, under the job's reconcile lock so a reconcile's full status write and
        its cached copy keep it. False if the job is gone."""
        state = self._state(key)
        async with state.lock:
            body = latest(self.jobs.get(key)) or {}
            current = state.status[1] if state.status is not None and state.status[0] == (
                body.get("metadata") or {}).get("uid") else body.get("status") or {}
            if current.get("state") != "Running":
                return False  # finished or restarting since the read: the figures are no longer news
            written = await self.kube.patch_status(*key, {"progress": progress})
            if written is None:
                return False
            for kept in (state.status, state.written):
                if kept is not None and kept[0] == (written.get("metadata") or {}).get("uid"):
                    kept[1]["progress"] = progress
            return True

    async def _until_seen(self, key: JobKey, state: _JobState, names: set[str],
                          timeout: float = UNTIL_SEEN_SECONDS) -> None:
        """Read-your-writes: wait (bounded, woken by the job's pod events) until the pod index shows the pods just
        created, so the next reconcile does not create them again (harmless, a 409, but a wasted request per pod;
        under load the watch may trail the creates by seconds)."""
        deadline = time.monotonic() + timeout
        while names:
            state.pods_changed.clear()
            seen = {(p.get("metadata") or {}).get("name") for p in (self.pods.get(key) or [])}
            left = deadline - time.monotonic()
            if names <= seen or left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.pods_changed.wait(), left)

    async def _delete(self, namespace: str, action: DeletePod) -> None:
        if await self.kube.delete_pod(namespace, action.name, force=action.force):
            self.metrics.pods_deleted.labels(str(action.force).lower()).inc()

    async def _create(self, creates: list[CreateObject], state: _JobState) -> None:
        # The Service and gang objects first (pods may need them), then every pod at once.
        for action in (c for c in creates if c.kind != "Pod"):
            await self.kube.create(action.obj)
        results = await asyncio.gather(*(self.kube.create(c.obj) for c in creates if c.kind == "Pod"),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, KubeError) and refusal_is_permanent(result.status, result.message):
                state.pod_create_error = str(result)  # retrying cannot fix it: the next reconcile fails the job
                state.dirty = True
            elif isinstance(result, BaseException):
                raise result
            elif result:
                self.metrics.pods_created.inc()

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (which never raises) without waiting for it; :meth:`stop` lets it finish for a moment."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _post_event(self, obj: Mapping[str, Any], event: EmitEvent, state: _JobState) -> None:
        now = time.monotonic()
        key = (event.reason, event.message)
        if now - state.recent_events.get(key, -EVENT_DEDUP_SECONDS) < EVENT_DEDUP_SECONDS:
            return
        state.recent_events = {k: t for k, t in state.recent_events.items() if now - t < EVENT_DEDUP_SECONDS}
        state.recent_events[key] = now
        self.metrics.transition(event.condition, event.reason)
        log.info("%s/%s: %s: %s", obj["metadata"].get("namespace"), obj["metadata"]["name"], event.reason,
                 event.message)
        try:
            await self.kube.post_event(obj, event.type, event.reason, event.message)
        except KubeError as exc:  # an Event is a courtesy: never fail the reconcile for it
            log.warning("could not post event %s: %s", event.reason, exc)


# ---------------------------------------------------------------- helpers

#: Status fields that follow the pods alone or come with the first reconcile; a change of only these (and of the
#: Created condition) may wait this long for company.
HOLDABLE_FIELDS = frozenset({"replicaStatuses", "workers", "lastReconcileTime", "startTime", "observedGeneration",
                             "state"})
HOLD_SECONDS = 1.0


def _urgent_part(status: Mapping[str, Any]) -> dict[str, Any]:
    part = {k: v for k, v in status.items() if k not in HOLDABLE_FIELDS}
    part["conditions"] = [c for c in part.get("conditions") or [] if c.get("type") != "Created"]
    return part


def _hold_seconds(written: Mapping[str, Any], new: Mapping[str, Any], state: _JobState) -> float | None:
    """None: write the status now. Else the seconds a change may still be held back: pod counts, and Created (the
    pods follow it within a second, and the Running that comes next carries it). No decision that must survive a
    crash (an attempt number, an outcome, Queued) is ever held; a crash within the hold loses only counts the next
    reconcile recomputes and the Created condition (its Event is posted anyway). A job that goes well thus writes
    its status about three times (Running, Succeeded, the last counts), not once per pod transition."""
    if _urgent_part(written) != _urgent_part(new):
        return None
    now = time.monotonic()
    if state.held_since is None:
        state.held_since = now
    left = state.held_since + HOLD_SECONDS - now
    return left if left > 0 else None


class _OverBudget(Exception):
    """The reconcile's CPU work (rendering, deciding) took longer than its time budget."""


@dataclass
class _TimeBudget:
    """Seconds one reconcile may spend on CPU work, counted over every step run through it (API waits are not:
    they are the cluster's, and are retried with back-off)."""

    threads: dispatch.PriorityThreadPool
    seconds: float
    spent: float = 0.0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a worker thread, within what is left of the budget; raises _OverBudget past it. (The
        thread cannot be stopped; it ends on its own, and the limits of `limits.py` bound how long that takes.)"""
        started = time.monotonic()
        try:
            return await asyncio.wait_for(dispatch.run_in(self.threads, fn, *args), max(self.seconds - self.spent, 0.0))
        except TimeoutError:
            raise _OverBudget from None
        finally:
            self.spent += time.monotonic() - started



def _with_own_writes(view: JobView, state: _JobState) -> JobView:
    """The view with the controller's own last writes laid over it: the watch may not have caught up with them."""
    if state.annotations is not None and state.annotations[0] == view.uid:
        meta = dict(view.obj.get("metadata") or {})
        current = meta.get("annotations") or {}
        merged = {k: v for k, v in {**current, **state.annotations[1]}.items() if v is not None}
        if merged != current:
            # Annotations are part of the spec as reconcile reads it (the recorded gang size): parse again.
            view = view_job({**view.obj, "metadata": {**meta, "annotations": merged}})
    if state.status is not None and state.status[0] == view.uid:
        view = view.with_status(copy.deepcopy(state.status[1]))
    return view



def _with_pod_records(view: JobView, store: list[Mapping[str, Any]]
                      ) -> tuple[JobView, list[dict[str, Any]], dict[str, str | None]]:
    """The view with the gang size and loopback ports its pods were created with, where the job does not carry
    them itself (it never does unless a resize was refused: the pods record them, no write to the job needed);
    and the annotations to write on the job: the gang size, once a changed spec is refused, so the refusal
    outlives the pods (a whole-gang restart recreates them at the recorded size)."""
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
    refused = view.job is not None and effective_job(view.job)[1] is not None
    size = missing.get(constants.ANNOTATION_GANG_REPLICAS)
    return view, pods, ({constants.ANNOTATION_GANG_REPLICAS: size} if refused and size else {})


def _all_pod_names(job: TFJob) -> list[str]:
    """Pod names of the spec and of the recorded gang size (they differ while a resize is refused)."""
    counts = {rtype.value: spec.replicas for rtype, spec in job.replica_specs()}
    for rtype_name, n in (recorded_replicas(job) or {}).items():
        counts[rtype_name] = max(counts.get(rtype_name, 0), n)
    return [pod_name(job.name, rtype, i) for rtype, _ in job.replica_specs() for i in range(counts[rtype.value])]


def _next_delay(held: float | None, decision: Decision) -> float | None:
    """When to reconcile again: for a status change held back, or what the decision asked (a TTL, a deadline)."""
    if held is None:
        return decision.requeue_after
    return held if decision.requeue_after is None else min(held, decision.requeue_after)


def _parse_ports(raw: str | None) -> dict[str, int]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _free_port(avoid: set[int]) -> int:
    """A TCP port free on 127.0.0.1 now and not promised to another pod."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port
    raise RuntimeError("no free loopback port found")
