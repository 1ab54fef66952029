"""`tfjob local`'s capacity faults and what it shows of an elastic gang (docs/elastic.md, "Trying it locally").

- `--lose-node-after S`: S seconds after the chief's first epoch, the node of one worker is lost (the kubelet's
  `lose_node` fault: its processes die, its Lease stops). `--restore-node-after S`: S seconds after the gang
  trains again (its new chief's first step), so a shrunk gang always trains narrower before room returns however
  long TensorFlow takes to start; S seconds after the loss while the job waits for room (Queued).
- `--preempt-worker-after S`: S seconds after the first epoch, one worker's pod is deleted with its grace
  period, as a drain does: SIGTERM, the runtime's graceful stop (finish the step, save), then exit.
- The width (`workers 3/4 (min 2)`), each resize (the `Resized` message) and where training resumed, and the
  time from the node loss to training again split into detection, restart, TF start and restore.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.api import constants
from tfjob_operator.client.local.chief_log import Progress
from tfjob_operator.reconcile.reasons import RESTART_REASONS, Reason


def width_text(job: dict[str, Any]) -> str | None:
    """`workers 3/4 (min 2)` of an elastic job (status.elastic), else None."""
    el = (job.get("status") or {}).get("elastic") or {}
    if not el.get("currentReplicas"):
        return None
    return f"workers {el['currentReplicas']}/{el.get('maxReplicas', '?')} (min {el.get('minReplicas', '?')})"


def restart_events(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(Event name, reason, message) of the job's Events that restarted or resized its gang, oldest first. Events
    stay; the Restarting condition may be true for less than a view tick (a lost node's restart and the resize
    after it can land in one second), and what it said is then gone."""
    return [(e["metadata"]["name"], e.get("reason") or "", e.get("message") or "") for e in events
            if e.get("reason") in RESTART_REASONS]


def worker_victim(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The running worker (not the chief) with the highest index: the one a fault hits."""
    workers = [p for p in pods if p["metadata"]["labels"].get(constants.LABEL_REPLICA_TYPE) == "worker"
               and p["metadata"]["labels"].get(constants.LABEL_JOB_ROLE) != constants.ROLE_CHIEF
               and (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return max(workers, key=lambda p: int(p["metadata"]["labels"][constants.LABEL_REPLICA_INDEX]), default=None)


def evict(clients: Any, pod: str) -> None:
    """The Eviction API, as `kubectl drain` uses it: the pod is marked DisruptionTarget, then deleted with its
    grace period (SIGTERM first)."""
    from kubernetes import client

    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=clients.namespace))
    clients.core.create_namespaced_pod_eviction(pod, clients.namespace, body)


@dataclass
class Recovery:
    """From a node lost to training again: wall times (unix) seen by `tfjob local` and the new chief's start-up."""

    lost_at: float
    #: When the job first showed a gang restart after the loss (the operator saw it), as polled (±0.5 s).
    detected_at: float | None = None
    #: When the lost node was first seen not Ready (the node monitor grace over), as polled.
    not_ready_at: float | None = None
    #: The gang attempt that lost the node, and when every pod of a later attempt was first seen Running.
    attempt: int = 0
    running_at: float | None = None
    #: The resumed chief's `ready` split (began, phases, total), once it printed it.
    ready: dict[str, float] = field(default_factory=dict)
    width: int | None = None

    def breakdown(self) -> dict[str, float] | None:
        """detection, restart, tf_start, restore, total seconds; None until training runs again."""
        if self.detected_at is None or not self.ready.get("began"):
            return None
        began, total = self.ready["began"], self.ready.get("total", 0.0)
        restore = self.ready.get("restore", 0.0)
        return {"detection": self.detected_at - self.lost_at, "restart": max(began - self.detected_at, 0.0),
                "tf_start": total - restore, "restore": restore, "total": began + total - self.lost_at}


def timeline_text(rec: Recovery) -> str | None:
    """Each step from the loss, in seconds since it: `node NotReady +6.2s, gang restarted +6.7s, narrower gang
    Running +7.7s, first step +28.0s`; None until training runs again."""
    parts = rec.breakdown()
    if parts is None:
        return None
    marks = [("node NotReady", rec.not_ready_at), ("gang restarted", rec.detected_at),
             ("new gang Running", rec.running_at)]
    shown = [f"{what} +{at - rec.lost_at:.1f}s" for what, at in marks if at is not None]
    return ", ".join([*shown, f"first step +{parts['total']:.1f}s"])


def _attempt(pod: dict[str, Any]) -> int:
    try:
        return int(pod["metadata"]["labels"].get(constants.LABEL_ATTEMPT, "0"))
    except ValueError:
        return 0


def breakdown_text(parts: dict[str, float]) -> str:
    return (f"{parts['total']:.1f}s after the loss (detection {parts['detection']:.1f}s, restart "
            f"{parts['restart']:.1f}s, TF start {parts['tf_start']:.1f}s, restore {parts['restore']:.1f}s)")


@dataclass
class CapacityFaults:
    """The fault flags of one job, driven once per view tick; `note` says what happened in the view."""

    lose_node_after: float | None
    restore_node_after: float | None
    preempt_worker_after: float | None
    note: Callable[[str], None]
    first_epoch_at: float | None = None
    lost_node: str | None = None
    lost_mono: float = 0.0
    restored: bool = False
    trained_mono: float | None = None  # when the gang was seen training again after the loss
    preempted: bool = False
    recovery: Recovery | None = None
    resizes: list[str] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)  # the Events noted, by name
    _resumed: tuple[int, int] | None = None

    def tick(self, cluster: Any, clients: Any, events: list[dict[str, Any]], pods: list[dict[str, Any]],
             progress: Progress, state: str | None = None) -> None:
        """One view tick: inject what is due, and note what changed (resizes, the resumed width, the recovery).
        `state` is the job's (status.state)."""
        now = time.monotonic()
        if self.first_epoch_at is None and progress.epoch >= 1:
            self.first_epoch_at = now
        self._watch(events, progress)
        if self.first_epoch_at is None:
            return
        since = now - self.first_epoch_at
        if self.lose_node_after is not None and self.lost_node is None and since >= self.lose_node_after:
            victim = worker_victim(pods)
            if victim and (node := (victim.get("spec") or {}).get("nodeName")):
                cluster.call(cluster.kubelet.lose_node(node))
                self.lost_node, self.recovery = node, Recovery(lost_at=time.time(),
                                                               attempt=max(map(_attempt, pods), default=0))
                self.lost_mono = now
                self.note(f"node {node} lost (its worker {victim['metadata']['name']} with it; --lose-node-after)")
        if self.recovery is not None and self.recovery.ready and self.trained_mono is None:
            self.trained_mono = now
        since_trained = now - self.trained_mono if self.trained_mono is not None else None
        waiting = state == "Queued" and now - self.lost_mono >= (self.restore_node_after or 0)
        if (self.restore_node_after is not None and self.lost_node and not self.restored
                and (waiting or (since_trained is not None and since_trained >= self.restore_node_after))):
            cluster.call(cluster.kubelet.restore_node(self.lost_node))
            self.restored = True
            self.note(f"node {self.lost_node} restored (--restore-node-after)")
        self._follow_recovery(clients, pods)
        if self.preempt_worker_after is not None and not self.preempted and since >= self.preempt_worker_after:
            victim = worker_victim(pods)
            if victim:
                evict(clients, victim["metadata"]["name"])
                self.preempted = True
                self.note(f"preempted {victim['metadata']['name']}: evicted as a drain does, with its grace period "
                          "(SIGTERM: the workers finish the step, the chief saves; --preempt-worker-after)")

    def _follow_recovery(self, clients: Any, pods: list[dict[str, Any]]) -> None:
        """The steps of the timeline the view does not otherwise show: the node turning NotReady, the new gang
        Running."""
        rec = self.recovery
        if rec is None or rec.ready:
            return
        now = time.time()
        if rec.not_ready_at is None and clients is not None and self.lost_node:
            node = clients.core.read_node(self.lost_node)
            ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
            if ready is None or ready.status != "True":
                rec.not_ready_at = now
        newer = [p for p in pods if _attempt(p) > rec.attempt and not p["metadata"].get("deletionTimestamp")]
        if rec.running_at is None and newer and all((p.get("status") or {}).get("phase") == "Running"
                                                     for p in newer):
            rec.running_at = now

    def _watch(self, events: list[dict[str, Any]], progress: Progress) -> None:
        for event, reason, message in restart_events(events):
            if event not in self._seen:
                self._seen.add(event)
                if reason == Reason.RESIZED:
                    self.resizes.append(message)
                self.note(f"{reason}: {message}")
                rec = self.recovery
                if rec is not None and rec.detected_at is None:
                    rec.detected_at = time.time()
        rec = self.recovery
        if rec and rec.detected_at is not None and not rec.ready and progress.ready.get("began", 0) > rec.lost_at:
            rec.ready, rec.width = dict(progress.ready), progress.resized[1] if progress.resized else None
            parts = rec.breakdown()
            if parts:
                self.note(f"training again {breakdown_text(parts)}")
                self.note(f"timeline from the loss: {timeline_text(rec)}")
        if progress.resized and progress.resized != self._resumed and progress.resumed_at:
            self._resumed = progress.resized
            self.note(f"resumed at epoch {progress.resumed_at} with {progress.resized[1]} replicas "
                      f"(the backup was saved at {progress.resized[0]})")
