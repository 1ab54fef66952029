"""A pod as reconcile sees it: identity, phase, exit, and why it went away when that was not its own doing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tfjob_operator.api import ReplicaType, constants
from tfjob_operator.api.times import parse_time
from tfjob_operator.reconcile.diagnosis import explain
from tfjob_operator.reconcile.reasons import Reason
from tfjob_worker import exit_codes
from tfjob_worker.stall import StallRecord


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
    disruption: Reason | None
    disruption_message: str
    node: str | None
    #: In-place container restarts by the kubelet (restartPolicy OnFailure/Always), init containers included.
    restarts: int = 0
    #: The last in-place restart's cause, e.g. "exited with code 1: ValueError: ..."; "" when none.
    last_restart: str = ""
    #: The training container's termination message (its log tail on failure) and reason, e.g. OOMKilled.
    exit_message: str = ""
    exit_reason: str | None = None
    #: What its stall watchdog said of it (exit 202): where it was blocked, its last step; None otherwise.
    stall: StallRecord | None = None

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


#: Node taints that mark a node for removal (Karpenter's disruption, Cluster Autoscaler's scale-down): the gang
#: backend, which reads nodes, reports such nodes (`GangView.leaving_nodes`); their pods are then evicted, which
#: `DISRUPTION_REASONS` reads as a disruption.
NODE_REMOVAL_TAINTS: tuple[str, ...] = ("karpenter.sh/disrupted", "ToBeDeletedByClusterAutoscaler")
#: Pod `status.reason` values Kubernetes writes (read here; the reasons reconcile writes are `Reason`'s).
KUBE_EVICTED = "Evicted"
KUBE_NODE_LOST = "NodeLost"
#: A DisruptionTarget (or Kueue's TerminationTarget) condition's reason → the reason the gang restart records.
DISRUPTION_REASONS: dict[str, Reason] = {
    "PreemptionByScheduler": Reason.POD_PREEMPTED,
    "PreemptionByKubeScheduler": Reason.POD_PREEMPTED,
    "DeletionByTaintManager": Reason.NODE_LOST,
    "DeletionByPodGC": Reason.NODE_LOST,
    "EvictionByEvictionAPI": Reason.POD_EVICTED,
    "TerminationByKubelet": Reason.POD_EVICTED,
    # Kueue stops an evicted workload's pods with a TerminationTarget condition whose reason is
    # `WorkloadEvictedDueTo<the eviction's reason>` (Kueue 0.17, seen in tests/upstream/test_kueue.py; other
    # evictions, such as a PodsReady timeout, read as PodDisrupted); older releases wrote StoppedByKueue.
    "WorkloadEvictedDueToPreempted": Reason.POD_PREEMPTED,
    "StoppedByKueue": Reason.POD_PREEMPTED,
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
    disruption: Reason | None = None
    disruption_message = status.get("message") or ""
    target = conditions.get("DisruptionTarget")
    if not (target and target.get("status") == "True"):
        target = conditions.get("TerminationTarget")  # Kueue's own condition before it deletes the pods
    if target and target.get("status") == "True":
        disruption = DISRUPTION_REASONS.get(target.get("reason") or "", Reason.POD_DISRUPTED)
        disruption_message = target.get("message") or disruption_message
    if status.get("reason") == KUBE_EVICTED:
        disruption = Reason.POD_EVICTED
    if status.get("reason") == KUBE_NODE_LOST or status.get("phase") == "Unknown":
        disruption = Reason.NODE_LOST
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
        stall=StallRecord.parse(str(terminated.get("message") or "")) if exit_code == exit_codes.STALLED else None,
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


def awaits_start(pod: Mapping[str, Any]) -> bool:
    """The pod is live and its next step is up to the control plane alone (the gang release, the scheduler, the
    kubelet's first look), nothing outside: it carries the gang gate alone; or it is unbound and the scheduler has
    given no verdict yet (no PodScheduled condition, or only the SchedulingGated one kube-apiserver writes on a
    gated pod); or it is bound and its kubelet has not reported it yet (no container statuses). Not a pod held by
    another gate (Kueue's waits for quota), one the scheduler found no room for, nor one its kubelet is starting
    (pulling an image can take minutes)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    gates = {g.get("name") for g in spec.get("schedulingGates") or []}
    if gates:
        return gates == {constants.GANG_SCHEDULING_GATE}
    if spec.get("nodeName"):
        return not status.get("containerStatuses") and not status.get("initContainerStatuses")
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    return scheduled is None or scheduled.get("reason") == "SchedulingGated"
