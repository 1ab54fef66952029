"""Every reason the reconciler writes on a condition or an Event: the one list of them.

`docs/operator.md` documents each one in its conditions table (`tests/unit/test_reasons.py` checks both ways);
adding a reason means a member here and a row there.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Condition and Event reasons, grouped by the condition they mostly appear on."""

    # Created
    JOB_CREATED = "JobCreated"
    # Queued
    GANG_QUEUED = "GangQueued"
    GANG_ADMITTED = "GangAdmitted"  # Queued False: the backend released the pods
    # Running
    ALL_PODS_RUNNING = "AllPodsRunning"
    NOT_ALL_PODS_RUNNING = "NotAllPodsRunning"  # Running still true: a pod failed, finished or went away since
    RESTARTING = "Restarting"  # Running False while the gang restarts
    # Restarting: failures that count towards backoffLimit
    RETRYABLE_EXIT_CODE = "RetryableExitCode"
    POD_FAILED = "PodFailed"
    TRAINING_STALLED = "TrainingStalled"
    # Restarting: disruptions (never counted)
    POD_EVICTED = "PodEvicted"
    POD_PREEMPTED = "PodPreempted"
    NODE_LOST = "NodeLost"
    POD_DELETED = "PodDeleted"
    POD_DISRUPTED = "PodDisrupted"
    NODE_MARKED_FOR_REMOVAL = "NodeMarkedForRemoval"  # elastic jobs: restarted before the node goes
    # Restarting: an elastic job's width changed (never counted)
    RESIZED = "Resized"
    # Suspended
    JOB_SUSPENDED = "JobSuspended"
    JOB_RESUMED = "JobResumed"
    # Succeeded
    CHIEF_SUCCEEDED = "ChiefSucceeded"
    WORKER_SUCCEEDED = "WorkerSucceeded"
    ALL_WORKERS_SUCCEEDED = "AllWorkersSucceeded"
    # Failed
    NON_RETRYABLE_EXIT_CODE = "NonRetryableExitCode"
    RESTART_POLICY_NEVER = "RestartPolicyNever"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    INVALID_SPEC = "InvalidSpec"
    POD_CREATION_FAILED = "PodCreationFailed"
    RECONCILE_ERROR = "ReconcileError"
    RECONCILE_BUDGET_EXCEEDED = "ReconcileBudgetExceeded"
    # Events only
    REPLICA_RESTARTING = "ReplicaRestarting"
    MANAGED_BY_KUBEFLOW_VALUE = "ManagedByKubeflowValue"
    # A kubeflow.org/v1 job's replicas changed at run time (tfjob.dev/v1: its CRD refuses the change)
    REPLICAS_CHANGE_REFUSED = "ReplicasChangeRefused"
    REPLICAS_CHANGE_SUPERSEDED = "ReplicasChangeSuperseded"
    REPLICAS_CHANGE_REVERTED = "ReplicasChangeReverted"
