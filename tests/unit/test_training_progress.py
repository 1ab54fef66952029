"""Reading the chief's progress from the worker runtime's /metrics, and when it is worth a status write."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, datetime

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from tfjob_operator.api import JobProgress, TFJobStatus, constants
from tfjob_operator.metrics import Metrics
from tfjob_operator.progress.chief_metrics import (
    chief_pod,
    metrics_url,
    read_samples,
    seconds_since_progress,
    worth_writing,
)
from tfjob_operator.progress.poller import ProgressPoller
from tfjob_operator.reconcile import reconcile
from tfjob_operator.reconcile.chief_report import final_progress, to_progress
from tfjob_worker import termination
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


LAST = Report(started=True, trains=True, epoch=3, epochs=3, global_step=60, examples_per_sec=812.54,
              last_checkpoint=NOW.timestamp() - 1, last_progress=NOW.timestamp() - 1)


def test_the_last_figures_are_read_from_the_chiefs_termination_message_as_from_its_metrics() -> None:
    message = termination.message(LAST)
    assert message is not None and len(message) < 4096  # the kubelet keeps at most 4 KiB
    assert final_progress(message, NOW) == to_progress(read_samples(worker_metrics(LAST)), NOW) == JobProgress(
        epoch=3, epochs=3, step=60, examplesPerSecond=812.5, lastCheckpointTime="2026-01-01T11:59:59Z",
        updatedAt="2026-01-01T12:00:00Z", summary="epoch 3/3 step 60")


@pytest.mark.parametrize("message", [
    "", "Traceback (most recent call last):\nValueError: bad", "[1, 2]", '{"tfjob_worker_epoch": "three"}',
    termination.message(Report(started=True, epoch=0)) or "",
])
def test_a_termination_message_without_figures_is_no_progress(message: str) -> None:
    assert final_progress(message, NOW) is None


def _succeeded_job(chief_message: str | None) -> tuple[dict, list[dict]]:
    """Job `j` (one worker, Running, last progress read at epoch 1) whose worker 0 has just exited 0."""
    template = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}
    job = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "generation": 1},
           "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}},
           "status": {"conditions": [
               {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T11:59:00Z"},
               {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T11:59:10Z"}],
               "startTime": "2026-01-01T11:59:00Z",
               "progress": {"epoch": 1, "epochs": 3, "step": 5, "summary": "epoch 1/3 step 5"}}}
    terminated = {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-01T11:59:59Z",
                  **({"message": chief_message} if chief_message is not None else {})}
    pod = {"metadata": {"name": "j-worker-0", "namespace": "ns", "labels": {
               "tfjob.dev/job-name": "j", "tfjob.dev/replica-type": "worker", "tfjob.dev/replica-index": "0",
               "tfjob.dev/attempt": "0", "tfjob.dev/job-role": "chief"},
               "ownerReferences": [{"uid": "uid-j", "controller": True, "kind": "TFJob", "name": "j"}]},
           "spec": {"containers": [{"name": "tensorflow"}]},
           "status": {"phase": "Succeeded", "containerStatuses": [
               {"name": "tensorflow", "state": {"terminated": terminated}}]}}
    return job, [pod]


def test_a_succeeded_job_keeps_the_chiefs_last_figures_from_its_termination_message() -> None:
    decision = reconcile(*_succeeded_job(termination.message(LAST)), NOW)
    assert decision.status.state == "Succeeded"
    assert decision.status.progress == JobProgress(
        epoch=3, epochs=3, step=60, examplesPerSecond=812.5, lastCheckpointTime="2026-01-01T11:59:59Z",
        updatedAt="2026-01-01T12:00:00Z", summary="done")


@pytest.mark.parametrize("message", [None, "some last words"])
def test_without_figures_in_the_message_a_succeeded_job_keeps_the_last_figures_read(message: str | None) -> None:
    decision = reconcile(*_succeeded_job(message), NOW)
    assert decision.status.progress == JobProgress(epoch=1, epochs=3, step=5, summary="done")


async def test_passes_start_once_an_interval_however_long_a_pass_takes() -> None:
    """So figures show within one interval of the chief reporting them, even while a hung chief's read or slow
    status writes take most of each pass."""
    starts: list[float] = []

    class SlowPasses(ProgressPoller):
        async def one_pass(self, session: object) -> None:
            starts.append(time.monotonic())
            await asyncio.sleep(0.3)

    poller = SlowPasses(None, interval=0.4, reads_per_second=10)  # type: ignore[arg-type]
    poller.start()
    await asyncio.sleep(2.1)
    await poller.stop()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) >= 5 and max(gaps) < 0.55, gaps  # a sleep after each pass: 0.7 s apart



async def test_over_the_read_rate_the_chiefs_are_read_one_every_1_over_rate_seconds_and_the_passes_stretch() -> None:
    """TFJOB_PROGRESS_READS_PER_SECOND bounds the reads (and the operator's idle CPU) whatever the number of running
    jobs: 6 chiefs at 10 reads/s under a 0.2 s interval are read 0.1 s apart, a pass every 0.6 s; 2 chiefs fit in
    one interval's reads and are read at once, every interval."""
    reads: list[float] = []

    async def serve(_: web.Request) -> web.Response:
        reads.append(time.monotonic())
        return web.Response(text=worker_metrics(Report(started=True, trains=True, epoch=1, epochs=3)))

    app = web.Application()
    app.router.add_get("/metrics", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    class Host:
        metrics = Metrics()

        def __init__(self, n: int) -> None:
            keys = [("ns", f"j{i}") for i in range(n)]
            self.jobs = {k: ({"metadata": {"name": k[1]}, "status": {"state": "Running"}},) for k in keys}
            self.pods = {k: [{"metadata": {"labels": {constants.LABEL_JOB_ROLE: constants.ROLE_CHIEF}},
                              "spec": {"containers": [{"ports": [{"name": constants.METRICS_PORT_NAME,
                                                                  "containerPort": port}]}]},
                              "status": {"phase": "Running", "podIP": "127.0.0.1"}}] for k in keys}

        async def write_progress(self, key: object, progress: object) -> bool:
            return True

    try:
        async with aiohttp.ClientSession() as session:
            over = ProgressPoller(Host(6), interval=0.2, reads_per_second=10)  # type: ignore[arg-type]
            await over.one_pass(session)
            gaps = [b - a for a, b in itertools.pairwise(reads)]
            assert len(reads) == 6 and min(gaps) > 0.08, gaps
            assert over.period() == pytest.approx(0.6)
            reads.clear()
            within = ProgressPoller(Host(2), interval=0.2, reads_per_second=10)  # type: ignore[arg-type]
            await within.one_pass(session)
            assert len(reads) == 2 and reads[1] - reads[0] < 0.08 and within.period() == 0.2
    finally:
        await runner.cleanup()
