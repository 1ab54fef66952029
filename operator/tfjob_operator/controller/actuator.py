"""The acts that carry out one decision through `kube`: the status (written or held, `status_cache`), its Events,
annotations, pod deletes, creates, and the job's own deletion, in that order.

The actuator keeps what it wrote and did per job (the status record, the Events posted, the pods expected, a pod
creation refused for good) and looks it up itself: a call carries only what the controller decided. The
controller reads the job as the actuator last wrote it (`annotations`, `with_decided`).

Status first: a decision such as "attempt 3" must survive a crash. Events are posted in the background and
deduplicated per job, like Kubernetes' event correlator. After creating pods the actuator waits (bounded) until
the pod index shows them, and until the watch shows a pod it created (at most `EXPECTATIONS_SECONDS`, as
client-go's controller expectations) no reconcile creates it again: a 409 per pod saved when the watch trails
the creates by more than the wait (a relist after a 410, at thousands of jobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.api import JobConditionType, apigroups
from tfjob_operator.api.keys import JobKey
from tfjob_operator.api.observed import JobView
from tfjob_operator.api.times import SYSTEM_CLOCK, Clock
from tfjob_operator.controller.status_cache import StatusCache
from tfjob_operator.kube import Kube, KubeError, refusal_is_permanent
from tfjob_operator.metrics import Metrics
from tfjob_operator.reconcile import AnnotateJob, CreateObject, Decision, DeleteJob, DeletePod, EmitEvent, Reason

log = logging.getLogger("tfjob_operator")

#: Identical Events for one job within this many seconds are posted once (like Kubernetes' event correlator).
EVENT_DEDUP_SECONDS = 60.0
#: At most this long after creating pods, the actuator waits for the pod watch to show them.
UNTIL_SEEN_SECONDS = 10.0
#: A pod created is taken as there until the watch shows it, for at most this long (client-go's
#: ExpectationsTimeout): a reconcile meanwhile does not create it again.
EXPECTATIONS_SECONDS = 300.0
#: At stop, Events still being sent get this long.
STOP_GRACE_SECONDS = 2.0


@dataclass
class JobActs:
    """What the actuator remembers about one job between reconciles (lost on restart, by design), besides its status
    record."""

    #: The job these acts were for: a job deleted and created again under its name starts afresh.
    uid: str | None = None
    recent_events: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Why the API server refused the job's pods for good (the next reconcile fails the job), if it did.
    pod_create_error: str | None = None
    #: The authorizer refused one of the operator's requests for the job (`kube.not_authorized`'s line), until an
    #: act goes through.
    not_authorized: str | None = None
    #: Set by every event of one of the job's pods (read-your-writes after creating them waits on it).
    pods_changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Pods created (or being created) that the watch has not shown yet: name → until when (monotonic).
    expected: dict[str, float] = field(default_factory=dict)


class Actuator:
    """Carries out decisions. `pods` is the pod index (read-your-writes); `requeue(key)` asks for another
    reconcile (the API server refused a pod for good: the next reconcile fails the job)."""

    def __init__(self, kube: Kube, metrics: Metrics, pods: Mapping[JobKey, Any],
                 requeue: Callable[[JobKey], None], clock: Clock = SYSTEM_CLOCK) -> None:
        self.kube = kube
        self.metrics = metrics
        self.pods = pods
        self._requeue = requeue
        self.clock = clock
        #: Each job's status as decided and written, and the write hold.
        self.status = StatusCache(clock.monotonic)
        self._jobs: dict[JobKey, JobActs] = {}
        #: Work nobody waits for (Events), kept referenced until done.
        self._background: set[asyncio.Task[None]] = set()

    def _acts(self, key: JobKey, uid: str | None) -> JobActs:
        acts = self._jobs.get(key)
        if acts is None or (acts.uid is not None and uid is not None and acts.uid != uid):
            acts = self._jobs[key] = JobActs(uid)
        acts.uid = acts.uid or uid
        return acts

    def forget(self, key: JobKey) -> None:
        self._jobs.pop(key, None)
        self.status.forget(key)

    def pods_changed(self, key: JobKey, name: str) -> None:
        """Pod `name` of the job changed: it is no longer awaited, a wait for the created pods wakes, and a status
        change held for the pods' news waits a little more."""
        acts = self._jobs.get(key)
        if acts is not None:
            acts.expected.pop(name, None)
            acts.pods_changed.set()
        self.status.pod_event(key)

    def pod_create_error(self, key: JobKey) -> str | None:
        """Why the API server refused the job's pods for good, if it did (the next reconcile fails the job)."""
        acts = self._jobs.get(key)
        return acts.pod_create_error if acts is not None else None

    def not_authorized(self, key: JobKey) -> str | None:
        """What the authorizer refused the operator for this job, while it does (the job's condition says it)."""
        acts = self._jobs.get(key)
        return acts.not_authorized if acts is not None else None

    def refused(self, key: JobKey, obj: Mapping[str, Any], refusal: str) -> None:
        """The authorizer refused a request for the job: remember it for the next reconcile's condition and post a
        Warning Event (once a minute at most for the same refusal; the request itself is retried with back-off)."""
        acts = self._acts(key, (obj.get("metadata") or {}).get("uid"))
        acts.not_authorized = refusal
        self._in_background(self._post_event(obj, EmitEvent("Warning", Reason.OPERATOR_FORBIDDEN, refusal), acts))

    def annotations(self, key: JobKey, view: JobView) -> dict[str, str]:
        """The job's annotations as this operator last wrote them over the watched ones (the watch may trail its
        writes). Until it writes the job's status, the watch's is taken as what the server holds."""
        record = self.status.record(key)
        record.read(view.uid, lambda: apigroups.status_for_group(
            apigroups.group_of(view.obj), key[1], view.status.model_dump(mode="json")))
        return record.annotations_over(view.uid, (view.obj.get("metadata") or {}).get("annotations") or {})

    def with_decided(self, key: JobKey, view: JobView) -> JobView:
        """The view with the status this operator last decided for the job."""
        return self.status.record(key).with_decided(view)

    async def write_progress(self, key: JobKey, body: Mapping[str, Any], progress: dict[str, Any]) -> bool:
        """Merge-patch status.progress of a Running job (`body` as watched); the decided and written copies keep
        it. False if the job is not Running as this operator knows it, or is gone."""
        record = self.status.record(key)
        uid = (body.get("metadata") or {}).get("uid")
        if record.current(uid, body.get("status") or {}).get("state") != "Running":
            return False  # finished or restarting since the read: the figures are no longer news
        written = await self.kube.patch_status(*key, {"progress": progress})
        if written is None:
            return False
        record.merge((written.get("metadata") or {}).get("uid"), "progress", progress)
        return True

    async def stop(self) -> None:
        """Events on their way get a moment to be sent (not a wait on a dead API server)."""
        if self._background:
            await asyncio.wait(self._background, timeout=STOP_GRACE_SECONDS)

    async def act(self, key: JobKey, view: JobView, decision: Decision, *,
                  annotate: Mapping[str, str | None] | None = None, starting: bool = False) -> float | None:
        """Status, its Events, then the actions in order. `annotate` (a gang size read from the pods) is written
        with the decision's own annotations. `starting`: some of the job's pods await their start (a status
        change is held on meanwhile). Returns in how many seconds to come back for a status change held back
        (status_cache)."""
        namespace, name = key
        obj = view.obj
        record, acts = self.status.record(key), self._acts(key, view.uid)
        group = apigroups.group_of(obj)
        # Stored as its API keeps it: Kubeflow's CRD would prune our extra fields (the counters go to annotations).
        new_status = apigroups.status_for_group(group, name, decision.status.model_dump(mode="json"))
        plan = record.plan_write(view.uid, new_status, starting)
        if plan.write:
            if await self.kube.patch_status(namespace, name, new_status, group=group) is None:
                return None  # the job is gone
            record.wrote(view.uid, new_status)
        record.decide(view.uid, new_status)
        # Events right after the status they announce, in the background: the API pool sends them after every
        # queued create (tfjob_operator.dispatch), and the reconcile does not wait for them (the job's next
        # reconcile, e.g. its Running status, would wait behind the burst's creates too). Started here, so an error
        # below cannot leave them unsent.
        for event in decision.of_type(EmitEvent):
            self._in_background(self._post_event(obj, event, acts))
        for event in decision.of_type(EmitEvent):
            if event.condition == JobConditionType.RUNNING:
                self.metrics.running(view.status, obj["metadata"].get("creationTimestamp"), self.clock.now())
        deletes: list[DeletePod] = []
        creates: list[CreateObject] = []
        annotations: dict[str, str | None] = dict(annotate or {})
        for action in decision.actions:
            if isinstance(action, AnnotateJob):
                annotations.update(action.annotations)
            elif isinstance(action, DeletePod):
                deletes.append(action)
            elif isinstance(action, CreateObject):
                creates.append(action)
        if annotations:
            await self.kube.annotate_job(namespace, name, annotations, group=group)
            record.annotated(view.uid, annotations)
        await asyncio.gather(*(self._delete(namespace, d) for d in deletes))
        await self._create(key, creates, acts)
        acts.not_authorized = None  # every request of this decision went through
        await self._until_seen(key, acts, {c.name for c in creates if c.kind == "Pod"})
        for action in decision.of_type(DeleteJob):
            log.info("deleting TFJob %s/%s: %s", namespace, name, action.reason)
            await self.kube.delete_job(namespace, name, view.uid, group=group)
        return plan.held

    async def _until_seen(self, key: JobKey, acts: JobActs, names: set[str],
                          timeout: float = UNTIL_SEEN_SECONDS) -> None:
        """Read-your-writes: wait (bounded, woken by the job's pod events) until the pod index shows the pods just
        created, so the next reconcile does not create them again (harmless, a 409, but a wasted request per pod;
        under load the watch may trail the creates by seconds)."""
        deadline = self.clock.monotonic() + timeout
        while names:
            acts.pods_changed.clear()
            seen = {(p.get("metadata") or {}).get("name") for p in (self.pods.get(key) or [])}
            left = deadline - self.clock.monotonic()
            if names <= seen or left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(acts.pods_changed.wait(), left)

    async def _delete(self, namespace: str, action: DeletePod) -> None:
        if await self.kube.delete_pod(namespace, action.name, force=action.force):
            self.metrics.pods_deleted.labels(str(action.force).lower()).inc()

    async def _create(self, key: JobKey, creates: list[CreateObject], acts: JobActs) -> None:
        # The Service and gang objects first (pods may need them), then every pod at once.
        for action in (c for c in creates if c.kind != "Pod"):
            await self.kube.create(action.obj)
        now = self.clock.monotonic()
        acts.expected = {name: until for name, until in acts.expected.items() if until > now}
        pods = [c for c in creates if c.kind == "Pod" and c.name not in acts.expected]
        # Expected before the request goes: the watch may show the pod before the response comes back.
        acts.expected.update((c.name, now + EXPECTATIONS_SECONDS) for c in pods)
        results = await asyncio.gather(*(self.kube.create(c.obj) for c in pods), return_exceptions=True)
        for action, result in zip(pods, results, strict=True):
            if result is not True:  # not created by this request: the watch may never show it (client-go: the
                acts.expected.pop(action.name, None)  # same for AlreadyExists; the next reconcile finds out)
        for result in results:
            if isinstance(result, KubeError) and refusal_is_permanent(result.status, result.message):
                acts.pod_create_error = str(result)  # retrying cannot fix it: the next reconcile fails the job
                self._requeue(key)
            elif isinstance(result, BaseException):
                raise result
            elif result:
                self.metrics.pods_created.inc()

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (which never raises) without waiting for it; :meth:`stop` lets it finish for a moment."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _post_event(self, obj: Mapping[str, Any], event: EmitEvent, acts: JobActs) -> None:
        now = self.clock.monotonic()
        key = (event.reason, event.message)
        if now - acts.recent_events.get(key, -EVENT_DEDUP_SECONDS) < EVENT_DEDUP_SECONDS:
            return
        acts.recent_events = {k: t for k, t in acts.recent_events.items() if now - t < EVENT_DEDUP_SECONDS}
        acts.recent_events[key] = now
        self.metrics.transition(event.condition, event.reason)
        log.info("%s/%s: %s: %s", obj["metadata"].get("namespace"), obj["metadata"]["name"], event.reason,
                 event.message)
        try:
            await self.kube.post_event(obj, event.type, event.reason, event.message)
        except KubeError as exc:  # an Event is a courtesy: never fail the reconcile for it
            log.warning("could not post event %s: %s", event.reason, exc)
