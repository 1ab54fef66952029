"""The TFJob lifecycle (docs/design.md §5), one table: a job and its pods at a moment → what the operator decides.

Each row reads: given this job and these pods, the job's state is X (reason R), these pods are created or
deleted, these Events are posted, restart counters are N. Times are seconds after T0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tfjob_operator.api import constants
from tfjob_operator.api.apigroups import KubeflowApi
from tfjob_operator.api.observed import PackedStore, as_kept, job_has_ttl, job_state, job_store, latest
from tfjob_operator.kube import not_authorized
from tfjob_operator.reconcile import (
    AnnotateJob,
    CreateObject,
    Decision,
    DeleteJob,
    DeletePod,
    EmitEvent,
    GangView,
    ReconcileOptions,
    format_time,
    reconcile,
)
from tfjob_operator.reconcile.observe import DISRUPTION_REASONS
from tfjob_worker.stall import StallRecord

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return format_time(T0 + timedelta(seconds=seconds))


# ---------------------------------------------------------------- builders


def replica(n: int, policy: str = "ExitCode") -> dict[str, Any]:
    return {"replicas": n, "restartPolicy": policy,
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}}


def tfjob(replicas: dict[str, Any] | None = None, *, status: dict[str, Any] | None = None,
          annotations: dict[str, str] | None = None, success: str = "", api: str = "tfjob.dev/v1",
          **run_policy: Any) -> dict[str, Any]:
    """A TFJob `j` in namespace `ns`; replicas default to 2 workers under ExitCode."""
    return {
        "apiVersion": api, "kind": "TFJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "generation": 1,
                     "annotations": annotations or {}},
        "spec": {"tfReplicaSpecs": replicas or {"Worker": replica(2)}, "runPolicy": run_policy,
                 "successPolicy": success},
        "status": status or {},
    }


def recorded(**counts: int) -> dict[str, str]:
    return {constants.ANNOTATION_GANG_REPLICAS: json.dumps(counts, sort_keys=True)}


def cond(ctype: str, reason: str = "X", status: str = "True", t: float = 0) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": "", "lastTransitionTime": at(t),
            "lastUpdateTime": at(t)}


def started(*conditions: dict[str, Any], restarts: int = 0, failures: int = 0, start: float = 0,
            completed: float | None = None) -> dict[str, Any]:
    """Status of a job the operator already created (Created true, plus the given conditions)."""
    status: dict[str, Any] = {"conditions": [cond("Created", "JobCreated"), *conditions], "startTime": at(start),
                              "restartCount": restarts, "failureRestarts": failures}
    if completed is not None:
        status["completionTime"] = at(completed)
    return status


RUNNING = cond("Running", "AllPodsRunning")
#: What every CPU-only TensorFlow process prints at start (real lines: tests/unit/test_log_noise.py).
CUDA_START = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
              "E0000 00:00:1795857979.960265   12384 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
              "error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
KILLED_BY_FAULT = "Killed with SIGKILL by a fault injection (tfjob local --kill-worker-after)"


def stalled(blocked: str, step: int, last_progress: float, where: str = "", peers: int = 2) -> str:
    """A stalled worker's termination message: its supervisor's error line and its StallRecord."""
    record = StallRecord(blocked, where, step, T0.timestamp() + last_progress, peers)
    return f"[tfjob] error: training stalled: no training progress for 21s\n{record.line()}\n"
KUBEFLOW_V1 = "kubeflow.org/v1"
KUBEFLOW_ALL = ReconcileOptions(kubeflow_api=KubeflowApi.ALL)


def pod(name: str, phase: str = "Running", *, code: int | None = None, attempt: int = 0, finished: float = 10,
        evicted: bool = False, disruption: str | None = None, deleting: float | None = None,
        node_lost: bool = False, restarts: int = 0, last_message: str = "", log_tail: str | None = None,
        reason: str | None = None) -> dict[str, Any]:
    """Pod `j-<name>` (e.g. "worker-1") of the given attempt; `code` makes its container terminated, with
    `log_tail` as its termination message and `reason` (e.g. OOMKilled); `restarts` in-place restarts by the
    kubelet, the last one exiting 1 with `last_message` as termination message."""
    rtype, index = name.rsplit("-", 1)
    labels = {constants.LABEL_JOB_NAME: "j", constants.LABEL_REPLICA_TYPE: rtype,
              constants.LABEL_REPLICA_INDEX: index, constants.LABEL_ATTEMPT: str(attempt)}
    meta: dict[str, Any] = {"name": f"j-{name}", "namespace": "ns", "labels": labels,
                            "ownerReferences": [{"uid": "uid-j", "controller": True, "kind": "TFJob", "name": "j"}]}
    if deleting is not None:
        meta["deletionTimestamp"] = at(deleting)
    state: dict[str, Any] = {"running": {}}
    if code is not None:
        state = {"terminated": {"exitCode": code, "finishedAt": at(finished), "reason": reason or "Error",
                                **({"message": log_tail} if log_tail is not None else {})}}
    status: dict[str, Any] = {"phase": phase, "containerStatuses": [{"name": "tensorflow", "state": state}]}
    if restarts:
        status["containerStatuses"][0].update(restartCount=restarts, lastState={"terminated": {
            "exitCode": 1, "reason": "Error", "message": last_message, "finishedAt": at(finished)}})
    if evicted:
        status.update(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
        status["containerStatuses"] = [{"name": "tensorflow", "state": {"terminated": {
            "exitCode": 137, "finishedAt": at(finished)}}}]
    if disruption:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": disruption,
                                 "message": "preempted by a higher-priority pod", "lastTransitionTime": at(finished)}]
    if node_lost:
        status.update(phase="Unknown", reason="NodeLost", message="node n1 stopped posting status")
    return {"metadata": meta, "spec": {"nodeName": "n1", "containers": [{"name": "tensorflow"}]}, "status": status}


def running(*names: str, attempt: int = 0) -> list[dict[str, Any]]:
    return [pod(n, "Running", attempt=attempt) for n in names]


W2 = ("worker-0", "worker-1")
#: kube.not_authorized's line for the authorizer's refusal of a pod create.
FORBIDDEN_PODS = not_authorized(403, 'pods is forbidden: User "system:serviceaccount:tfjob-system:tfjob-operator" '
                                'cannot create resource "pods" in API group "" in the namespace "default"')
W3 = ("worker-0", "worker-1", "worker-2")
W4 = ("worker-0", "worker-1", "worker-2", "worker-3")


def elastic_job(workers: int = 4, *, status: dict[str, Any] | None = None, lo: int = 2, hi: int = 4,
                cooldown: int = 300, **run_policy: Any) -> dict[str, Any]:
    """An elastic job (spec.elasticPolicy [lo, hi]) with `workers` as Worker.replicas."""
    job = tfjob({"Worker": replica(workers)}, status=status, **run_policy)
    job["spec"]["elasticPolicy"] = {"minReplicas": lo, "maxReplicas": hi, "resizeCooldownSeconds": cooldown}
    return job


def at_width(current: int, *conditions: dict[str, Any], restarts: int = 0, spec: int = 4, lo: int = 2,
             hi: int = 4, last: float | None = None, wider: float | None = None, cause: str | None = None,
             resizes: int = 0) -> dict[str, Any]:
    """Status of a started elastic job whose gang runs (or will run) `current` workers."""
    status = started(*conditions, restarts=restarts)
    status["elastic"] = {"currentReplicas": current, "minReplicas": lo, "maxReplicas": hi, "baseReplicas": 4,
                         "specReplicas": spec, "resizes": resizes, "cause": cause,
                         "lastResizeTime": None if last is None else at(last),
                         "widerSince": None if wider is None else at(wider)}
    return status


def fits(n: int | None, **more: Any) -> ReconcileOptions:
    return ReconcileOptions(gang=GangView(fits_workers=n, **more))


LOST = cond("Restarting", "NodeLost")
DYNAMIC_PS = {"Worker": replica(2), "PS": replica(1)}


def dynamic(replicas: dict[str, Any], **counts: int) -> dict[str, Any]:
    job = tfjob(replicas, status=started(RUNNING), annotations=recorded(**counts), api=KUBEFLOW_V1)
    job["spec"]["enableDynamicWorker"] = True
    return job
CW2P = ("chief-0", "worker-0", "worker-1", "ps-0")
CHIEF_W2_PS = {"Chief": replica(1), "Worker": replica(2), "PS": replica(1)}


# ---------------------------------------------------------------- the table


@dataclass
class Case:
    name: str
    job: dict[str, Any]
    pods: list[dict[str, Any]] = field(default_factory=list)
    now: float = 30
    state: str | None = None
    reason: str | None = None  # reason of the condition named by `state`
    message: tuple[str, ...] = ()  # fragments of that condition's message
    creates: tuple[str, ...] = ()  # pod names created, in order
    deletes: tuple[str, ...] = ()
    force_deletes: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    restarts: int = 0
    failure_restarts: int = 0
    workers: str | None = None
    requeue: float | None = None
    delete_job: bool = False
    options: ReconcileOptions = field(default_factory=ReconcileOptions)
    elastic: dict[str, Any] | None = None  # fields of status.elastic


CASES = [
    # --- creation
    Case("new job: Service, then every pod; Created", tfjob({"Chief": replica(1), "Worker": replica(2)}),
         state="Created", reason="JobCreated", creates=("j-chief-0", "j-worker-0", "j-worker-1"),
         events=("JobCreated",), workers="0/3"),
    Case("new job with PS and evaluator creates them too",
         tfjob({**CHIEF_W2_PS, "Evaluator": replica(1)}), state="Created",
         creates=("j-chief-0", "j-worker-0", "j-worker-1", "j-ps-0", "j-evaluator-0"), events=("JobCreated",)),
    Case("operator restarted mid-creation: only the missing pods are created, no second Created event",
         tfjob({"Worker": replica(3)}, status=started(), annotations=recorded(Worker=3)),
         pods=[pod("worker-0", "Pending")], state="Created", creates=("j-worker-1", "j-worker-2")),
    Case("operator stopped before Created reached the status (it is held a second): Created, no second Event",
         tfjob({"Worker": replica(3)}, annotations=recorded(Worker=3)),
         pods=[pod("worker-0", "Pending")], state="Created", reason="JobCreated", creates=("j-worker-1", "j-worker-2")),
    Case("all pods pending: nothing to do, not Running", tfjob(status=started(), annotations=recorded(Worker=2)),
         pods=[pod("worker-0", "Pending"), pod("worker-1", "Pending")], state="Created", workers="0/2"),
    Case("one pod of the gang still pending: not Running yet", tfjob(status=started(), annotations=recorded(Worker=2)),
         pods=[pod("worker-0"), pod("worker-1", "Pending")], state="Created", workers="1/2"),
    Case("every pod running: Running, no Event on the first attempt (the happy path posts Created and the outcome)",
         tfjob(CHIEF_W2_PS, status=started(), annotations=recorded(Chief=1, PS=1, Worker=2)), pods=running(*CW2P),
         state="Running", reason="AllPodsRunning", workers="4/4"),
    Case("gang backend holds the pods: Queued, nothing created", tfjob(), state="Queued", reason="GangQueued",
         message=("2 GPUs short",), events=("GangQueued",),
         options=ReconcileOptions(gang=GangView(ready_to_create_pods=False, queued_reason="2 GPUs short"))),
    # --- success
    Case("chief exits 0: Succeeded; running workers and PS deleted (cleanPodPolicy Running)",
         tfjob(CHIEF_W2_PS, status=started(RUNNING)),
         pods=[pod("chief-0", "Succeeded", code=0), *running("worker-0", "worker-1", "ps-0")],
         state="Succeeded", reason="ChiefSucceeded", deletes=("j-worker-0", "j-worker-1", "j-ps-0"),
         events=("ChiefSucceeded",)),
    Case("no chief: worker 0 exiting 0 decides success", tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Succeeded", code=0), pod("worker-1", "Succeeded", code=0)],
         state="Succeeded", reason="WorkerSucceeded", events=("WorkerSucceeded",)),
    Case("no chief: worker 1 done, worker 0 still running: still Running, and the message says who is done",
         tfjob(status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Succeeded", code=0)],
         state="Running", reason="NotAllPodsRunning",
         message=("1 of 2 pods of attempt 0 are running; 1 succeeded: j-worker-1",)),
    Case("AllWorkers: one worker done is not success", tfjob(status=started(RUNNING), success="AllWorkers"),
         pods=[pod("worker-0", "Succeeded", code=0), pod("worker-1")], state="Running"),
    Case("AllWorkers: every worker done, the PS is stopped",
         tfjob({"Worker": replica(2), "PS": replica(1)}, status=started(RUNNING), success="AllWorkers"),
         pods=[pod("worker-0", "Succeeded", code=0), pod("worker-1", "Succeeded", code=0), pod("ps-0")],
         state="Succeeded", reason="AllWorkersSucceeded", deletes=("j-ps-0",), events=("AllWorkersSucceeded",)),
    Case("cleanPodPolicy None keeps the evaluator running after success",
         tfjob({"Worker": replica(1), "Evaluator": replica(1)}, status=started(RUNNING), cleanPodPolicy="None"),
         pods=[pod("worker-0", "Succeeded", code=0), pod("evaluator-0")], state="Succeeded",
         events=("WorkerSucceeded",)),
    Case("cleanPodPolicy All deletes finished pods too", tfjob(status=started(RUNNING), cleanPodPolicy="All"),
         pods=[pod("worker-0", "Succeeded", code=0), pod("worker-1", "Succeeded", code=0)], state="Succeeded",
         deletes=("j-worker-0", "j-worker-1"), events=("WorkerSucceeded",)),
    Case("a finished job never recreates its pods", tfjob(status=started(cond("Succeeded", "WorkerSucceeded"),
         completed=20)), pods=[pod("worker-0", "Succeeded", code=0)], state="Succeeded"),
    # --- whole-gang restart
    Case("worker exit 130 under ExitCode restarts the whole gang and counts a failure",
         tfjob({"Chief": replica(1), "Worker": replica(2)}, status=started(RUNNING)),
         pods=[pod("chief-0"), pod("worker-0"), pod("worker-1", "Failed", code=130)], state="Restarting",
         reason="RetryableExitCode", message=("j-worker-1", "code 130", "attempt 1"),
         deletes=("j-chief-0", "j-worker-0", "j-worker-1"), events=("RetryableExitCode",), restarts=1,
         failure_restarts=1),
    Case("chief exit 143 (SIGTERM) under ExitCode restarts the gang",
         tfjob({"Chief": replica(1), "Worker": replica(1)}, status=started(RUNNING)),
         pods=[pod("chief-0", "Failed", code=143), pod("worker-0")], state="Restarting",
         message=("SIGTERM",), deletes=("j-chief-0", "j-worker-0"), events=("RetryableExitCode",), restarts=1,
         failure_restarts=1),
    Case("worker exit 1 under ExitCode fails the job naming pod, container and code",
         tfjob(status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Failed", code=1)],
         state="Failed", reason="NonRetryableExitCode", message=("j-worker-1", "container tensorflow", "code 1"),
         deletes=("j-worker-0",), events=("NonRetryableExitCode",)),
    Case("a failed worker's exception line and a hint are in the Failed condition and its Event",
         tfjob(status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Failed", code=1, log_tail=(
             "Epoch 1/2\nTraceback (most recent call last):\n  File \"train.py\", line 9\n"
             "ValueError: Attempt to convert a value (PerReplica:{\n  0: 1\n}) with an unsupported type\n"))],
         state="Failed", reason="NonRetryableExitCode",
         message=("code 1: ValueError: Attempt to convert a value (PerReplica:{ … }) with an unsupported type",
                  "hint: Keras 3"),
         deletes=("j-worker-0",), events=("NonRetryableExitCode",)),
    Case("a failure without an exception line reports the log's last words",
         tfjob(status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Failed", code=3,
                                                                    log_tail="step 40\nloss is NaN, stopping\n\n")],
         state="Failed", reason="NonRetryableExitCode", message=("code 3: loss is NaN, stopping",),
         deletes=("j-worker-0",), events=("NonRetryableExitCode",)),
    Case("an OOM-killed worker under Never is told about memory",
         tfjob({"Worker": replica(2, "Never")}, status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", "Failed", code=137, reason="OOMKilled")], state="Failed",
         reason="RestartPolicyNever", message=("pod j-worker-1 (Worker 1, container tensorflow) exited with code 137 "
                                               "(OOMKilled) (hint: the kernel's OOM killer stopped it at its memory "
                                               "limit",),
         deletes=("j-worker-0",), events=("RestartPolicyNever",)),
    Case("a SIGKILL the kubelet or a fault injection sent is reported as such, never as memory nor a CUDA line",
         tfjob(status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Failed", code=137, reason="Killed",
                                                                    log_tail=KILLED_BY_FAULT)],
         state="Restarting", reason="RetryableExitCode",
         message=("pod j-worker-1 (Worker 1, container tensorflow) exited with code 137 (SIGKILL): Killed with "
                  "SIGKILL by a fault injection (tfjob local --kill-worker-after); restarting the whole gang",),
         deletes=("j-worker-0", "j-worker-1"), events=("RetryableExitCode",), restarts=1, failure_restarts=1),
    Case("a SIGKILL nobody explained quotes no line of the log tail (CUDA start-up noise, progress) and is no OOM",
         tfjob(status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Failed", code=137,
                                                                    log_tail=CUDA_START + "[tfjob] epoch 1/6\n")],
         state="Restarting", reason="RetryableExitCode",
         message=("pod j-worker-1 (Worker 1, container tensorflow) exited with code 137 (SIGKILL) (hint: a "
                  "SIGKILL from outside the program, not reported as OOMKilled",),
         deletes=("j-worker-0", "j-worker-1"), events=("RetryableExitCode",), restarts=1, failure_restarts=1),
    Case("restartPolicy Never: even exit 137 fails the job", tfjob({"Worker": replica(2, "Never")},
         status=started(RUNNING)), pods=[pod("worker-0"), pod("worker-1", "Failed", code=137)], state="Failed",
         reason="RestartPolicyNever", message=("code 137",), deletes=("j-worker-0",),
         events=("RestartPolicyNever",)),
    Case("OnFailure: a worker pod that itself fails restarts the gang",
         tfjob({"Worker": replica(2, "OnFailure")}, status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", "Failed", code=2)], state="Restarting", reason="PodFailed",
         deletes=("j-worker-0", "j-worker-1"), events=("PodFailed",), restarts=1, failure_restarts=1),
    Case("eviction restarts the gang even under Never, and is not a failure",
         tfjob({"Worker": replica(2, "Never")}, status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", evicted=True)], state="Restarting", reason="PodEvicted",
         message=("evicted", "low on resource"), deletes=("j-worker-0", "j-worker-1"), events=("PodEvicted",),
         restarts=1),
    Case("preemption (DisruptionTarget) restarts the gang", tfjob(status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", "Failed", code=143, disruption="PreemptionByScheduler")],
         state="Restarting", reason="PodPreempted", deletes=("j-worker-0", "j-worker-1"), events=("PodPreempted",),
         restarts=1),
    Case("node loss restarts the gang", tfjob(status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", node_lost=True)], state="Restarting", reason="NodeLost",
         message=("node n1",), deletes=("j-worker-0", "j-worker-1"), events=("NodeLost",), restarts=1),
    Case("a pod deleted by the taint manager (Terminating + DisruptionTarget) restarts the gang",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", disruption="DeletionByTaintManager", deleting=25)],
         state="Restarting", reason="NodeLost", deletes=("j-worker-0",), events=("NodeLost",), restarts=1,
         requeue=55),
    Case("a worker of a running gang deleted behind the operator's back restarts the gang",
         tfjob(status=started(RUNNING), annotations=recorded(Worker=2)), pods=[pod("worker-0")],
         state="Restarting", reason="PodDeleted", deletes=("j-worker-0",), events=("PodDeleted",), restarts=1),
    Case("peer exits 200 after the first failure (eviction): one disruption restart",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Failed", code=200, finished=15), pod("worker-1", evicted=True, finished=10)],
         state="Restarting", reason="PodEvicted", message=("j-worker-1",), deletes=("j-worker-0", "j-worker-1"),
         events=("PodEvicted",), restarts=1, failure_restarts=0),
    Case("same second: the exit-1 cause wins over the peer's 'peer lost' exit 200",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Failed", code=200, finished=10), pod("worker-1", "Failed", code=1, finished=10)],
         state="Failed", reason="NonRetryableExitCode", message=("j-worker-1",), events=("NonRetryableExitCode",)),
    Case("a worker's stall watchdog (exit 202) restarts the gang as TrainingStalled, naming the worker",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Failed", code=202, finished=12), pod("worker-1", "Failed", code=202, finished=10)],
         state="Restarting", reason="TrainingStalled", message=("j-worker-1", "stalled", "exit 202", "attempt 1"),
         deletes=("j-worker-0", "j-worker-1"), events=("TrainingStalled",), restarts=1, failure_restarts=1),
    Case("a gang stall blames the worker stopped in its own code, not the first to exit nor the last to progress, "
         "and names the one that only waited for it",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Failed", code=202, finished=10, log_tail=stalled("tensorflow", 15, 100.0)),
               pod("worker-1", "Failed", code=202, finished=11,
                   log_tail=stalled("own", 15, 99.99, "worker/user_model.py:47 in stall_here"))],
         state="Restarting", reason="TrainingStalled",
         message=("pod j-worker-1 (Worker 1, container tensorflow) stalled in its own code at worker/user_model.py:47 "
                  "in stall_here after step 15 (exit 202: no training progress within runPolicy.stallTimeoutSeconds; "
                  "its log shows where it hung); j-worker-0 was only waiting for it, inside TensorFlow; restarting",),
         deletes=("j-worker-0", "j-worker-1"), events=("TrainingStalled",), restarts=1, failure_restarts=1),
    Case("the first stalled exit of a gang waits (bounded) for the verdicts of its peers still up",
         tfjob(status=started(RUNNING)), now=12,
         pods=[pod("worker-0", "Failed", code=202, finished=10, log_tail=stalled("tensorflow", 15, 100.0)),
               pod("worker-1")], requeue=8),
    Case("past that wait it judges with the verdicts it has",
         tfjob(status=started(RUNNING)), now=21,
         pods=[pod("worker-0", "Failed", code=202, finished=10, log_tail=stalled("tensorflow", 15, 100.0)),
               pod("worker-1")], state="Restarting", reason="TrainingStalled",
         message=("pod j-worker-0 (Worker 0, container tensorflow) stalled waiting inside TensorFlow",),
         deletes=("j-worker-0", "j-worker-1"), events=("TrainingStalled",), restarts=1, failure_restarts=1),
    Case("no worker stopped in its own code: it says it cannot tell, and names the one whose progress stopped first",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Failed", code=202, finished=10, log_tail=stalled("tensorflow", 15, 100.2)),
               pod("worker-1", "Failed", code=202, finished=11, log_tail=stalled("tensorflow", 14, 100.5))],
         state="Restarting", reason="TrainingStalled",
         message=("pod j-worker-1 (Worker 1, container tensorflow) stalled waiting inside TensorFlow",
                  "after step 14", "so did j-worker-0: none was stopped in its own code"),
         deletes=("j-worker-0", "j-worker-1"), events=("TrainingStalled",), restarts=1, failure_restarts=1),
    Case("stalls count towards backoffLimit: the last one allowed fails the job",
         tfjob(status=started(RUNNING, restarts=1, failures=1), backoffLimit=1),
         pods=[pod("worker-0", attempt=1), pod("worker-1", "Failed", code=202, attempt=1)], state="Failed",
         reason="BackoffLimitExceeded", message=("stalled", "backoffLimit 1"), deletes=("j-worker-0",),
         events=("BackoffLimitExceeded",), restarts=1, failure_restarts=1),
    Case("backoffLimit reached: a retryable failure fails the job",
         tfjob(status=started(RUNNING, restarts=3, failures=2), backoffLimit=2),
         pods=[pod("worker-0", attempt=3), pod("worker-1", "Failed", code=130, attempt=3)], state="Failed",
         reason="BackoffLimitExceeded", message=("backoffLimit 2",), deletes=("j-worker-0",),
         events=("BackoffLimitExceeded",), restarts=3, failure_restarts=2),
    Case("disruptions do not consume backoffLimit", tfjob(status=started(RUNNING, restarts=1, failures=1),
         backoffLimit=1), pods=[pod("worker-0", attempt=1), pod("worker-1", evicted=True, attempt=1)],
         state="Restarting", reason="PodEvicted", deletes=("j-worker-0", "j-worker-1"), events=("PodEvicted",),
         restarts=2, failure_restarts=1),
    Case("a peer exiting in the old attempt after the restart decision is ignored",
         tfjob(status=started(cond("Restarting", "PodEvicted"), restarts=1)),
         pods=[pod("worker-0", "Failed", code=200, deleting=29), pod("worker-1", evicted=True, deleting=29)],
         state="Restarting", reason="PodEvicted", restarts=1, requeue=59),
    Case("old attempt still running: delete it, create nothing until it is gone",
         tfjob(status=started(cond("Restarting", "RetryableExitCode"), restarts=1)),
         pods=[pod("worker-0", attempt=0), pod("worker-1", attempt=0, deleting=5)], state="Restarting",
         deletes=("j-worker-0",), restarts=1, requeue=35),
    Case("pod stuck Terminating past the timeout is force-deleted",
         tfjob(status=started(cond("Restarting", "NodeLost"), restarts=1)),
         pods=[pod("worker-1", node_lost=True, attempt=0, deleting=-40)], state="Restarting",
         force_deletes=("j-worker-1",), restarts=1),
    Case("old attempt gone: the next attempt is created (attempt label 1), no new Created event",
         tfjob(status=started(cond("Restarting", "RetryableExitCode"), restarts=1),
               annotations=recorded(Worker=2)), state="Restarting", creates=("j-worker-0", "j-worker-1"),
         restarts=1),
    Case("next attempt all running: Running again, Restarting false",
         tfjob(status=started(cond("Restarting", "RetryableExitCode", t=20), restarts=1),
               annotations=recorded(Worker=2)), pods=running(*W2, attempt=1), state="Running",
         events=("AllPodsRunning",), restarts=1, workers="2/2"),
    # --- backoffLimit: one rule for gang restarts and in-place restarts (docs/kubeflow.md)
    Case("OnFailure crash loop: in-place restarts beyond backoffLimit fail the job with the container's message",
         tfjob({"Worker": replica(2, "OnFailure")}, status=started(RUNNING), backoffLimit=2),
         pods=[pod("worker-0"), pod("worker-1", restarts=3, last_message="Traceback ...\nValueError: boom")],
         state="Failed", reason="BackoffLimitExceeded",
         message=("j-worker-1", "restarted in place 3 times", "code 1: ValueError: boom", "backoffLimit 2"),
         deletes=("j-worker-0", "j-worker-1"), events=("BackoffLimitExceeded",)),
    Case("OnFailure: in-place restarts up to backoffLimit are retries, the job keeps running",
         tfjob({"Worker": replica(2, "Always")}, status=started(RUNNING), backoffLimit=2),
         pods=[pod("worker-0"), pod("worker-1", restarts=2)], state="Running"),
    Case("backoffLimit 0: the first in-place restart fails the job",
         tfjob({"Worker": replica(1, "OnFailure")}, status=started(RUNNING), backoffLimit=0),
         pods=[pod("worker-0", restarts=1)], state="Failed", reason="BackoffLimitExceeded",
         message=("restarted in place once",), deletes=("j-worker-0",), events=("BackoffLimitExceeded",)),
    Case("gang restarts and in-place restarts add up towards backoffLimit",
         tfjob({"Worker": replica(2, "OnFailure")}, status=started(RUNNING, restarts=1, failures=1), backoffLimit=2),
         pods=[pod("worker-0", attempt=1), pod("worker-1", attempt=1, restarts=2)], state="Failed",
         reason="BackoffLimitExceeded", message=("3 failures", "1 gang restarts"),
         deletes=("j-worker-0", "j-worker-1"), events=("BackoffLimitExceeded",), restarts=1, failure_restarts=1),
    Case("a gang-restarting failure after in-place restarts used the budget fails the job",
         tfjob({"Worker": replica(2, "OnFailure")}, status=started(RUNNING), backoffLimit=1),
         pods=[pod("worker-0", restarts=1), pod("worker-1", "Failed", code=2)], state="Failed",
         reason="BackoffLimitExceeded", message=("j-worker-1", "backoffLimit 1"), deletes=("j-worker-0",),
         events=("BackoffLimitExceeded",)),
    # --- success as Kubeflow decides it
    Case("AllWorkers with a Chief: the chief decides, as in Kubeflow; running workers are stopped",
         tfjob({"Chief": replica(1), "Worker": replica(2)}, status=started(RUNNING), success="AllWorkers"),
         pods=[pod("chief-0", "Succeeded", code=0), *running(*W2)], state="Succeeded", reason="ChiefSucceeded",
         message=("AllWorkers does not apply",), deletes=("j-worker-0", "j-worker-1"), events=("ChiefSucceeded",)),
    Case("worker 0 succeeded while worker 1 failed (seen together): Succeeded, the failure named",
         tfjob(status=started(RUNNING)),
         pods=[pod("worker-0", "Succeeded", code=0, finished=12), pod("worker-1", "Failed", code=1, finished=10)],
         state="Succeeded", reason="WorkerSucceeded", message=("j-worker-1 failed",), events=("WorkerSucceeded",)),
    Case("worker 1 failed before worker 0 finished: the job already Failed stays Failed",
         tfjob(status=started(cond("Failed", "NonRetryableExitCode"), completed=11)),
         pods=[pod("worker-0", "Succeeded", code=0, finished=12), pod("worker-1", "Failed", code=1, finished=10)],
         state="Failed", reason="NonRetryableExitCode"),
    # --- PS and evaluator
    Case("evicted PS under OnFailure: that pod alone is restarted",
         tfjob({"Worker": replica(2), "PS": replica(1, "OnFailure")}, status=started(RUNNING)),
         pods=[*running(*W2), pod("ps-0", evicted=True)], state="Running", deletes=("j-ps-0",),
         events=("ReplicaRestarting",)),
    Case("PS exit 137 under ExitCode: restarted alone, the gang keeps running",
         tfjob({"Worker": replica(2), "PS": replica(1)}, status=started(RUNNING)),
         pods=[*running(*W2), pod("ps-0", "Failed", code=137)], state="Running", deletes=("j-ps-0",),
         events=("ReplicaRestarting",)),
    Case("restarted PS gone: recreated in the same attempt",
         tfjob({"Worker": replica(2), "PS": replica(1)}, status=started(RUNNING),
               annotations=recorded(PS=1, Worker=2)), pods=running(*W2), state="Running", creates=("j-ps-0",)),
    Case("PS failing under Never fails the job", tfjob({"Worker": replica(2), "PS": replica(1, "Never")},
         status=started(RUNNING)), pods=[*running(*W2), pod("ps-0", "Failed", code=1)], state="Failed",
         reason="RestartPolicyNever", message=("j-ps-0",), deletes=("j-worker-0", "j-worker-1"),
         events=("RestartPolicyNever",)),
    Case("evaluator exit 1 under ExitCode fails the job",
         tfjob({"Worker": replica(1), "Evaluator": replica(1)}, status=started(RUNNING)),
         pods=[pod("worker-0"), pod("evaluator-0", "Failed", code=1)], state="Failed",
         reason="NonRetryableExitCode", message=("j-evaluator-0",), deletes=("j-worker-0",),
         events=("NonRetryableExitCode",)),
    # --- time
    Case("activeDeadlineSeconds passed: Failed DeadlineExceeded, running pods deleted",
         tfjob(status=started(RUNNING), activeDeadlineSeconds=20), pods=running(*W2), now=21, state="Failed",
         reason="DeadlineExceeded", deletes=("j-worker-0", "j-worker-1"), events=("DeadlineExceeded",)),
    Case("activeDeadlineSeconds not yet passed: look again when it is", tfjob(status=started(RUNNING),
         activeDeadlineSeconds=100), pods=running(*W2), now=30, state="Running", requeue=70),
    Case("ttlSecondsAfterFinished not yet passed: look again when it is", tfjob(status=started(
         cond("Succeeded", "WorkerSucceeded"), completed=20), ttlSecondsAfterFinished=60), now=30,
         state="Succeeded", requeue=50),
    Case("ttlSecondsAfterFinished passed: the job is deleted", tfjob(status=started(
         cond("Failed", "NonRetryableExitCode"), completed=20), ttlSecondsAfterFinished=5), now=30,
         state="Failed", delete_job=True),
    # --- suspend / resume / resize
    Case("suspend deletes the pods and keeps the job", tfjob(status=started(RUNNING), suspend=True,
         annotations=recorded(Worker=2)), pods=running(*W2), state="Suspended", reason="JobSuspended",
         deletes=("j-worker-0", "j-worker-1"), events=("JobSuspended",)),
    Case("resume recreates the pods", tfjob(status=started(cond("Suspended", "JobSuspended", t=5))),
         state="Created", creates=("j-worker-0", "j-worker-1"), events=("JobResumed",)),
    Case("resume while suspended pods still terminate: wait, no restart",
         tfjob(status=started(cond("Suspended", "JobSuspended", t=5)), annotations=recorded(Worker=2)),
         pods=[pod("worker-0", "Failed", code=143, deleting=25), pod("worker-1", deleting=25)],
         events=("JobResumed",), requeue=55),
    # (tfjob.dev/v1: the CRD refuses the change at apply time; Kubeflow's CRD cannot, so reconcile does)
    Case("replicas changed on a running kubeflow.org/v1 job: refused with a message, nothing touched",
         tfjob({"Worker": replica(3)}, status=started(RUNNING), annotations=recorded(Worker=2), api=KUBEFLOW_V1),
         pods=running(*W2), state="Running", reason="ReplicasChangeRefused",
         message=("Worker.replicas 2→3", "suspend"), events=("ReplicasChangeRefused",), workers="2/2",
         options=KUBEFLOW_ALL),
    Case("replicas changed while suspended: resume creates the new size",
         tfjob({"Worker": replica(3)}, status=started(cond("Suspended", "JobSuspended", t=5))),
         creates=("j-worker-0", "j-worker-1", "j-worker-2"), events=("JobResumed",)),
    Case("created gang waiting for admission: Queued with the backend's reason",
         tfjob(status=started(), annotations=recorded(Worker=2)), pods=[pod("worker-0", "Pending"),
         pod("worker-1", "Pending")], state="Queued", reason="GangQueued", message=("no node has 8 GPUs free",),
         events=("GangQueued",), options=ReconcileOptions(gang=GangView(queued_reason="no node has 8 GPUs free"))),
    # --- bad input, other controllers
    Case("unknown runPolicy.managedBy: Failed InvalidSpec naming the field and the known values",
         tfjob(managedBy="example.com/my-controller"), state="Failed", reason="InvalidSpec",
         message=("spec.runPolicy.managedBy", "'example.com/my-controller'", "kubeflow.org/training-operator"),
         events=("InvalidSpec",)),
    Case("managedBy kubeflow.org/training-operator on a tfjob.dev/v1 job: ours, with an Event saying so",
         tfjob(managedBy="kubeflow.org/training-operator"), state="Created",
         creates=("j-worker-0", "j-worker-1"), events=("ManagedByKubeflowValue", "JobCreated")),
    Case("unknown gang backend: Failed InvalidSpec naming the annotation", tfjob(), state="Failed",
         reason="InvalidSpec", message=("unknown gang backend",), events=("InvalidSpec",),
         options=ReconcileOptions(gang=GangView(problems=("metadata.annotations[tfjob.dev/gang-backend]: unknown "
                                                         "gang backend 'slurm'",)))),
    Case("the API server refuses a pod (422): Failed PodCreationFailed, no retry loop",
         tfjob(status=started(), annotations=recorded(Worker=2)), pods=[pod("worker-0", "Pending")],
         state="Failed", reason="PodCreationFailed", message=("spec.containers[0].image",),
         deletes=("j-worker-0",), events=("PodCreationFailed",),
         options=ReconcileOptions(pod_create_error="creating pod j-worker-1: spec.containers[0].image: Required")),
    Case("the authorizer refused the operator a pod (its RBAC lacks create): the job waits, its state condition "
         "says what to grant, the pods are asked for again", tfjob(status=started(), annotations=recorded(Worker=2)),
         state="Created", reason="OperatorForbidden", message=("lacks 'create' on 'pods'", "ClusterRole"),
         creates=("j-worker-0", "j-worker-1"), options=ReconcileOptions(not_authorized=FORBIDDEN_PODS)),
    Case("the operator may create pods again: the state condition says the refusal is over",
         tfjob(status={**started(), "conditions": [cond("Created", "OperatorForbidden")]},
               annotations=recorded(Worker=2)), pods=[pod("worker-0", "Pending"), pod("worker-1", "Pending")],
         state="Created", reason="OperatorPermitted", message=("allowed again",)),
    Case("invalid spec: Failed InvalidSpec with the messages, no pods",
         tfjob({"Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "main", "image": "x"},
               {"name": "side", "image": "y"}]}}}}), state="Failed", reason="InvalidSpec",
         message=('no container named "tensorflow"',), events=("InvalidSpec",)),
    # --- elastic gangs (spec.elasticPolicy; docs/elastic.md): the width is the gang view's fits_workers
    Case("elastic: 3 of its 4 workers fit: starts at 3 instead of waiting for 4", elastic_job(),
         state="Created", creates=("j-worker-0", "j-worker-1", "j-worker-2"), events=("JobCreated",), workers="0/3",
         options=fits(3), elastic={"currentReplicas": 3, "baseReplicas": 4, "resizes": 0, "summary": "3/4 (min 2)"}),
    Case("elastic: room unknown (None): starts at Worker.replicas", elastic_job(3), state="Created",
         creates=("j-worker-0", "j-worker-1", "j-worker-2"), events=("JobCreated",), options=fits(None),
         elastic={"currentReplicas": 3, "baseReplicas": 3}),
    Case("elastic: running at 3 of max 4: Workers 3/3, the Elastic column 3/4 (min 2)",
         elastic_job(status=at_width(3, RUNNING)), pods=running(*W3), state="Running", workers="3/3",
         requeue=30, options=fits(3), elastic={"summary": "3/4 (min 2)"}),
    Case("elastic shrink: a worker's node is lost: the gang restarts (a disruption, not counted)",
         elastic_job(status=at_width(4, RUNNING), backoffLimit=0),
         pods=[*running(*W4[:3]), pod("worker-3", node_lost=True)], state="Restarting", reason="NodeLost",
         deletes=tuple(f"j-{n}" for n in W4), events=("NodeLost",), restarts=1, failure_restarts=0,
         options=fits(3), elastic={"currentReplicas": 4, "cause": "node n1 lost"}),
    Case("elastic shrink: 4 no longer fit: the next attempt starts at 3, Resized '4 → 3 workers: node n1 lost'",
         elastic_job(status=at_width(4, LOST, restarts=1, cause="node n1 lost")), state="Restarting",
         reason="Resized", message=("4 → 3 workers: node n1 lost",), events=("Resized",), restarts=1,
         creates=("j-worker-0", "j-worker-1", "j-worker-2"), workers="0/3", options=fits(3),
         elastic={"currentReplicas": 3, "resizes": 1, "lastResizeTime": at(30), "summary": "3/4 (min 2)"}),
    Case("elastic: no shrink while the old width still fits: the next attempt keeps 4 workers",
         elastic_job(status=at_width(4, LOST, restarts=1, cause="node n1 lost")), state="Restarting",
         reason="NodeLost", creates=tuple(f"j-{n}" for n in W4), restarts=1, options=fits(4),
         elastic={"currentReplicas": 4, "resizes": 0}),
    Case("elastic: no shrink below min: fewer than min fit, the gang waits at min (2)",
         elastic_job(status=at_width(4, LOST, restarts=1, cause="node n1 lost")), state="Queued",
         message=("1 GPU short",), events=("Resized", "GangQueued"), restarts=1,
         options=fits(1, ready_to_create_pods=False, queued_reason="1 GPU short"),
         elastic={"currentReplicas": 2, "resizes": 1}),
    Case("elastic: the Resized message says the gang waits at min",
         elastic_job(status=at_width(4, LOST, restarts=1, cause="node n1 lost")), state="Restarting",
         reason="Resized", message=("4 → 2 workers: node n1 lost (1 fit now: the gang waits for 2",),
         creates=("j-worker-0", "j-worker-1"), events=("Resized",), restarts=1, options=fits(1)),
    Case("elastic widen: room for 4 for 100 s, cooldown over: restart at 4, a resize, not a failure",
         elastic_job(status=at_width(3, RUNNING, last=0, wider=300)), pods=running(*W3), now=400,
         state="Restarting", reason="Resized", message=("3 → 4 workers: room for 4 workers for 100 s",
                                                        "save a checkpoint on SIGTERM"),
         deletes=("j-worker-0", "j-worker-1", "j-worker-2"), events=("Resized",), restarts=1, failure_restarts=0,
         workers="0/4", options=fits(4), elastic={"currentReplicas": 4, "resizes": 1, "widerSince": None}),
    Case("elastic widen: never within resizeCooldownSeconds of the last resize (look again when it ends)",
         elastic_job(status=at_width(3, RUNNING, last=0, wider=100)), pods=running(*W3), now=200,
         state="Running", requeue=100, options=fits(4), elastic={"currentReplicas": 3, "widerSince": at(100)}),
    Case("elastic hysteresis: room for more first seen: wait WIDEN_STABLE_SECONDS (60 s) before widening",
         elastic_job(status=at_width(3, RUNNING, last=0)), pods=running(*W3), now=1000, state="Running",
         requeue=60, options=fits(4), elastic={"currentReplicas": 3, "widerSince": at(1000)}),
    Case("elastic hysteresis: the room went away again: the stable window starts over, no resize",
         elastic_job(status=at_width(3, RUNNING, last=0, wider=990)), pods=running(*W3), now=1000,
         state="Running", requeue=30, options=fits(3), elastic={"currentReplicas": 3, "widerSince": None}),
    Case("elastic: already at maxReplicas: no widening however much room",
         elastic_job(status=at_width(4, RUNNING, last=0, wider=0)), pods=running(*W4), now=1000,
         state="Running", options=fits(4), elastic={"currentReplicas": 4, "widerSince": None}),
    Case("elastic: Worker.replicas edited on a running job: the gang restarts at that width",
         elastic_job(3, status=at_width(4, RUNNING)), pods=running(*W4), state="Restarting", reason="Resized",
         message=("4 → 3 workers: spec.tfReplicaSpecs.Worker.replicas set to 3",), events=("Resized",),
         deletes=tuple(f"j-{n}" for n in W4), restarts=1, elastic={"currentReplicas": 3, "specReplicas": 3}),
    Case("elastic: a node of the gang marked for removal: restart from the checkpoint before it goes",
         elastic_job(status=at_width(2, RUNNING)), pods=running(*W2), state="Restarting",
         reason="NodeMarkedForRemoval", message=("node n1 marked for removal",), events=("NodeMarkedForRemoval",),
         deletes=("j-worker-0", "j-worker-1"), restarts=1, failure_restarts=0,
         options=fits(2, leaving_nodes=frozenset({"n1"}))),
    Case("elastic: three pods of four being deleted (a drain): still Running, and no longer 'all 4 are running'",
         elastic_job(status=at_width(4, RUNNING)), pods=[pod("worker-0"), *(pod(n, deleting=20) for n in W4[1:])],
         state="Running", reason="NotAllPodsRunning", workers="1/4", options=fits(4), requeue=50,
         message=("1 of 4 pods of attempt 0 are running; 3 terminating: j-worker-1, j-worker-2, j-worker-3",)),
    Case("a Running job whose pods all run again says so (AllPodsRunning), without an Event",
         tfjob(status=started(cond("Running", "NotAllPodsRunning"))), pods=running(*W2), state="Running",
         reason="AllPodsRunning", message=("all 2 pods of attempt 0 are running",)),
    Case("elastic: a failure (not a disruption) still counts towards backoffLimit",
         elastic_job(status=at_width(2, RUNNING), backoffLimit=3), pods=[pod("worker-0"), pod("worker-1", "Failed",
         code=137)], state="Restarting", reason="RetryableExitCode", deletes=("j-worker-0", "j-worker-1"),
         events=("RetryableExitCode",), restarts=1, failure_restarts=1, options=fits(2)),
    # --- kubeflow.org/v1 enableDynamicWorker (PS jobs), as Kubeflow documents it
    Case("dynamic workers: a lost worker restarts alone, the job keeps running (saying which pod is down)",
         dynamic(DYNAMIC_PS, Worker=2, PS=1), pods=[pod("worker-0"), pod("worker-1", node_lost=True), pod("ps-0")],
         state="Running", deletes=("j-worker-1",), events=("ReplicaRestarting",), options=KUBEFLOW_ALL,
         message=("2 of 3 pods of attempt 0 are running; 1 failed: j-worker-1",)),
    Case("dynamic workers: a deleted worker is created again alone, no gang restart",
         dynamic(DYNAMIC_PS, Worker=2, PS=1), pods=[pod("worker-0"), pod("ps-0")], state="Running",
         creates=("j-worker-1",), options=KUBEFLOW_ALL),
    Case("dynamic workers: replicas 2 → 3 adds worker-2 only, the others keep running",
         dynamic({"Worker": replica(3), "PS": replica(1)}, Worker=2, PS=1), pods=running("worker-0", "worker-1",
         "ps-0"), state="Running", creates=("j-worker-2",), restarts=0, options=KUBEFLOW_ALL),
    Case("dynamic workers: replicas 3 → 1 removes worker-2 and worker-1, the others keep running",
         dynamic({"Worker": replica(1), "PS": replica(1)}, Worker=3, PS=1), pods=running(*W3, "ps-0"),
         state="Running", deletes=("j-worker-1", "j-worker-2"), restarts=0, options=KUBEFLOW_ALL),
    Case("dynamic workers: a PS change is still refused (only workers are dynamic)",
         dynamic({"Worker": replica(2), "PS": replica(2)}, Worker=2, PS=1), pods=running(*W2, "ps-0"),
         state="Running", reason="ReplicasChangeRefused", message=("PS.replicas 1→2",),
         events=("ReplicasChangeRefused",), options=KUBEFLOW_ALL),
]


def summarize(decision: Decision) -> dict[str, Any]:
    creates = [a for a in decision.actions if isinstance(a, CreateObject)]
    return {
        "creates": tuple(a.name for a in creates if a.kind == "Pod"),
        "deletes": tuple(a.name for a in decision.actions if isinstance(a, DeletePod) and not a.force),
        "force_deletes": tuple(a.name for a in decision.actions if isinstance(a, DeletePod) and a.force),
        "events": tuple(a.reason for a in decision.actions if isinstance(a, EmitEvent)),
    }


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lifecycle_rule(case: Case) -> None:
    decision = reconcile(case.job, case.pods, T0 + timedelta(seconds=case.now), case.options)
    status = decision.status
    got = summarize(decision)
    expected = {"creates": case.creates, "deletes": case.deletes, "force_deletes": case.force_deletes,
                "events": case.events}
    assert got == expected
    if case.state is not None:
        assert status.state == case.state
    if case.reason is not None:
        assert next(c for c in status.conditions if c.type == status.state).reason == case.reason
    state_message = next((c.message for c in status.conditions if c.type == status.state), "") or ""
    for fragment in case.message:
        assert fragment in state_message
    assert (status.restartCount, status.failureRestarts) == (case.restarts, case.failure_restarts)
    if case.workers is not None:
        assert status.workers == case.workers
    assert decision.requeue_after == case.requeue
    assert bool(decision.of_type(DeleteJob)) == case.delete_job
    for key, value in (case.elastic or {}).items():
        assert status.elastic is not None and getattr(status.elastic, key) == value, key


# ---------------------------------------------------------------- properties of the whole function


def test_every_reason_a_kubernetes_disruption_is_recorded_as_is_shown_by_a_scenario() -> None:
    """Each cause observe reads a Kubernetes disruption as (its one list) restarts a gang in a row of the table."""
    shown = {c.reason for c in CASES} | {e for c in CASES for e in c.events}
    assert {r.value for r in DISRUPTION_REASONS.values()} - shown == set(), "add a row to CASES"


def test_every_retryable_worker_code_is_named_in_the_one_exit_code_table() -> None:
    """reconcile reads tfjob_worker.exit_codes itself (no copy to drift); every retryable code has a meaning."""
    from tfjob_worker import exit_codes

    assert exit_codes.RETRYABLE <= set(exit_codes.MEANINGS)
    assert all(exit_codes.is_retryable(code) for code in exit_codes.MEANINGS)


def test_success_marks_the_last_progress_read_as_done() -> None:
    status = started(RUNNING)
    status["progress"] = {"epoch": 4, "epochs": 6, "step": 80, "summary": "epoch 4/6 step 80"}
    decision = reconcile(tfjob(status=status), [pod("worker-0", "Succeeded", code=0), pod("worker-1")],
                         T0 + timedelta(seconds=30), ReconcileOptions())
    assert decision.status.progress is not None
    assert (decision.status.progress.summary, decision.status.progress.step) == ("done", 80)


def test_a_finished_jobs_counts_stay_those_written_with_the_outcome_while_the_clean_up_runs() -> None:
    """cleanPodPolicy Running deletes worker 1; killed, it turns Failed, then goes. Its counts must not follow it
    (at 10,000 jobs the plane was slow enough for each step to be a status write of its own)."""
    now = T0 + timedelta(seconds=30)
    done = pod("worker-0", "Succeeded", code=0)
    outcome = reconcile(tfjob(status=started(RUNNING)), [done, pod("worker-1")], now, ReconcileOptions())
    assert outcome.status.state == "Succeeded" and [a.name for a in outcome.of_type(DeletePod)] == ["j-worker-1"]
    written = outcome.status.model_dump(mode="json")
    for worker_1 in ([pod("worker-1", deleting=25)], [pod("worker-1", "Failed", code=143, deleting=25)], []):
        later = reconcile(tfjob(status=written), [done, *worker_1], now, ReconcileOptions())
        assert later.status.model_dump(mode="json") == written, worker_1
    assert written["replicaStatuses"]["Worker"] == {"active": 0, "ready": 0, "succeeded": 1, "failed": 0}


def test_a_pod_terminating_when_the_job_ends_is_not_taken_out_of_counts_it_was_never_in() -> None:
    """cleanPodPolicy None keeps worker 0 running; worker 1, being deleted, was never counted ready."""
    job = tfjob({"Chief": replica(1), "Worker": replica(2)}, status=started(RUNNING), cleanPodPolicy="None")
    pods = [pod("chief-0", "Succeeded", code=0), pod("worker-0"), pod("worker-1", deleting=25)]
    decision = reconcile(job, pods, T0 + timedelta(seconds=30), ReconcileOptions())
    assert decision.status.state == "Succeeded"
    assert decision.status.replicaStatuses["Worker"].ready == 1 and decision.status.workers == "1/3"


def test_table_has_at_least_30_scenarios() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reconciling_again_before_the_pods_change_writes_nothing_new_and_posts_no_second_event(case: Case) -> None:
    """The operator may reconcile again before its own writes come back through the watch: same outcome."""
    now = T0 + timedelta(seconds=case.now)
    first = reconcile(case.job, case.pods, now, case.options)
    job = {**case.job, "status": first.status.model_dump(mode="json")}
    for action in first.of_type(AnnotateJob):
        annotations = {**job["metadata"]["annotations"], **action.annotations}
        job["metadata"] = {**job["metadata"], "annotations": {k: v for k, v in annotations.items() if v is not None}}
    second = reconcile(job, case.pods, now, case.options)
    # Restarting one PS/evaluator pod is a pod action, repeated with its (idempotent) delete until the pod is
    # seen terminating; the handlers drop identical Events within a minute, like Kubernetes' event correlator.
    assert [e for e in second.of_type(EmitEvent) if e.reason != "ReplicaRestarting"] == []
    assert second.status == first.status
    assert {a.name for a in second.of_type(DeletePod)} <= {a.name for a in first.of_type(DeletePod)} | {
        p["metadata"]["name"] for p in case.pods}


def test_started_job_records_start_time_and_observed_generation() -> None:
    job = tfjob()
    job["metadata"]["generation"] = 7
    status = reconcile(job, [], T0).status
    assert (status.startTime, status.observedGeneration) == (at(0), 7)


def test_every_pod_records_the_gang_size_and_the_job_is_not_written() -> None:
    actions = reconcile(tfjob({"Worker": replica(3)}), [], T0).actions
    assert not [a for a in actions if isinstance(a, AnnotateJob)]
    assert isinstance(actions[0], CreateObject) and actions[0].kind == "Service"
    pods = [a.obj for a in actions if isinstance(a, CreateObject) and a.kind == "Pod"]
    assert len(pods) == 3
    for pod in pods:
        assert json.loads(pod["metadata"]["annotations"][constants.ANNOTATION_GANG_REPLICAS]) == {"Worker": 3}


def test_a_refused_resize_creates_missing_pods_at_the_recorded_size() -> None:
    job = tfjob({"Worker": replica(3)}, status=started(), annotations=recorded(Worker=2), api=KUBEFLOW_V1)
    pods = [a.obj for a in reconcile(job, [pod("worker-0", "Pending")], T0, KUBEFLOW_ALL).of_type(CreateObject)
            if a.kind == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["j-worker-1"]
    assert json.loads(pods[0]["metadata"]["annotations"][constants.ANNOTATION_GANG_REPLICAS]) == {"Worker": 2}


def test_next_attempt_pods_carry_the_attempt_number() -> None:
    job = tfjob(status=started(cond("Restarting"), restarts=2), annotations=recorded(Worker=2))
    pods = [a.obj for a in reconcile(job, [], T0).of_type(CreateObject) if a.kind == "Pod"]
    assert {p["metadata"]["labels"][constants.LABEL_ATTEMPT] for p in pods} == {"2"}
    env = {e["name"]: e["value"] for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env[constants.ENV_ATTEMPT] == "2"


def test_loopback_addressing_puts_the_recorded_ports_in_tf_config() -> None:
    options = ReconcileOptions(loopback_ports={"j-worker-0": 41001, "j-worker-1": 41002})
    pods = [a.obj for a in reconcile(tfjob(), [], T0, options).of_type(CreateObject) if a.kind == "Pod"]
    for p in pods:  # and each pod records them all, so a restarted operator reuses them for the missing ones
        assert json.loads(p["metadata"]["annotations"][constants.ANNOTATION_LOOPBACK_PORTS]) == options.loopback_ports
    env = {e["name"]: e["value"] for e in pods[1]["spec"]["containers"][0]["env"]}
    assert json.loads(env["TF_CONFIG"])["cluster"] == {"worker": ["127.0.0.1:41001", "127.0.0.1:41002"]}


def test_gang_backend_decorates_every_pod_it_releases() -> None:
    def gate(job: Any, p: dict[str, Any]) -> dict[str, Any]:
        return {**p, "spec": {**p["spec"], "schedulingGates": [{"name": constants.GANG_SCHEDULING_GATE}]}}

    def group(job: Any, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"kind": "PodGroup", "metadata": {"name": "j"}, "spec": {"minMember": len(pods)}}]

    options = ReconcileOptions(gang=GangView(decorate_pod=gate, group_objects=group))
    creates = reconcile(tfjob(), [], T0, options).of_type(CreateObject)
    assert [c.kind for c in creates] == ["Service", "PodGroup", "Pod", "Pod"]
    assert all(c.obj["spec"]["schedulingGates"] for c in creates if c.kind == "Pod")


def test_podgroup_is_created_while_the_pods_wait_for_it() -> None:
    """Volcano: a PodGroup not found yet is created, and no pod is, until the group leaves Pending."""
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "j"}}
    waiting = GangView(ready_to_create_pods=False, queued_reason="waiting for PodGroup j to be created",
                       missing_groups=(group,))
    decision = reconcile(tfjob(), [], T0, ReconcileOptions(gang=waiting))
    assert [c.kind for c in decision.of_type(CreateObject)] == ["PodGroup"]
    assert decision.status.state == "Queued"
    polled = GangView(ready_to_create_pods=False, queued_reason="Volcano has not enqueued PodGroup j", recheck_after=5)
    assert reconcile(tfjob(), [], T0, ReconcileOptions(gang=polled)).requeue_after == 5
    found = GangView(ready_to_create_pods=False, queued_reason="Volcano has not enqueued PodGroup j (phase Pending)")
    assert reconcile(tfjob(), [], T0, ReconcileOptions(gang=found)).of_type(CreateObject) == []


def test_kueue_stopping_the_gang_restarts_it_as_the_next_attempt_without_using_the_backoff_limit() -> None:
    """Kueue preempts a workload by marking its pods TerminationTarget and deleting them; the gang comes back as the
    next attempt (a new Kueue pod group, queued again), also before it ever ran whole. The reason is Kueue 0.17's
    (WorkloadEvictedDueToPreempted, seen in tests/upstream/test_kueue.py) or older releases' (StoppedByKueue)."""
    for reason in ("WorkloadEvictedDueToPreempted", "StoppedByKueue"):
        stopped = {"type": "TerminationTarget", "status": "True", "reason": reason,
                   "message": "Preempted to accommodate a workload (UID: 1, JobUID: 2) due to prioritization in the "
                              "ClusterQueue; preemptor path: /team", "lastTransitionTime": at(10)}
        pods = [pod("worker-0", deleting=40), pod("worker-1", "Pending", deleting=40)]
        for p in pods:
            p["status"]["conditions"] = [stopped]
        decision = reconcile(tfjob(status=started(), annotations=recorded(Worker=2)), pods,
                             T0 + timedelta(seconds=30))
        status = decision.status
        assert (status.state, status.restartCount, status.failureRestarts) == ("Restarting", 1, 0)
        restarting = next(c for c in status.conditions if c.type == status.state)
        assert restarting.reason == "PodPreempted" and "Preempted to accommodate" in restarting.message


def test_a_gang_pod_gone_before_the_reconcile_restarts_with_the_cause_its_last_body_carried() -> None:
    """A busy operator may reconcile only once Kueue's stopped pods are gone (a worker that exits at once on
    SIGTERM): their last bodies, kept by the pod index, still name the cause; a last body of an earlier attempt or
    of another job of the same name does not."""
    stopped = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
               "message": "Preempted to accommodate a higher priority Workload", "lastTransitionTime": at(10)}

    def last_bodies(attempt: int = 0, uid: str = "uid-j") -> dict[str, dict[str, Any]]:
        bodies = [pod(name, "Failed", deleting=40, attempt=attempt) for name in ("worker-0", "worker-1")]
        for p in bodies:
            p["status"]["conditions"] = [stopped]
            p["metadata"]["ownerReferences"][0]["uid"] = uid
        return {p["metadata"]["name"]: p for p in bodies}

    def restarting(departed: dict[str, dict[str, Any]]) -> tuple[str, int, int, str, str]:
        job = tfjob(status=started(RUNNING), annotations=recorded(Worker=2))
        status = reconcile(job, [], T0 + timedelta(seconds=30), ReconcileOptions(departed=departed)).status
        condition = next(c for c in status.conditions if c.type == status.state)
        return status.state, status.restartCount, status.failureRestarts, condition.reason, condition.message

    state, restarts, failures, reason, message = restarting(last_bodies())
    assert (state, restarts, failures, reason) == ("Restarting", 1, 0, "PodPreempted")
    assert "Preempted to accommodate" in message
    for departed in (last_bodies(attempt=1), last_bodies(uid="uid-of-a-deleted-job"), {}):
        assert restarting(departed)[:4] == ("Restarting", 1, 0, "PodDeleted")


def test_job_managed_by_another_controller_is_left_alone() -> None:
    decision = reconcile(tfjob(managedBy="kueue.x-k8s.io/multikueue"), [], T0)
    assert (decision.managed, decision.actions) == (False, [])


def test_pods_of_a_previous_job_with_the_same_name_are_ignored() -> None:
    stranger = pod("worker-0")
    stranger["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-deleted-job"
    creates = reconcile(tfjob(), [stranger], T0).of_type(CreateObject)
    assert [c.name for c in creates if c.kind == "Pod"] == ["j-worker-0", "j-worker-1"]


# ---------------------------------------------------------------- what the operator keeps of a body

MANAGED_FIELDS = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": at(0),
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]


def watched(body: dict[str, Any]) -> dict[str, Any]:
    """The body as a watch delivers it: with managedFields, decoded afresh (no string shared with the table)."""
    out = json.loads(json.dumps(body))
    out["metadata"]["managedFields"] = MANAGED_FIELDS
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_job_and_pods_as_the_operator_keeps_them_decide_the_same_as_the_watched_bodies(case: Case) -> None:
    now = T0 + timedelta(seconds=case.now)
    kept = reconcile(as_kept(watched(case.job)), [as_kept(watched(p)) for p in case.pods], now, case.options)
    assert kept == reconcile(case.job, case.pods, now, case.options)


def test_the_kept_body_is_the_watched_one_without_managed_fields_and_every_other_field_equal() -> None:
    body = watched(pod("worker-0", "Failed", code=137, reason="OOMKilled", log_tail="x" * 500, restarts=2))
    body["spec"].update(priority=0, enableServiceLinks=False, overhead=None, tolerations=[
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}])
    kept = as_kept(body)
    assert "managedFields" not in kept["metadata"]
    del body["metadata"]["managedFields"]
    assert kept == body
    assert json.dumps(kept) == json.dumps(body)  # same order, same types (False stays False, not 0)


@pytest.mark.parametrize(("state", "ttl"), [("Succeeded", None), ("Failed", 60)])
def test_a_finished_job_is_kept_packed_and_every_read_gives_the_watched_body_and_the_same_decision(
        state: str, ttl: int | None) -> None:
    """Thousands of finished jobs cost 700 bytes each, not 4 KB; what their reconcile reads is unchanged."""
    status = {**started(cond(state, "WorkerSucceeded" if state == "Succeeded" else "NonRetryableExitCode"),
                        completed=20), "state": state}
    job = tfjob(status=status, **({"ttlSecondsAfterFinished": ttl} if ttl is not None else {}))
    body = watched(job)
    store = job_store(as_kept(body))
    assert isinstance(store, PackedStore) and len(store) == 1
    del body["metadata"]["managedFields"]
    first, again = latest(store), latest(store)
    assert first == body and json.dumps(first) == json.dumps(body)
    assert first is not again  # each read its own: a reader's change never reaches the index
    assert (job_state(store), job_has_ttl(store)) == (state, ttl is not None)
    now = T0 + timedelta(seconds=30)
    assert reconcile(first, [], now) == reconcile(job, [], now)
    assert len(store._packed) < len(json.dumps(body)) / 2


def test_a_job_not_finished_is_kept_as_it_is() -> None:
    kept = as_kept(watched(tfjob(status={**started(RUNNING), "state": "Running"})))
    store = job_store(kept)
    assert store == (kept,) and latest(store) is kept and job_state(store) == "Running" and not job_has_ttl(store)


def test_kept_bodies_share_their_keys_and_short_strings_but_not_their_containers() -> None:
    """Thousands of kept pods hold one "lastTransitionTime", one "Running", one copy of their job's name."""
    first, second = (as_kept(watched(pod(n, disruption="PreemptionByScheduler"))) for n in W2)
    a, b = first["status"]["conditions"][0], second["status"]["conditions"][0]
    assert a is not b
    assert [id(k) for k in a] == [id(k) for k in b]
    assert a["reason"] is b["reason"] and first["status"]["phase"] is second["status"]["phase"]


# ---------------------------------------------------------------- a refused resize over time (kubeflow.org/v1)


def _refused_while_running() -> tuple[dict[str, Any], Decision]:
    job = tfjob({"Worker": replica(3)}, status=started(RUNNING), annotations=recorded(Worker=2), api=KUBEFLOW_V1)
    return job, reconcile(job, running(*W2), T0, KUBEFLOW_ALL)


def test_a_refused_resize_reverted_by_the_user_leaves_no_refusal_on_the_state_condition_and_posts_no_event() -> None:
    _, refused = _refused_while_running()
    reverted = tfjob(status=refused.status.model_dump(mode="json"), annotations=recorded(Worker=2), api=KUBEFLOW_V1)
    later = T0 + timedelta(seconds=5)
    # Every pod running: the Running condition is rewritten as usual.
    decision = reconcile(reverted, running(*W2), later, KUBEFLOW_ALL)
    assert (decision.status.state, decision.status.conditions[-1].reason) == ("Running", "AllPodsRunning")
    # A pod not running (Running is not rewritten then): the refusal is marked reverted.
    decision = reconcile(reverted, [pod("worker-0"), pod("worker-1", "Pending")], later, KUBEFLOW_ALL)
    state = decision.status.conditions[-1]
    assert (state.type, state.reason, state.message) == (
        "Running", "ReplicasChangeReverted", "spec replicas match the running gang again")
    assert decision.of_type(EmitEvent) == [] and decision.of_type(CreateObject) == []


def test_a_refused_resize_moves_to_the_new_state_condition_and_the_old_one_is_marked_superseded() -> None:
    job, refused = _refused_while_running()
    refusal = refused.status.conditions[-1].message
    later = {**job, "status": refused.status.model_dump(mode="json")}
    waiting = ReconcileOptions(kubeflow_api=KubeflowApi.ALL, gang=GangView(queued_reason="waiting for 1 GPU"))
    decision = reconcile(later, [pod("worker-0"), pod("worker-1", "Pending")], T0 + timedelta(seconds=5), waiting)
    by_type = {c.type: c for c in decision.status.conditions}
    assert decision.status.state == "Queued"
    assert (by_type["Queued"].reason, by_type["Queued"].message) == ("ReplicasChangeRefused", refusal)
    assert by_type["Running"].reason == "ReplicasChangeSuperseded"
    assert [e.reason for e in decision.of_type(EmitEvent)] == ["GangQueued"]  # the refusal was announced once
