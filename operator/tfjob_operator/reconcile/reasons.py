"""Every reason the operator writes on a condition or an Event (the reconciler's, the admission loop's, a failed
reconcile's): the one list of them, each with the condition it appears on.

`docs/operator.md` documents each one in its conditions table (`tests/unit/test_reasons.py` checks both ways,
conditions included); adding a reason means a member here and a row there. Every other list of reasons is derived
from this one (`RESTART_REASONS`: what `tfjob local` shows of a gang restart).
"""

from __future__ import annotations

from enum import StrEnum

from tfjob_operator.api import JobConditionType

C = JobConditionType


class Reason(StrEnum):
    """Condition and Event reasons. Each member is `"Reason", condition`: the condition it is written on (None for
    one written only in an Event or on whichever condition holds the state)."""

    condition: JobConditionType | None

    def __new__(cls, value: str, condition: JobConditionType | None = None) -> Reason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.condition = condition
        return member

    JOB_CREATED = "JobCreated", C.CREATED
    GANG_QUEUED = "GangQueued", C.QUEUED
    GANG_ADMITTED = "GangAdmitted", C.QUEUED  # Queued False: the backend released the pods (also an Event)
    ALL_PODS_RUNNING = "AllPodsRunning", C.RUNNING
    NOT_ALL_PODS_RUNNING = "NotAllPodsRunning", C.RUNNING  # Running still true: a pod failed, finished or went away
    RESTARTING = "Restarting", C.RUNNING  # Running False while the gang restarts
    # Restarting: failures that count towards backoffLimit
    RETRYABLE_EXIT_CODE = "RetryableExitCode", C.RESTARTING
    POD_FAILED = "PodFailed", C.RESTARTING
    TRAINING_STALLED = "TrainingStalled", C.RESTARTING
    # Restarting: disruptions (never counted)
    POD_EVICTED = "PodEvicted", C.RESTARTING
    POD_PREEMPTED = "PodPreempted", C.RESTARTING
    NODE_LOST = "NodeLost", C.RESTARTING
    POD_DELETED = "PodDeleted", C.RESTARTING
    POD_DISRUPTED = "PodDisrupted", C.RESTARTING
    NODE_MARKED_FOR_REMOVAL = "NodeMarkedForRemoval", C.RESTARTING  # elastic jobs: restarted before the node goes
    # Restarting: an elastic job's width changed (never counted)
    RESIZED = "Resized", C.RESTARTING
    JOB_SUSPENDED = "JobSuspended", C.SUSPENDED
    JOB_RESUMED = "JobResumed", C.SUSPENDED
    CHIEF_SUCCEEDED = "ChiefSucceeded", C.SUCCEEDED
    WORKER_SUCCEEDED = "WorkerSucceeded", C.SUCCEEDED
    ALL_WORKERS_SUCCEEDED = "AllWorkersSucceeded", C.SUCCEEDED
    NON_RETRYABLE_EXIT_CODE = "NonRetryableExitCode", C.FAILED
    RESTART_POLICY_NEVER = "RestartPolicyNever", C.FAILED
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded", C.FAILED
    DEADLINE_EXCEEDED = "DeadlineExceeded", C.FAILED
    INVALID_SPEC = "InvalidSpec", C.FAILED
    POD_CREATION_FAILED = "PodCreationFailed", C.FAILED
    RECONCILE_ERROR = "ReconcileError", C.FAILED
    RECONCILE_BUDGET_EXCEEDED = "ReconcileBudgetExceeded", C.FAILED
    # Events only
    REPLICA_RESTARTING = "ReplicaRestarting"
    MANAGED_BY_KUBEFLOW_VALUE = "ManagedByKubeflowValue"
    GANG_SCHEDULE_TIMEOUT = "GangScheduleTimeout"  # the builtin admission loop's watchdog deleted an unbound gang
    # A kubeflow.org/v1 job's replicas changed at run time (tfjob.dev/v1: its CRD refuses the change); written on
    # the condition that holds the job's state
    REPLICAS_CHANGE_REFUSED = "ReplicasChangeRefused"
    REPLICAS_CHANGE_SUPERSEDED = "ReplicasChangeSuperseded"
    REPLICAS_CHANGE_REVERTED = "ReplicasChangeReverted"
    # The API server's authorizer refused one of the operator's requests for the job (its RBAC lacks a rule): the
    # job waits, retried with back-off; written on the condition that holds the job's state, and a Warning Event
    OPERATOR_FORBIDDEN = "OperatorForbidden"
    OPERATOR_PERMITTED = "OperatorPermitted"  # ... and the refused request went through since


#: The reasons of the Restarting condition: each gang restart and resize posts an Event with one.
RESTART_REASONS = frozenset(r for r in Reason if r.condition is C.RESTARTING)
