"""What the controller knows of each job's status beyond the watch: the status it last decided, the status it
last wrote (or read, until it writes), the annotations it last wrote, and the write hold.

The watch trails the controller's own writes, and some writes are held back (below), so the next reconcile
starts from the decided status laid over the watched job (:meth:`JobRecord.overlay`), and a write is sent only
when the decided status differs from the written one (:meth:`JobRecord.plan_write`). Every entry is tagged with
the job's uid: a job deleted and created again under its name starts afresh. Lost on restart, by design: the
watch then holds everything the controller wrote.

The hold: a change of only the fields that follow the pods (counts, `state`, Created...) waits for company until
HOLD_SECONDS have passed since it was first held and since the job's last pod event (pods still moving: being
created, scheduled, started, deleted; their next step will be news too), at most HOLD_MOST_SECONDS. While some of
the job's pods await their start from the control plane alone (`observe.awaits_start`: gated for the gang's
release, not yet looked at by the scheduler, or bound and not yet reported by their kubelet) their next step needs
nothing from outside, however long the queue ahead of them on a busy control plane: the change is held on, and the
HOLD_MOST_SECONDS bound counts from the last time they were seen waiting (itself at most HOLD_MOST_SECONDS into the
hold, so nothing is held longer than twice that). A wait that is news is never held on: a gang the admission loop
finds short of room is Queued (written at once), a pod the scheduler finds no room for or its kubelet is starting
(an image pull) ends the wait. No decision that must survive a crash (an attempt number, an outcome, Queued) is
ever held; a crash within the hold loses only counts the next reconcile recomputes and the Created condition (its
Event is posted anyway). A job that goes well thus writes its status about twice (Created with Running, Succeeded
with the counts the clean-up leaves), not once per pod transition.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfjob_operator.api.keys import JobKey
from tfjob_operator.api.observed import JobView, view_job

#: Status fields that follow the pods alone or come with the first reconcile; a change of only these (and of the
#: Created condition) may wait HOLD_SECONDS for company.
HOLDABLE_FIELDS = frozenset({"replicaStatuses", "workers", "lastReconcileTime", "startTime", "observedGeneration",
                             "state"})
HOLD_SECONDS = 1.0
#: A held change is written at the latest this long after it was first held, however its pods keep moving, or
#: after its pods were last seen awaiting their start (see the module docstring).
HOLD_MOST_SECONDS = 10.0

Status = dict[str, Any]


def _urgent_part(status: Mapping[str, Any]) -> dict[str, Any]:
    part = {k: v for k, v in status.items() if k not in HOLDABLE_FIELDS}
    part["conditions"] = [c for c in part.get("conditions") or [] if c.get("type") != "Created"]
    return part


@dataclass(frozen=True)
class WritePlan:
    """What to do with a decided status: write it now (`write`), or hold it `held` more seconds (None: not held)."""

    write: bool
    held: float | None = None


class JobRecord:
    """One job's status as the controller decided and wrote it (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: (uid, status) last decided: the next reconcile starts from it.
        self.decided: tuple[str | None, Status] | None = None
        #: (uid, status) last written to the API server (or read from it, until we write).
        self.written: tuple[str | None, Status] | None = None
        #: When a change that may wait was first held back (the clock's time), until it is written.
        self.held_since: float | None = None
        #: (uid, annotations) last written (a kubeflow.org job's gang counters live there).
        self.annotations: tuple[str | None, dict[str, str | None]] | None = None
        #: When an event of one of the job's pods was last seen (the clock's time): a hold lasts past it.
        self.pods_moved: float | None = None
        #: When some of the job's pods were last seen awaiting their start: the hold's bound counts from it.
        self.starting: float | None = None

    def read(self, uid: str | None, watched: Callable[[], Status]) -> None:
        """Before a reconcile: until this controller writes a job's status, what the server holds is the
        watch's copy (`watched()`, called only then)."""
        if self.written is None or self.written[0] != uid:
            self.written = (uid, watched())

    def overlay(self, view: JobView) -> JobView:
        """The view with this controller's last writes laid over it: the watch may not have caught up with them."""
        current = (view.obj.get("metadata") or {}).get("annotations") or {}
        merged = self.annotations_over(view.uid, current)
        if merged != current:
            # Annotations are part of the spec as reconcile reads it (the recorded gang size): parse again.
            view = view_job({**view.obj, "metadata": {**(view.obj.get("metadata") or {}), "annotations": merged}})
        return self.with_decided(view)

    def annotations_over(self, uid: str | None, current: Mapping[str, str]) -> dict[str, str]:
        """The job's annotations with those this controller last wrote laid over `current` (the watch's)."""
        if self.annotations is None or self.annotations[0] != uid:
            return dict(current)
        return {k: v for k, v in {**current, **self.annotations[1]}.items() if v is not None}

    def with_decided(self, view: JobView) -> JobView:
        """The view with the status this controller last decided for that job, if any."""
        if self.decided is not None and self.decided[0] == view.uid:
            view = view.with_status(copy.deepcopy(self.decided[1]))
        return view

    def plan_write(self, uid: str | None, new: Status, starting: bool = False) -> WritePlan:
        """Whether the decided status `new` must be written now, or may be held back (and for how long).
        `starting`: some of the job's pods await their start from the control plane (`observe.awaits_start`)."""
        on_server = self.written[1] if self.written is not None and self.written[0] == uid else None
        if new == on_server:
            self.held_since = None
            return WritePlan(write=False)
        if _urgent_part(on_server or {}) != _urgent_part(new):
            return WritePlan(write=True)
        now = self._clock()
        if self.held_since is None:
            self.held_since = now
        if starting:
            self.starting = now
        most = self.held_since + HOLD_MOST_SECONDS
        if self.starting is not None and self.starting > self.held_since:
            most = min(self.starting, most) + HOLD_MOST_SECONDS
        until = self.held_since + HOLD_SECONDS
        if self.pods_moved is not None:
            until = max(until, self.pods_moved + HOLD_SECONDS)
        if starting:
            until = most  # the start's next step is a pod event, which comes back here sooner
        left = min(until, most) - now
        return WritePlan(write=False, held=left) if left > 0 else WritePlan(write=True)

    def pod_event(self) -> None:
        """One of the job's pods changed: a held change waits HOLD_SECONDS more for its news."""
        self.pods_moved = self._clock()

    def wrote(self, uid: str | None, status: Status) -> None:
        """The status was written to the server."""
        self.held_since = None
        self.written = (uid, status)

    def decide(self, uid: str | None, status: Status) -> None:
        """The status was decided (written or held)."""
        self.decided = (uid, status)

    def annotated(self, uid: str | None, annotations: dict[str, str | None]) -> None:
        self.annotations = (uid, annotations)

    def current(self, uid: str | None, watched: Mapping[str, Any]) -> Mapping[str, Any]:
        """The status as this controller knows it: decided, else the watched one."""
        return self.decided[1] if self.decided is not None and self.decided[0] == uid else watched

    def merge(self, uid: str | None, field: str, value: Any) -> None:
        """A partial write (one status field) reached the server: the decided and written copies keep it."""
        for kept in (self.decided, self.written):
            if kept is not None and kept[0] == uid:
                kept[1][field] = value


class StatusCache:
    """A :class:`JobRecord` per job. A reconcile takes its job's record once and keeps it: after `forget` its
    writes land on the dropped record, not on a new job's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._records: dict[JobKey, JobRecord] = {}

    def record(self, key: JobKey) -> JobRecord:
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = JobRecord(self._clock)
        return record

    def forget(self, key: JobKey) -> None:
        self._records.pop(key, None)

    def pod_event(self, key: JobKey) -> None:
        """One of the job's pods changed (a job with no record yet has nothing held)."""
        record = self._records.get(key)
        if record is not None:
            record.pod_event()

    def __len__(self) -> int:
        return len(self._records)
