"""The controller: wires the work queue, the status cache, the actuator, the gang view and the watches, and runs
one reconcile: read the job and its pods from the indices, decide with the pure `reconcile`, act.

Every TFJob event and every event of a pod labelled with a job name adds the job to the work queue (the kopf
registrations in `tfjob_operator.serving.handlers` do only that, and feed the TFJob index `jobs`). A job is read
from that index and its pods from the pod index (no API reads). The reconcile's answer (deadline, TTL, stuck-Terminating
timeout, a held status write) is the job's next timer; an API error retries with back-off, an unexpected error
repeated fails the job (`reconcile_errors`). No finalizers: deletion is Kubernetes garbage collection through owner
references.
Jobs of the builtin gang backend are released by the admission loop (`tfjob_operator.gang.admission`), which the
controller starts and stops with itself and hands every pod and node event its watches show, once.

What the controller keeps per job is its own: the latest body (the job index), the version last seen and the view
parsed from it (`_Known`); the pods are the pod index's, the timers the work queue's, what was written and acted
the actuator's. `forget` has each owner drop its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import ChainMap
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tfjob_operator import dispatch
from tfjob_operator.api import TFJob, apigroups
from tfjob_operator.api.keys import JobKey
from tfjob_operator.api.observed import (
    FINISHED_STATES,
    JobView,
    as_kept,
    job_has_ttl,
    job_state,
    job_store,
    latest,
    view_job,
)
from tfjob_operator.api.times import SYSTEM_CLOCK, Clock
from tfjob_operator.controller import pod_records, reconcile_budget, reconcile_errors
from tfjob_operator.controller.actuator import Actuator
from tfjob_operator.controller.gang_wiring import gang_options, gang_view
from tfjob_operator.controller.pod_index import PodIndex, job_of
from tfjob_operator.controller.ports import LoopbackPorts
from tfjob_operator.controller.settings import Addressing, OperatorSettings
from tfjob_operator.controller.watches import Watches
from tfjob_operator.controller.workqueue import Backoff, WorkQueue
from tfjob_operator.gang.admission import AdmissionLoop
from tfjob_operator.gang.base import GangOptions
from tfjob_operator.kube import Kube, KubeError, RetryPolicy, load_api_client
from tfjob_operator.metrics import Metrics
from tfjob_operator.progress.poller import ProgressPoller
from tfjob_operator.reconcile import Decision, ReconcileOptions, effective_job, reconcile
from tfjob_operator.reconcile.observe import awaits_start
from tfjob_operator.reconcile.render import RenderOptions, render

log = logging.getLogger("tfjob_operator")

T = TypeVar("T")

#: Triggers for one job within this many seconds are served by one reconcile.
RECONCILE_DEBOUNCE_SECONDS = 0.05
#: Timers fire this much past the instant asked for, so a deadline computed at second precision has surely passed.
TIMER_SLACK_SECONDS = 0.05
#: A listed job that has run (Running or finished) has its first reconcile's work queued as if it started this much
#: later (`dispatch`): at start, or on a standby taking over, just-submitted jobs go first.
LISTED_LAG_SECONDS = 5.0
#: States of a job that has run: its listing at start can wait behind the just-submitted jobs.
_HAS_RUN = frozenset({"Running", "Succeeded", "Failed"})


@dataclass
class _Known:
    """What the controller keeps of one job beside its body: the resourceVersion last seen on the watch (a relist
    skips the unchanged), whether its next reconcile yields to just-submitted jobs', and the view parsed from its
    body, with the (uid, resourceVersion) it was parsed from (not kept once the job has finished)."""

    version: str | None = None
    lagging: bool = False
    view: tuple[tuple[str | None, str | None], JobView] | None = None


class JobController:
    """Runs reconciles: one at a time per job, coalesced, retried with back-off on API errors."""

    def __init__(self, settings: OperatorSettings, kube: Kube, metrics: Metrics, clock: Clock = SYSTEM_CLOCK) -> None:
        self.settings = settings
        #: The one clock of the reconciles, the actuator and the admission loop.
        self.clock = clock
        self.kube = kube
        self.metrics = metrics
        #: Every TFJob watched, by key: a store of its latest body (as kept; packed once finished:
        #: `observed.job_store`), fed by the TFJob watch (`job_seen`); not a kopf index (at start kopf makes each
        #: indexed object wait on one shared condition: 10,000 jobs took minutes of notifications). Kubeflow's
        #: jobs, when served, behind ours.
        self._own_jobs: dict[JobKey, Sequence[Mapping[str, Any]]] = {}
        self._kubeflow_jobs: dict[JobKey, Sequence[Mapping[str, Any]]] = {}
        self.jobs: Mapping[JobKey, Any] = ChainMap(self._own_jobs, self._kubeflow_jobs)  # type: ignore[arg-type]
        #: TFJob pods by job, fed by the pod watch (`watch_pods`).
        self.pods = PodIndex()
        self.queue: WorkQueue[JobKey] = WorkQueue(
            self._reconcile, on_error=self._on_error,
            backoff=Backoff(settings.retry_backoff, settings.retry_max_backoff),
            debounce=RECONCILE_DEBOUNCE_SECONDS, timer_slack=TIMER_SLACK_SECONDS,
            observe=metrics.reconcile_seconds.observe)
        metrics.workqueue_depth.set_function(self.queue.depth)
        self.actuator = Actuator(kube, metrics, self.pods, self.trigger, clock)
        self.watches = Watches(settings, kube, self._pod_event, self._node_event)
        self.ports = LoopbackPorts(lambda: [*self.jobs.values(), *self.pods.values()])
        self._known: dict[JobKey, _Known] = {}
        self._resync_task: asyncio.Task[None] | None = None
        #: The threads of reconciles' CPU work (parsing, rendering, deciding), a reconcile's steps ahead of later
        #: reconciles': a few suffice, the GIL serialises the work anyway; more would only interleave it.
        self.work = dispatch.PriorityThreadPool(4, "tfjob-reconcile")
        self.gang_options = GangOptions()
        #: The builtin backend's admission loop (started with the operator).
        self.admission: AdmissionLoop | None = None
        #: Reads running jobs' chief progress into status.progress; sets the job census metrics.
        self.progress: ProgressPoller | None = None

    @classmethod
    def create(cls, settings: OperatorSettings, metrics: Metrics) -> JobController:
        """A controller for these settings, talking to the cluster of the kubeconfig (or in-cluster account)."""
        retry = RetryPolicy(attempts=settings.retry_attempts, backoff=settings.retry_backoff,
                            max_backoff=settings.retry_max_backoff, timeout=settings.request_timeout)
        controller = cls(settings, Kube(load_api_client(), retry), metrics)
        controller.gang_options = gang_options(settings)
        return controller

    # ------------------------------------------------------------ lifetime

    def start(self, *, leading: bool = True) -> None:
        """Start the controller (from the running event loop). Leading: the resync loop, the gang admission
        loop's passes and the progress poller too. A standby (`leading` False) only keeps its indexes: the
        watches fill them and every job they show waits in the paused queue, until `lead`."""
        # Reconciles' CPU work runs on self.work, API calls on Kube's own threads; the default executor serves the
        # rest (a library's blocking call): a few threads, the GIL serialises the work anyway.
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(4, "tfjob-work"))
        self.queue.paused = not leading
        self.admission = AdmissionLoop(self, clock=self.clock)
        if leading:
            self.lead()

    def lead(self) -> None:
        """Act: reconcile every job the indexes hold (a standby's, kept while it waited for the Lease), then
        each as its events come; run the resync, the admission passes and the progress poller."""
        assert self.admission is not None, "start() first"
        self.queue.resume()
        self._resync_task = asyncio.create_task(self.resync_forever(), name="tfjob resync")
        self.admission.start()
        self.progress = ProgressPoller(self, self.settings.progress_interval,
                                       self.settings.progress_reads_per_second)
        self.progress.start()

    async def stop(self) -> None:
        """Cancel the resync loop, the admission loop, every pending reconcile and timer."""
        if self._resync_task is not None:
            self._resync_task.cancel()
        if self.admission is not None:
            await self.admission.stop()
        if self.progress is not None:
            await self.progress.stop()
        self.watches.stop()
        await self.queue.stop()
        self._known.clear()
        await self.actuator.stop()

    async def watch_pods(self) -> None:
        """Fill the pod index (the list) before it returns, then follow the watch: call at start-up, before kopf
        starts its TFJob watch, so no reconcile reads an index that has not been listed (it would create the pods
        again). Under the builtin gang backend the admission loop's watch of every pod and node is this one."""
        await self.watches.watch_pods()

    def watch_cluster(self) -> Awaitable[None]:
        """Watch every node and pod for the admission loop (`admission.AdmissionHost`), once."""
        return self.watches.watch_cluster()

    @property
    def cluster_listed(self) -> bool:
        return self.watches.cluster_listed

    def _pod_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Each pod event the watches show, once: a TFJob pod (of a watched namespace) goes into the index and its
        job is told (the actuator, a reconcile); then the admission loop (capacity, gangs waiting)."""
        key = job_of(pod)
        if key is not None and (not self.settings.namespaces or key[0] in self.settings.namespaces):
            self.pods.apply(key, event_type, pod)
            self.actuator.pods_changed(key, str((pod.get("metadata") or {}).get("name")))
            if key in self.jobs:
                self.trigger(key)
        if self.admission is not None:
            self.admission.pod_event(event_type, pod)

    def _node_event(self, event_type: str, node: Mapping[str, Any]) -> None:
        if self.admission is not None:
            self.admission.node_event(event_type, node)

    def job_deleted(self, key: JobKey) -> None:
        """A TFJob is gone: forget it (its pods go by garbage collection), and let admission see freed room."""
        self.forget(key)
        if self.admission is not None:
            self.admission.wake()

    # ------------------------------------------------------------ scheduling

    def job_seen(self, key: JobKey, body: Mapping[str, Any]) -> None:
        """The TFJob as the watch shows it now (as kept: `observed.as_kept`), into the index `jobs` reads. Kubeflow's
        `kubeflow.org/v1` TFJobs, when served, join ours in one view (ours first on a name both APIs hold): a job is
        a job, its apiVersion says which API it came through."""
        kept = as_kept(body)
        index = self._kubeflow_jobs if apigroups.group_of(kept).kubeflow else self._own_jobs
        index[key] = job_store(kept)
        self.ports.note(kept)

    def job_gone(self, key: JobKey, body: Mapping[str, Any]) -> None:
        """A TFJob deleted: out of the index, forgotten (its pods go by garbage collection), admission told."""
        (self._kubeflow_jobs if apigroups.group_of(body).kubeflow else self._own_jobs).pop(key, None)
        if key in self.jobs:  # the same name through the other API: that job now
            self.trigger(key)
        else:
            self.job_deleted(key)

    def trigger(self, key: JobKey) -> None:
        """Reconcile this job soon; many triggers while one runs cause one more run."""
        self.queue.add(key)

    def job_event(self, key: JobKey, version: str | None, listed: bool) -> None:
        """A TFJob event from the watch (`listed`: from a list, at start or after an expired watch): reconcile,
        unless a relist shows a job at the resourceVersion an earlier event had (nothing changed: client-go's
        controllers skip such an update too). At ten thousand jobs a 410 thus costs a paged list, not a
        reconcile of every job.

        A listed job that is settled (`settled`) is not reconciled at all, as the resync skips it; one that has
        run is reconciled after the just-submitted ones (LISTED_LAG_SECONDS): a new leader's first writes are for
        the jobs waiting to start, not behind a reconcile of every listed job."""
        known = self._known.setdefault(key, _Known())
        seen, known.version = known.version, version
        if listed and version is not None and seen == version:
            return
        if listed:
            if self.settled(key):
                return
            if job_state(self.jobs.get(key)) in _HAS_RUN:
                known.lagging = True
        self.trigger(key)

    def forget(self, key: JobKey) -> None:
        """The job is gone: each owner of per-job state drops its own (this controller's `_Known`, the pod index's
        last words, the work queue's timers, the actuator's records)."""
        self._known.pop(key, None)
        for owner in (self.pods, self.queue, self.actuator):
            owner.forget(key)

    async def resync_forever(self) -> None:
        """Safety net: every job is reconciled again every resync_seconds (no writes when nothing changed), but one
        that is settled (`settled`). At most `resync_jobs_per_second` on average: with more jobs than a period
        holds, they are triggered one every 1/rate s (a reconcile costs a few ms: at 2,000 running jobs a resync a
        minute was most of the idle operator's CPU)."""
        rate = self.settings.resync_jobs_per_second
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            keys = [key for key in list(self.jobs) if not self.settled(key)]
            async for key in dispatch.paced(keys, rate, self.settings.resync_seconds):
                if key in self.jobs:
                    self.trigger(key)

    def settled(self, key: JobKey) -> bool:
        """A finished job with no pod left and no TTL: nothing a resync could do for it (a change of the job or of
        a pod of it is an event of its own), as client-go's Job controller returns at once for a finished Job.
        Skipping it keeps the resync of thousands of finished jobs from parsing each again every period."""
        store = self.jobs.get(key)
        if job_state(store) not in FINISHED_STATES or job_has_ttl(store):
            return False
        return not self.pods.get(key)

    async def _reconcile(self, key: JobKey) -> float | None:
        # This reconcile's work (and the tasks and threads it starts) queues by its start: ahead of later
        # reconciles' (tfjob_operator.dispatch).
        known = self._known.get(key)
        lag = LISTED_LAG_SECONDS if known is not None and known.lagging else 0.0
        if known is not None:
            known.lagging = False
        dispatch.reconcile_started.set(time.monotonic() + lag)
        return await self.reconcile_once(key)

    async def _on_error(self, key: JobKey, exc: Exception, failures: int, delay: float) -> float | None:
        """A reconcile raised: count and log it; fail a job that keeps raising something unexpected."""
        self.metrics.reconcile_errors.inc()
        refusal = exc.not_authorized if isinstance(exc, KubeError) else None
        if isinstance(exc, KubeError) and refusal is not None:
            # The operator's own RBAC lacks a rule: nothing changes until an admin grants it, so back off further
            # (2, 4, ... 60 s) and say so where a user looks: the job's condition (next reconcile) and an Event.
            delay = reconcile_errors.not_authorized_delay(failures, delay)
            log.warning("reconcile %s/%s: %s; retrying in %.0fs (%s)", *key, refusal, delay, exc)
            view = self.view(key)
            if view is not None:
                self.actuator.refused(key, view.obj, refusal)
            return delay
        log.warning("reconcile %s/%s failed (%s); retrying in %.1fs", *key, exc, delay,
                    exc_info=not isinstance(exc, KubeError))
        if not isinstance(exc, KubeError) and reconcile_errors.gives_up(failures):
            return await self._give_up(key, exc, failures, delay)
        return delay

    async def _give_up(self, key: JobKey, exc: Exception, failures: int, delay: float) -> float | None:
        """Fail a job that keeps raising (reconcile_errors): a condition and an Event, then no more retries
        until it changes (or the resync comes by). Returns the next delay."""
        view = self.view(key)
        if view is None:
            return None
        # Only what cannot raise again: the job's parsed run policy and its pods as indexed (no render, no gang).
        pods = [dict(p) for p in (self.pods.get(key) or [])]
        run_policy = view.job.spec.runPolicy if view.job is not None else None
        decision = reconcile_errors.give_up(view.obj, exc, failures, self.clock.now(), pods, run_policy)
        try:
            held = await self.actuator.act(key, view, decision)
        except Exception as write_error:  # still inside the error path: never kill the queue's run
            log.warning("could not mark %s/%s failed: %s", *key, write_error)
            return delay
        # No retry until the job changes or the resync comes by; but the TTL of the failed job still counts.
        return _next_delay(held, decision)

    # ------------------------------------------------------------ one reconcile

    def view(self, key: JobKey) -> JobView | None:
        """The job as last seen on the watch, parsed once per version (the admission loop reads the same views)."""
        body = latest(self.jobs.get(key))
        known = self._known.get(key)
        if body is None:
            if known is not None:
                known.view = None
            return None
        meta = body.get("metadata") or {}
        version = (meta.get("uid"), meta.get("resourceVersion"))
        if known is not None and known.view is not None and version[1] is not None and known.view[0] == version:
            return known.view[1]
        # The kept body is the index's private copy (observed.as_kept), which nothing changes: shared, not copied.
        view = view_job(body)
        known = self._known.setdefault(key, _Known())
        # A finished job is read again only by the resync, its TTL and its pods' clean-up: parsing it then costs
        # less than keeping a parsed copy of every finished job (thousands, until their TTL).
        known.view = None if view.finished else (version, view)
        return view

    async def reconcile_once(self, key: JobKey) -> float | None:
        """Read the job and its pods from the indices, decide, write status, act. Returns the requeue delay."""
        # Parsing, rendering and deciding are CPU work that grows with the job: done on worker threads, so the
        # event loop keeps serving every other job's events and API calls meanwhile (issue 15: isolation).
        # One hop for the reading (each hop waits its turn behind every other job's in a burst). The pod index is
        # listed here, on the event loop, which alone updates it.
        read = await dispatch.run_in(self.work, self._read, key, list(self.pods.get(key) or []))
        if read is None:
            self.forget(key)
            return None
        if not read:
            return None  # another controller's job (reconcile would say so too): not even its gang is looked up
        view, pods, annotate = read
        job = view.job
        over = reconcile_budget.over_bytes(job, self.settings.reconcile_budget_bytes) if job is not None else None
        run_policy = job.spec.runPolicy if job is not None else None
        if over is not None and not view.finished:
            decision = reconcile_budget.fail(view.obj, over, self.clock.now(), pods, run_policy)
            return _next_delay(await self.actuator.act(key, view, decision), decision)
        # An over-budget job that has finished is never rendered again (its gang view would render every pod).
        budget = _TimeBudget(self.work, self.settings.reconcile_budget_seconds)
        try:
            options = await self._options(key, view, pods, None if over else job, budget)
            decision = await budget.run(reconcile, view, pods, self.clock.now(), options)
        except _OverBudget:
            meta = view.obj.get("metadata") or {}
            log.warning("reconcile of %s/%s over its time budget (%g s): failing the job", meta.get("namespace"),
                        meta.get("name"), budget.seconds)
            decision = reconcile_budget.fail(
                view.obj, reconcile_budget.over_seconds(budget.spent, budget.seconds), self.clock.now(), pods,
                run_policy)
        if not decision.managed:
            return None
        starting = any(awaits_start(pod) for pod in pods)
        return _next_delay(await self.actuator.act(key, view, decision, annotate=annotate, starting=starting),
                           decision)

    def _read(self, key: JobKey, store: list[Mapping[str, Any]]
              ) -> tuple[JobView, list[dict[str, Any]], dict[str, str | None]] | tuple[()] | None:
        """On a worker thread, the job as it is now, built once, here: its watched body (parsed once per version),
        with the annotations the actuator last wrote and those its pods record laid over it (parsed again only
        if they change it), and the status the actuator last decided; private (shallow) copies of its pods; the
        annotations to record on the job (`pod_records`). None if the job is gone, () if it is not ours."""
        watched = self.view(key)
        if watched is None:
            return None
        if not apigroups.managed_here(apigroups.group_of(watched.obj), apigroups.manager_of(watched.obj),
                                      self.settings.kubeflow_api):
            return ()
        # The kept pods are the index's private copies, which nothing changes (observed.as_kept).
        pods = [dict(p) for p in store]
        ours = self.actuator.annotations(key, watched)
        added = {k: v for k, v in pod_records.recorded_under(watched, pods).items() if k not in ours}
        meta = watched.obj.get("metadata") or {}
        annotations = {**ours, **added}
        view = watched if annotations == (meta.get("annotations") or {}) else view_job(
            {**watched.obj, "metadata": {**meta, "annotations": annotations}})
        view = self.actuator.with_decided(key, view)
        return view, pods, pod_records.refusal_to_record(view, added)

    async def _options(self, key: JobKey, view: JobView, pods: list[dict[str, Any]], job: TFJob | None,
                       budget: _TimeBudget) -> ReconcileOptions:
        """What reconcile needs beside the job and its pods: the job rendered once (with its loopback ports, if
        any) and the gang view. `job` is None for an invalid job, or one over its budget: nothing is rendered."""
        if job is None:
            return ReconcileOptions(terminating_timeout=self.settings.terminating_timeout,
                                    node_monitor_grace=self.settings.node_monitor_grace,
                                    kubeflow_api=self.settings.kubeflow_api)
        ports: dict[str, int] | None = None
        if self.settings.addressing == Addressing.LOOPBACK and not view.finished:
            ports = self.ports.for_job(view.obj, pod_records.all_pod_names(job))
        effective, _ = effective_job(job, view.status)
        # A finished job in loopback mode has no ports: the rendering then only sizes the gang objects.
        rendered = await budget.run(render, effective, RenderOptions(
            attempt=view.status.restartCount, cluster_domain=self.settings.cluster_domain, loopback_ports=ports))
        return ReconcileOptions(
            cluster_domain=self.settings.cluster_domain,
            loopback_ports=ports,
            terminating_timeout=self.settings.terminating_timeout,
            node_monitor_grace=self.settings.node_monitor_grace,
            gang=await gang_view(self.settings, self.gang_options, self.kube, self.admission, job, effective,
                                 rendered.pods, pods),
            pod_create_error=self.actuator.pod_create_error(key),
            not_authorized=self.actuator.not_authorized(key),
            kubeflow_api=self.settings.kubeflow_api,
            rendered=rendered,
            departed=self.pods.last_words(key),
        )

    async def write_progress(self, key: JobKey, progress: dict[str, Any]) -> bool:
        """Merge-patch status.progress, under the job's reconcile lock so a reconcile's full status write and
        its cached copy keep it. False if the job is gone."""
        async with self.queue.lock(key):
            return await self.actuator.write_progress(key, latest(self.jobs.get(key)) or {}, progress)


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


def _next_delay(held: float | None, decision: Decision) -> float | None:
    """When to reconcile again: for a status change held back, or what the decision asked (a TTL, a deadline)."""
    if held is None:
        return decision.requeue_after
    return held if decision.requeue_after is None else min(held, decision.requeue_after)
