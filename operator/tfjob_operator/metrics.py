"""Prometheus metrics of the operator, served on `/metrics` (prometheus-client's own HTTP server).

Counters move when the operator acts (jobs created/succeeded/failed/restarted, pods created/deleted); the
histogram times one reconcile of one job, API calls included. The `tfjob_gang_*` series come from the builtin
backend's admission loop (queue length, admission latency, failures, schedule timeouts, GPU-seconds held by
gangs not fully running). Jobs by state, the progress reads and writes and the GPU-seconds of stalled jobs
come from the progress pass (tfjob_operator.progress.poller); the start latencies from Running transitions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tfjob_operator.api import JobConditionType, TFJobStatus
from tfjob_operator.api.times import parse_time

#: Buckets for waits measured in seconds to hours (queueing, start-up).
_WAIT_BUCKETS = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)

log = logging.getLogger(__name__)


@dataclass
class Metrics:
    """One registry per operator, so tests can run several without clashing on global state."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.jobs_created = Counter("tfjob_jobs_created", "TFJobs whose pods the operator created.", registry=r)
        self.jobs_succeeded = Counter("tfjob_jobs_succeeded", "TFJobs that succeeded.", registry=r)
        self.jobs_failed = Counter("tfjob_jobs_failed", "TFJobs that failed, by reason.", ["reason"], registry=r)
        self.jobs_restarted = Counter("tfjob_jobs_restarted", "Whole-gang restarts, by cause.", ["reason"],
                                      registry=r)
        self.pods_created = Counter("tfjob_pods_created", "Pods created (not counting ones that existed).",
                                    registry=r)
        self.pods_deleted = Counter("tfjob_pods_deleted", "Pods deleted (force deletions included).", ["force"],
                                    registry=r)
        self.reconcile_seconds = Histogram(
            "tfjob_reconcile_duration_seconds", "Time to reconcile one job, API calls included.", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.reconcile_errors = Counter("tfjob_reconcile_errors", "Reconciles that failed and will be retried.",
                                        registry=r)
        self.workqueue_depth = Gauge(
            "tfjob_workqueue_depth", "Jobs waiting for a reconcile (a standby's: every job it reconciles when it "
            "takes over).", registry=r)
        # Gang admission (the builtin backend's loop, tfjob_operator.gang.admission).
        self.gang_queue_length = Gauge("tfjob_gang_queue_length", "Gangs waiting for admission after the last pass.",
                                       registry=r)
        self.gang_admissions = Counter("tfjob_gang_admissions", "Gangs released by the admission loop.", registry=r)
        self.gang_admission_seconds = Histogram(
            "tfjob_gang_admission_latency_seconds", "From a gang first seen all gated to its release.", registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600))
        self.gang_admission_failures = Counter(
            "tfjob_gang_admission_failures",
            "Gangs a pass could not admit (once per wait: no_room, never_fits), release PATCHes and passes that "
            "failed (release_error, pass_error).", ["reason"], registry=r)
        self.gang_schedule_timeouts = Counter(
            "tfjob_gang_schedule_timeouts", "Released gangs not all bound within scheduleTimeoutSeconds (recreated).",
            registry=r)
        self.gang_partial_gpu_seconds = Counter(
            "tfjob_gang_partial_gpu_seconds", "GPU-seconds held by bound pods of gangs not all running.", registry=r)
        self.gang_pass_seconds = Histogram(
            "tfjob_gang_admission_pass_seconds", "One admission pass: listing nodes and pods, placement.", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))

        # Users' view of their jobs (the progress pass and Running transitions).
        self.jobs_by_state = Gauge("tfjob_jobs", "TFJobs by state (the last true condition).", ["state"], registry=r)
        self.job_start_seconds = Histogram(
            "tfjob_job_start_latency_seconds", "From a job's creation to its first Running (queueing and start-up).",
            registry=r, buckets=_WAIT_BUCKETS)
        self.gang_wait_seconds = Histogram(
            "tfjob_gang_wait_seconds", "From an attempt's start (created, or the gang restart) to all its pods "
            "Running.", registry=r, buckets=_WAIT_BUCKETS)
        self.stalled_gpu_seconds = Counter(
            "tfjob_stalled_gpu_seconds", "GPU-seconds held by Running jobs whose chief reports no training progress.",
            registry=r)
        self.progress_reads = Counter("tfjob_progress_reads", "Reads of a chief's /metrics, by result (ok, error).",
                                      ["result"], registry=r)
        self.progress_writes = Counter("tfjob_progress_writes", "status.progress writes (only when a figure moved).",
                                       registry=r)

    def running(self, before: TFJobStatus, created: str | None, now: datetime) -> None:
        """A job's gang became Running (`before`: the status just before): observe the gang wait since the
        attempt began (Created, or the latest Restarting) and, for the first attempt, the start latency."""
        starts = [parse_time(c.lastTransitionTime) for c in before.conditions
                  if c.type in (JobConditionType.CREATED, JobConditionType.RESTARTING) and c.status == "True"]
        attempt_start = max((t for t in starts if t is not None), default=None)
        if attempt_start is not None:
            self.gang_wait_seconds.observe(max((now - attempt_start).total_seconds(), 0.0))
        created_at = parse_time(created)
        if before.restartCount == 0 and created_at is not None:
            self.job_start_seconds.observe(max((now - created_at).total_seconds(), 0.0))

    def transition(self, condition: JobConditionType | None, reason: str) -> None:
        """Count a lifecycle transition the operator announced with an Event."""
        if condition == JobConditionType.CREATED:
            self.jobs_created.inc()
        elif condition == JobConditionType.SUCCEEDED:
            self.jobs_succeeded.inc()
        elif condition == JobConditionType.FAILED:
            self.jobs_failed.labels(reason).inc()
        elif condition == JobConditionType.RESTARTING:
            self.jobs_restarted.labels(reason).inc()

    def serve(self, port: int, host: str = "0.0.0.0") -> bool:
        """Start the /metrics endpoint; False (and a warning) if the port is taken or disabled (0)."""
        if not port:
            return False
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            log.warning("metrics endpoint not started on %s:%s: %s", host, port, exc)
            return False
        return True
