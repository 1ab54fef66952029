"""Reading the chief's progress from the worker runtime's /metrics, and when it is worth a status write."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tfjob_operator.api import JobProgress, TFJobStatus
from tfjob_operator.metrics import Metrics
from tfjob_operator.progress.chief_metrics import (
    chief_pod,
    metrics_url,
    read_samples,
    seconds_since_progress,
    to_progress,
    worth_writing,
)
from tfjob_worker.metrics import Identity, ReportCollector
from tfjob_worker.reports import Report

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def worker_metrics(report: Report) -> str:
    """The text a worker's supervisor serves for this report (the real exposition code)."""
    collector = ReportCollector(Identity("mnist", "worker", "0"), stall_timeout=0)
    collector.update(report)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_progress_is_read_from_what_the_worker_serves() -> None:
    text = worker_metrics(Report(started=True, trains=True, epoch=2, epochs=6, global_step=45,
                                 examples_per_sec=1766.04, last_checkpoint=NOW.timestamp() - 30,
                                 last_progress=NOW.timestamp() - 2))
    values = read_samples(text)
    assert to_progress(values, NOW) == JobProgress(
        epoch=2, epochs=6, step=45, examplesPerSecond=1766.0, lastCheckpointTime="2026-01-01T11:59:30Z",
        updatedAt="2026-01-01T12:00:00Z", summary="epoch 2/6 step 45")
    assert seconds_since_progress(values, NOW) == pytest.approx(2.0)


@pytest.mark.parametrize("text", ["", "not prometheus {{{", worker_metrics(Report(started=False)),
                                  worker_metrics(Report(started=True, epoch=0))],
                         ids=["empty", "garbage", "not-started", "no-epoch-yet"])
def test_no_progress_before_training_starts_or_from_a_bad_answer(text: str) -> None:
    assert to_progress(read_samples(text), NOW) is None


P = JobProgress(epoch=2, epochs=6, step=45, summary="epoch 2/6 step 45", updatedAt="2026-01-01T12:00:00Z")


@pytest.mark.parametrize(("old", "new", "write"), [
    (None, P, True),
    (P, P.model_copy(update={"updatedAt": "2026-01-01T12:00:30Z"}), False),  # nothing moved: no write
    (P, P.model_copy(update={"step": 46, "summary": "epoch 2/6 step 46"}), True),
    (P, None, False),  # the chief did not answer: keep what we had
])
def test_status_is_written_only_when_a_figure_moved(old, new, write) -> None:
    assert worth_writing(old, new) is write


def _pod(role: str | None, phase: str = "Running", ip: str | None = "10.0.0.7") -> dict:
    labels = {"tfjob.dev/job-role": role} if role else {}
    return {"metadata": {"name": f"p-{role}", "labels": labels},
            "spec": {"containers": [{"name": "tensorflow", "ports": [
                {"name": "tfjob-port", "containerPort": 2222}, {"name": "tfjob-metrics", "containerPort": 9464}]}]},
            "status": {"phase": phase, **({"podIP": ip} if ip else {})}}


def test_the_operator_asks_the_running_chief_at_its_ip_and_metrics_port() -> None:
    chief = chief_pod([_pod(None), _pod("chief")])
    assert chief is not None and metrics_url(chief) == "http://10.0.0.7:9464/metrics"
    assert chief_pod([_pod(None), _pod("chief", phase="Pending")]) is None
    assert metrics_url(_pod("chief", ip=None)) is None  # not scheduled yet
    assert metrics_url(_pod("chief", ip="fd00::7")) == "http://[fd00::7]:9464/metrics"


def _observed(metrics: Metrics, name: str) -> tuple[float, float]:
    count = metrics.registry.get_sample_value(f"{name}_count") or 0.0
    return count, metrics.registry.get_sample_value(f"{name}_sum") or 0.0


def test_running_observes_gang_wait_per_attempt_and_start_latency_once() -> None:
    metrics = Metrics()
    first = TFJobStatus.model_validate({"conditions": [
        {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T11:59:50Z"}]})
    metrics.running(first, "2026-01-01T11:59:40Z", NOW)
    assert _observed(metrics, "tfjob_job_start_latency_seconds") == (1, 20.0)  # created → Running
    assert _observed(metrics, "tfjob_gang_wait_seconds") == (1, 10.0)  # pods created → all Running
    restarted = TFJobStatus.model_validate({"restartCount": 1, "conditions": [
        {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T11:50:00Z"},
        {"type": "Restarting", "status": "True", "lastTransitionTime": "2026-01-01T11:59:55Z"}]})
    metrics.running(restarted, "2026-01-01T11:49:00Z", NOW)
    assert _observed(metrics, "tfjob_job_start_latency_seconds") == (1, 20.0)  # only the first attempt
    assert _observed(metrics, "tfjob_gang_wait_seconds") == (2, 15.0)  # the restart's wait: 5 s
