"""The builtin backend's admission loop: one asyncio task in the active operator that releases whole gangs.

Pods of a `builtin` job are created behind the gate ``tfjob.dev/gang``. The loop runs passes one at a time (two
passes never book the same capacity): each reads the waiting gangs from the operator's pod index, calls the pure
:func:`queue.plan_pass_in`, releases every admitted gang with one merge PATCH per pod, restarts gangs the watchdog
timed out (delete; reconcile recreates them gated) and hands each waiting job's reason to the status path
(`Queued`, `GangQueued`). Its own task, not a kopf timer: a pass must follow a gang's pod events within
milliseconds, passes must not overlap, and one pass reads every waiting job.

Free capacity is kept, not listed per pass: a :class:`cluster.ClusterState` fed by watches of nodes and of every
pod (the host's `watch_cluster`, started by the first pass with a gang to place; the host hands each pod event
to :meth:`AdmissionLoop.pod_event` once). Released-but-unbound pods count
where they were pinned (:func:`builtin.holds_on`, read from the pods: a restarted operator double-books nothing).
A release the watches have not shown yet is kept in one map (``_releases``): it counts in the capacity until the
cluster watch shows it, and corrects the lagging pod index's view of the pod until it expires.

A pass runs when a job's pods were created gated, a pod ended or was deleted, a node changed, at the next
watchdog or back-off deadline, and every ``ADMISSION_PERIOD_SECONDS`` while anything waits; no API call while
nothing waits. One replica runs it (Lease leader election). What it remembers (passes waited, timeouts,
back-off, reasons) is in memory: a restarted operator starts counting anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tfjob_operator.api import TFJob, constants
from tfjob_operator.api.observed import JobView
from tfjob_operator.api.times import SYSTEM_CLOCK, Clock
from tfjob_operator.gang import builtin
from tfjob_operator.gang.backends import backend_for
from tfjob_operator.gang.base import GangBackendError, ReleasedByOperator, schedule_timeout_seconds
from tfjob_operator.gang.cluster import ClusterState
from tfjob_operator.gang.elastic import elastic_bounds, held_by, widest_fit, worker_count
from tfjob_operator.gang.explain import GangWait, WaitKind
from tfjob_operator.gang.host import AdmissionHost
from tfjob_operator.gang.queue import (
    JobKey,
    PassPlan,
    QueuedGang,
    Release,
    arrival_seconds,
    current_gang,
    gang_priority,
    held_gpu_seconds_by_job,
    key_str,
    key_tuple,
    placement_summary,
    plan_pass_in,
    waits_for_admission,
)
from tfjob_operator.gang.request import GangRequest
from tfjob_operator.gang.resources import is_terminal, scheduling_demand
from tfjob_operator.kube import MERGE_PATCH, KubeError, pods_path
from tfjob_operator.reconcile import NODE_REMOVAL_TAINTS, Reason, effective_job

log = logging.getLogger("tfjob_operator.gang.admission")

#: A pass at least this often while any gang waits (waits are counted per period; see _count_passes).
ADMISSION_PERIOD_SECONDS = 5.0
#: Wakes within this window are served by one pass (a gang's pods are created together).
DEBOUNCE_SECONDS = 0.05
#: A gang admitted after waiting this long (or after a wait its Queued condition showed) gets a GangAdmitted Event.
ADMITTED_NEWS_SECONDS = ADMISSION_PERIOD_SECONDS
#: The GPU-seconds held by partial gangs are added up at most this often (passes may run many times a second).
INTEGRATE_SECONDS = 1.0
#: Every job with pods is looked at for pods waiting for admission this often, beside the jobs their pod events
#: name (`_waiting_jobs`): a safety net, as a controller's resync is; at 2,000 running jobs a scan every pass
#: (5 s) was a third of the idle operator's CPU.
FULL_SCAN_SECONDS = 60.0
#: PriorityClass values looked up by name are trusted this long.
PRIORITY_CACHE_SECONDS = 60.0
#: A release the watch has not shown within this long is no longer counted by the loop itself (the pod is
#: gone or its events lost; a relist brings it back if it still holds capacity).
RESERVATION_SECONDS = 60.0
PRIORITY_CLASS_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"


@dataclass
class LoopState:
    """What the loop carries from one pass to the next (in memory; see the module docstring)."""

    passes_waited: dict[str, int] = field(default_factory=dict)
    #: When the waits were last counted (see AdmissionLoop._count_passes).
    counted_at: datetime | None = None
    not_before: dict[str, datetime] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)
    #: job key ("ns/name") → why it waits, from the last pass.
    reasons: dict[str, GangWait] = field(default_factory=dict)
    #: job key → when the loop first saw its whole gang gated (the clock's monotonic count), for the latency metric.
    queued_since: dict[str, float] = field(default_factory=dict)
    #: job key → order in which this operator first saw it queued (FIFO within a creation second).
    seen: dict[str, int] = field(default_factory=dict)
    #: jobs already counted in the admission-failures metric for their current wait.
    failure_counted: set[str] = field(default_factory=set)
    #: Elastic jobs of the last pass: job key → the workers that fit at its turn (see fits_workers).
    fits: dict[str, int | None] = field(default_factory=dict)

    def forget(self, keep: set[str]) -> None:
        """Drop what belongs to jobs that no longer wait (timeouts and back-off are kept: see forget_timeouts)."""
        for table in (self.passes_waited, self.reasons, self.queued_since, self.seen, self.fits):
            for key in [k for k in table if k not in keep]:
                del table[key]
        self.failure_counted &= keep


# ---------------------------------------------------------------- the loop


class AdmissionLoop:
    """The shell around :func:`queue.plan_pass_in`: reads a snapshot, writes releases, restarts timed-out gangs."""

    def __init__(self, host: AdmissionHost, *, period: float = ADMISSION_PERIOD_SECONDS,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.host = host
        self.period = period
        self.clock = clock
        self.state = LoopState()
        self._wake = asyncio.Event()
        self._deadline: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._priority_cache: dict[str, tuple[float, int]] = {}
        self._last_integration = clock.monotonic()
        self._seq = 0
        #: Free capacity, kept from watch events (see the module docstring).
        self.capacity = ClusterState(builtin.holds_on)
        #: Pod key (namespace/name) → a release this loop made that the watches may not show yet.
        self._releases: dict[str, _Unseen] = {}
        #: Each queued job's parsed request, kept while its gated pods do not change (plan_pass_in).
        self._requests: dict[str, tuple[tuple[Any, ...], GangRequest]] = {}
        #: Job uid → (the view, its parsed builtin job or None), see _builtin_job.
        self._jobs: dict[Any, tuple[JobView, TFJob | None]] = {}
        #: Jobs that may have pods waiting for admission (see _waiting_jobs).
        self._candidates: set[JobKey] = set()
        #: Jobs that may hold GPUs idle (a pod bound, another live and not Running): every job a pod event named
        #: since it was last found not to (see _integrate_gpu_seconds).
        self._holding: set[JobKey] = set()
        self._next_full_scan = 0.0
        self.passes = 0

    # -------------------------------------------------------- control

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="tfjob gang admission")

    async def stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def wake(self) -> None:
        """Ask for a pass soon (coalesced)."""
        self._wake.set()

    def released(self, pods: Iterable[Mapping[str, Any]]) -> bool:
        """Every pod still gated in this (possibly stale) view was released by the loop already."""
        gated = [p for p in pods if builtin.is_gated(p)]
        return bool(gated) and all(self._release_of(p) is not None for p in gated)

    def _release_of(self, pod: Mapping[str, Any]) -> _Unseen | None:
        """This loop's release of the pod (same uid), if it made one that has not expired."""
        mine = self._releases.get(_pod_key(pod))
        return mine if mine is not None and mine.uid and mine.uid == (pod.get("metadata") or {}).get("uid") else None

    def node_event(self, event_type: str, node: Mapping[str, Any]) -> None:
        """A node changed (from the host's watch): a change placement reads may let a waiting gang fit."""
        if self.capacity.node_event(event_type, node):
            self.wake()

    def pod_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """A pod changed (each pod event the host's watches show, once): move its hold; drop the loop's own
        reservation once the watch shows the release (or the pod went); note a TFJob pod's job (waiting for
        admission, maybe holding GPUs idle); wake for a gang created gated and for capacity freed."""
        meta = pod.get("metadata") or {}
        key = _pod_key(pod)
        freed = self.capacity.pod_event(event_type, pod)
        mine = self._releases.get(key)
        if mine is not None and mine.reserved and (
                event_type == "DELETED" or mine.uid != meta.get("uid") or not builtin.is_gated(pod)):
            mine.reserved = False
            self.capacity.unreserve(key)
        name = (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME)
        if not name:
            if freed:
                self.wake()
            return
        job = (meta.get("namespace") or "default", name)
        if event_type == "DELETED" or is_terminal(pod) or builtin.is_gated(pod):
            self.wake()
        self._holding.add(job)
        if event_type != "DELETED" and waits_for_admission(pod):
            self._candidates.add(job)
        if event_type != "DELETED" and builtin.is_gated(pod):
            # Admission latency counts from the first gated pod the operator saw (sub-second, unlike timestamps).
            self.state.queued_since.setdefault(key_str(job), self.clock.monotonic())

    def _as_released(self, pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The pods with this loop's own releases applied where the (lagging) index still shows them gated."""
        return [builtin.as_released(pod, mine.patch)
                if (mine := self._release_of(pod)) is not None and builtin.is_gated(pod) else pod for pod in pods]

    def _expire_releases(self) -> None:
        now = self.clock.monotonic()
        for key in [k for k, r in self._releases.items() if now - r.at >= RESERVATION_SECONDS]:
            if self._releases.pop(key).reserved:
                self.capacity.unreserve(key)

    def wait_for(self, namespace: str, name: str) -> GangWait | None:
        """Why this job's gang waits, from the last pass (None if the loop has not placed it yet)."""
        return self.state.reasons.get(f"{namespace}/{name}")

    def reason_for(self, namespace: str, name: str) -> str | None:
        """:meth:`wait_for`'s message."""
        return wait.message if (wait := self.wait_for(namespace, name)) is not None else None

    def fits_workers(self, job: TFJob, rendered: Sequence[Mapping[str, Any]],
                     pods: Sequence[Mapping[str, Any]]) -> int | None:
        """The widest worker count in the elastic job's [min, max] that fits now. None: a rigid job, capacity not
        known yet, or not even min fits (the lifecycle then keeps the width). A queued gang gets what the last pass
        found at its turn (gangs ranked above it first); any other job what the kept free capacity takes with its
        own pods (``pods``) counted as free for it. A job holding pods widens only while no gang waits for room
        (docs/gang.md)."""
        bounds = elastic_bounds(job)
        if bounds is None:
            return None
        key = builtin.job_key(job)
        if key in self.state.fits:
            return self.state.fits[key]
        if not self.host.cluster_listed:
            return None  # the first pass with a gang to place starts the watches (a query starts nothing)
        own = [p for p in pods if not is_terminal(p) and builtin.holds_on(p)]
        request = GangRequest(key, tuple(rendered), domain_label=builtin.domain_label(job))
        widest = widest_fit(self.capacity.cluster(), request, bounds, held_by(own, builtin.holds_on))
        current = worker_count(own)
        if widest is not None and current and any(w.kind is WaitKind.NO_ROOM for w in self.state.reasons.values()):
            return min(widest, current)
        return widest

    def leaving_nodes(self) -> frozenset[str]:
        """Nodes marked for removal (a taint of `NODE_REMOVAL_TAINTS`): an elastic gang on one restarts before the
        node goes (empty until the node watch has listed)."""
        if not self.host.cluster_listed:
            return frozenset()
        return frozenset(n.name for n in self.capacity.cluster().nodes
                         if any(t.get("key") in NODE_REMOVAL_TAINTS
                                for t in (n.obj.get("spec") or {}).get("taints") or []))

    async def run(self) -> None:
        """Forever: wait for a wake (or the period), then one pass; a failing pass is retried later."""
        failures = 0
        while True:
            try:
                async with asyncio.timeout(self.period):
                    await self._wake.wait()
            except TimeoutError:
                pass
            await asyncio.sleep(DEBOUNCE_SECONDS)
            self._wake.clear()
            try:
                await self.pass_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an API outage must not end admission for the operator's lifetime
                failures += 1
                self.host.metrics.gang_admission_failures.labels("pass_error").inc()
                log.warning("admission pass failed (%s); retrying", exc, exc_info=not isinstance(exc, KubeError))
                await asyncio.sleep(min(self.host.settings.retry_backoff * 2 ** failures,
                                        self.host.settings.retry_max_backoff))

    # -------------------------------------------------------- one pass

    def _waiting_jobs(self) -> dict[JobKey, JobView]:
        """Jobs (from the index) with a gated or released-but-unbound pod: no API call when there is none. Only the
        jobs whose pod events said so are looked at (a pass per pod event must not cost a scan of every job); all
        of them every FULL_SCAN_SECONDS, in case an event was missed."""
        now = self.clock.monotonic()
        if now >= self._next_full_scan:
            self._next_full_scan = now + FULL_SCAN_SECONDS
            self._candidates = set(self.host.pods)
        found: dict[JobKey, JobView] = {}
        for key in list(self._candidates):
            if not any(waits_for_admission(p) for p in list(self.host.pods.get(key) or [])):
                self._candidates.discard(key)
                continue
            view = self.host.view(key)
            if view is not None and not view.finished:
                found[key] = view
        return found

    def _builtin_job(self, view: JobView) -> TFJob | None:
        """The parsed job (at its recorded gang size) if it is valid, of the builtin backend and not suspended
        (worked out once per view: a view is one version of the job)."""
        key = (view.obj.get("metadata") or {}).get("uid")
        kept = self._jobs.get(key)
        if kept is not None and kept[0] is view:
            return kept[1]
        job = self._decide_builtin_job(view)
        self._jobs[key] = (view, job)
        return job

    def _decide_builtin_job(self, view: JobView) -> TFJob | None:
        job = view.job
        if job is None:
            return None
        try:
            backend = backend_for(job, self.host.settings.gang_backend, self.host.gang_options)
        except GangBackendError:
            return None
        if not isinstance(backend, ReleasedByOperator) or job.spec.runPolicy.suspend:
            return None
        # The gang as created: a refused resize of a running gang does not change how many pods it waits for, and
        # an elastic gang waits for the width its status records.
        return effective_job(job, view.status)[0]

    async def pass_once(self) -> PassPlan | None:
        """One admission pass. Returns its plan (None when nothing waited)."""
        metrics = self.host.metrics
        self._integrate_gpu_seconds(every=INTEGRATE_SECONDS)
        views = self._waiting_jobs()
        jobs = {key: job for key, view in views.items() if (job := self._builtin_job(view)) is not None}
        waiting_uids = {(view.obj.get("metadata") or {}).get("uid") for view in views.values()}
        self._jobs = {uid: kept for uid, kept in self._jobs.items() if uid in waiting_uids}
        waiting = {key: view.obj for key, view in views.items()}
        if not jobs:
            self.state.fits = {}
            self._publish({}, set())
            self._forget_timeouts()
            metrics.gang_queue_length.set(0)
            return None
        await asyncio.shield(self.host.watch_cluster())
        now = self.clock.now()
        started = self.clock.monotonic()
        self._expire_releases()
        members_of: dict[JobKey, list[Mapping[str, Any]]] = {
            key: current_gang(waiting[key], self._as_released(list(self.host.pods.get(key) or [])),
                              attempt=views[key].status.restartCount) for key in jobs}
        await self._resolve_priority_classes([p for members in members_of.values() for p in members])
        class_values = {name: value for name, (_, value) in self._priority_cache.items()}
        gangs: list[QueuedGang] = []
        for key, job in jobs.items():
            skey = key_str(key)
            if skey not in self.state.seen:
                self._seq += 1
                self.state.seen[skey] = self._seq
            members = members_of[key]
            gangs.append(QueuedGang(job, members, priority=gang_priority(members, class_values),
                                            arrival=arrival_seconds(waiting[key], self.state.seen[skey])))
            if members and all(builtin.is_gated(p) for p in members):
                self.state.queued_since.setdefault(skey, self.clock.monotonic())
        plan = plan_pass_in(gangs, self.capacity.cluster(), now=now, options=self.host.gang_options,
                                    passes_waited=self.state.passes_waited, not_before=self.state.not_before,
                                    requests=self._requests)
        self.passes += 1
        self.state.fits = dict(plan.fits)
        metrics.gang_pass_seconds.observe(self.clock.monotonic() - started)
        by_key = {builtin.job_key(g.job): g for g in gangs}
        await self._release(plan, waiting, by_key)
        await self._time_out(plan, by_key, waiting, now)
        self._count_passes(plan, now)
        for skey, wait in plan.waits.items():
            # Still being created, or backing off after a timeout: not a placement that failed.
            if skey not in self.state.failure_counted and wait.kind in (WaitKind.NO_ROOM, WaitKind.NEVER_FITS):
                metrics.gang_admission_failures.labels(
                    "never_fits" if wait.kind is WaitKind.NEVER_FITS else "no_room").inc()
                self.state.failure_counted.add(skey)
        self._publish(plan.waits, {key_str(k) for k in jobs})
        self._forget_timeouts()
        metrics.gang_queue_length.set(len(plan.waits))
        self._schedule_deadline(gangs, now)
        return plan

    async def _resolve_priority_classes(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """Look up PriorityClasses named by gated pods whose spec.priority the API server did not fill in."""
        now = self.clock.monotonic()
        wanted = {str((p.get("spec") or {}).get("priorityClassName")) for p in pods
                  if (p.get("spec") or {}).get("priorityClassName") and not (p.get("spec") or {}).get("priority")
                  and builtin.is_gated(p)}
        for name in wanted:
            cached = self._priority_cache.get(name)
            if cached is not None and now - cached[0] < PRIORITY_CACHE_SECONDS:
                continue
            try:
                found = await self.host.kube.get(f"{PRIORITY_CLASS_PATH}/{name}")
            except KubeError as exc:  # e.g. 403: rank the gang at priority 0 rather than stop admission
                log.warning("cannot read PriorityClass %s (%s); its gangs rank at priority 0", name, exc)
                found = None
            self._priority_cache[name] = (now, int((found or {}).get("value") or 0))

    async def _release(self, plan: PassPlan, objs: Mapping[JobKey, Mapping[str, Any]],
                       gangs: Mapping[str, QueuedGang]) -> None:
        """One merge PATCH per pod of every admitted gang, all at once; then an Event per gang."""
        metrics = self.host.metrics
        # A gang's wait ends when the pass admits it, not when its PATCHes come back: in a burst they queue behind
        # the burst's creates (tfjob_operator.dispatch), and that is no wait of the gang's for room.
        admitted_at = self.clock.monotonic()
        results = await asyncio.gather(*(self._patch_release(r) for r in plan.releases), return_exceptions=True)
        stamp = self.clock.monotonic()
        pods = {(str(gangs[skey].job.namespace), str((p.get("metadata") or {}).get("name"))): p
                for skey in plan.admitted for p in gangs[skey].pods}
        for release, result in zip(plan.releases, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                metrics.gang_admission_failures.labels("release_error").inc()
                log.warning("releasing pod %s/%s to %s failed: %s", release.namespace, release.pod, release.node,
                            result)
                continue
            pod = pods.get((release.namespace, release.pod))
            pod_key = f"{release.namespace}/{release.pod}"
            # Counted where it was pinned until the watch shows the release (then the pod itself says so).
            reserve = pod is not None and not self.capacity.holds(pod_key)
            self._releases[pod_key] = _Unseen(result, stamp, release.patch, reserved=reserve)
            if pod is not None and reserve:
                self.capacity.reserve(pod_key, release.node, scheduling_demand(pod))
        by_pod = {(r.namespace, r.pod): r for r in plan.releases}
        for skey in plan.admitted:
            key = key_tuple(skey)
            mine = [r for p in gangs[skey].pods
                    if (r := by_pod.get((key[0], str((p.get("metadata") or {}).get("name"))))) is not None]
            since = self.state.queued_since.pop(skey, None)
            waited = admitted_at - since if since is not None else None
            if waited is not None:
                metrics.gang_admission_seconds.observe(waited)
            metrics.gang_admissions.inc()
            self.state.failure_counted.discard(skey)
            message = f"gang admitted: released {len(mine)} pods to {placement_summary(mine)}"
            if waited is not None:
                message += f" after {waited:.1f}s in the queue"
            log.info("%s: %s", skey, message)
            shown = self.state.reasons.get(skey)
            if (shown is not None and shown.shown) or (waited or 0.0) >= ADMITTED_NEWS_SECONDS:
                # News only after a wait the Queued condition showed; admitted at once, the gang's pods running
                # say it (the happy path posts two Events: JobCreated and the outcome).
                await self._event(objs.get(key), "Normal", Reason.GANG_ADMITTED, message)

    async def _patch_release(self, release: Release) -> str:
        """PATCH one pod's release; its uid. Only the uid is kept of the patched pod the server returns: a pass
        may release thousands of pods, and gathered whole they were all held (managedFields and all) until the
        last PATCH came back."""
        patched = await self.host.kube.request("PATCH", pods_path(release.namespace, release.pod), release.patch,
                                               content_type=MERGE_PATCH)
        return str(((patched or {}).get("metadata") or {}).get("uid") or "")

    async def _time_out(self, plan: PassPlan, gangs: Mapping[str, QueuedGang],
                        objs: Mapping[JobKey, Mapping[str, Any]], now: datetime) -> None:
        """Watchdog: delete a released gang that did not bind in time; reconcile recreates it gated."""
        for skey in plan.timed_out:
            gang = gangs[skey]
            count = self.state.timeouts.get(skey, 0) + 1
            self.state.timeouts[skey] = count
            wait = builtin.backoff_seconds(count)
            self.state.not_before[skey] = now + timedelta(seconds=wait)
            self.host.metrics.gang_schedule_timeouts.inc()
            unbound = [p for p in gang.pods if not builtin.is_bound(p)]
            limit = schedule_timeout_seconds(gang.job, self.host.gang_options)
            message = (f"{len(unbound)} of {len(gang.pods)} pods not scheduled within scheduleTimeoutSeconds={limit} "
                       f"of their release; deleting the gang, recreating it gated, admission resumes in {wait:g}s "
                       f"(schedule timeout {count})")
            log.warning("%s: %s", skey, message)
            await self._event(objs.get(key_tuple(skey)), "Warning", Reason.GANG_SCHEDULE_TIMEOUT, message)
            for pod in gang.pods:
                # One still counted in the capacity stays until the watch shows the pod go.
                if (mine := self._release_of(pod)) is not None and not mine.reserved:
                    del self._releases[_pod_key(pod)]
            await asyncio.gather(*(self.host.kube.delete_pod(gang.job.namespace,
                                                                   str((p.get("metadata") or {}).get("name")))
                                   for p in gang.pods))

    async def _event(self, obj: Mapping[str, Any] | None, kind: str, reason: str, message: str) -> None:
        if obj is None:
            return
        try:
            await self.host.kube.post_event(obj, kind, reason, message)
        except KubeError as exc:  # an Event is a courtesy
            log.warning("could not post event %s: %s", reason, exc)

    def _publish(self, reasons: Mapping[str, GangWait], considered: set[str]) -> None:
        """New reasons replace the old; jobs whose reason changed are reconciled (the status path writes Queued)."""
        old = self.state.reasons
        self.state.reasons = dict(reasons)
        for skey in set(old) | set(reasons):
            if old.get(skey) != reasons.get(skey):
                key = key_tuple(skey)
                if self.host.view(key) is not None:
                    self.host.trigger(key)
        self.state.forget(considered)

    def _count_passes(self, plan: PassPlan, now: datetime) -> None:
        """Count a wait at most once per period: passes run on every pod event, and the anti-starvation reservation
        (after AdmissionPolicy.starvation_passes waits) should follow waiting time, not cluster churn."""
        if self.state.counted_at is not None and (now - self.state.counted_at).total_seconds() < self.period:
            self.state.passes_waited = {k: self.state.passes_waited.get(k, 0) for k in plan.passes_waited}
            return
        self.state.passes_waited = dict(plan.passes_waited)
        self.state.counted_at = now

    def _forget_timeouts(self) -> None:
        """Timeout counts (the back-off exponent) last until the gang is all bound, or the job ends or goes."""
        for skey in list(set(self.state.timeouts) | set(self.state.not_before)):
            key = key_tuple(skey)
            view = self.host.view(key)
            gang = current_gang(view.obj, list(self.host.pods.get(key) or []),
                                attempt=view.status.restartCount) if view is not None else []
            if view is None or view.finished or (gang and all(builtin.is_bound(p) for p in gang)):
                self.state.timeouts.pop(skey, None)
                self.state.not_before.pop(skey, None)

    def _schedule_deadline(self, gangs: Sequence[QueuedGang], now: datetime) -> None:
        """Wake at the next watchdog deadline or end of a back-off, if sooner than the period."""
        deadlines = list(self.state.not_before.values())
        for gang in gangs:
            stamps = [t for p in gang.pods if not builtin.is_bound(p) and (t := builtin.released_at(p)) is not None]
            if stamps:
                deadlines.append(min(stamps) + timedelta(
                    seconds=schedule_timeout_seconds(gang.job, self.host.gang_options)))
        future = [d for d in deadlines if d > now]
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if future:
            # Released-at stamps have whole seconds: a little past the instant, so the deadline has surely passed.
            delay = (min(future) - now).total_seconds() + 1.0
            if delay < self.period:
                self._deadline = asyncio.get_running_loop().call_later(delay, self.wake)

    def _integrate_gpu_seconds(self, *, every: float = 0.0) -> None:
        """Add the GPU-seconds held since the last call by gangs bound in part but not all running (any backend);
        nothing if the last call is less than `every` seconds ago. Only the jobs a pod event named since they last
        held nothing idle are read: whether a job holds GPUs idle changes only with its pods."""
        now = self.clock.monotonic()
        if now - self._last_integration < every:
            return
        seconds, self._last_integration = now - self._last_integration, now
        pods_by_job: dict[JobKey, list[Mapping[str, Any]]] = {}
        for key in list(self._holding):
            pods = list(self.host.pods.get(key) or [])
            if not _holds_idle(pods):
                self._holding.discard(key)  # nothing bound, or everything running or ended (no job to read)
                continue
            view = self.host.view(key)
            if view is not None and not view.finished:
                pods_by_job[key] = current_gang(view.obj, pods, attempt=view.status.restartCount)
        held = held_gpu_seconds_by_job(pods_by_job, seconds)
        if held > 0:
            self.host.metrics.gang_partial_gpu_seconds.inc(float(held))


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


@dataclass
class _Unseen:
    """A release this loop made (pod uid, when on the monotonic clock, the patch); ``reserved`` while it counts in
    the kept capacity (until the cluster watch shows it). Forgotten after RESERVATION_SECONDS."""

    uid: str
    at: float
    patch: dict[str, Any]
    reserved: bool


def _holds_idle(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Some pod is bound and some live pod is not Running: a gang that may hold GPUs it cannot use yet."""
    live = [p for p in pods if not is_terminal(p)]
    return any(builtin.is_bound(p) for p in live) and any(
        (p.get("status") or {}).get("phase") != "Running" for p in live)
