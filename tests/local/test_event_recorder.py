"""The local plane's Event recorder when more Events come than it can post: it drops the excess, and says so, on
stderr (a WARNING, at most once per interval, with the count since the last line) and on the API server's
/metrics, where `kubectl get --raw /metrics` finds it."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelocal.apiserver import ApiServer
from kubelocal.cluster import LocalClusterThread
from kubelocal.kubeclient import EventRecorder, KubeClient

KUBECTL = Path(sys.executable).parent / "kubectl"
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "default", "uid": "u-1"}}

pytestmark = pytest.mark.timeout(60)


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    api = ApiServer()
    await api.start()
    try:
        yield api
    finally:
        await api.stop()


def _drop_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "dropped" in r.getMessage()]


async def test_a_full_recorder_drops_counts_and_reports_once_per_interval(
        server: ApiServer, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    client = KubeClient(server.url, "test-recorder")
    recorder = EventRecorder(client, "test-recorder", workers=1, max_queued=2, log_interval=10.0, clock=clock)
    server.metrics.register(recorder)
    caplog.set_level(logging.WARNING)
    try:
        for i in range(10):  # no await between: the posting worker cannot take any before the queue is full
            recorder.record(POD, "Normal", "Tick", f"tick {i}")
        assert recorder.dropped == 8
        assert _drop_lines(caplog) == [
            "test-recorder: dropped 1 Event(s) since the last report, 1 in all: 2 were already waiting to be posted"], \
            "the first drop is reported at once, the next 7 within the interval are not"

        clock.now += 10.0
        recorder.record(POD, "Normal", "Tick", "one more")
        assert _drop_lines(caplog)[1:] == [
            "test-recorder: dropped 8 Event(s) since the last report, 9 in all: 2 were already waiting to be posted"], \
            "after the interval, the next drop reports every drop since the last line"

        metrics = await client.get("/metrics")
        assert 'kubelocal_events_dropped_total{component="test-recorder"} 9.0' in metrics.splitlines()

        async def posted() -> list[str]:
            listing = await client.get("/api/v1/namespaces/default/events")
            return [e["message"] for e in listing["items"]]

        async with asyncio.timeout(20):
            while len(await posted()) < 2:
                await asyncio.sleep(0.05)
        assert sorted(await posted()) == ["tick 0", "tick 1"], "the queued Events are posted, the rest are not"
    finally:
        server.metrics.unregister(recorder)
        await recorder.close()
        await client.close()


def test_the_local_planes_metrics_show_the_schedulers_dropped_events(tmp_path: Path) -> None:
    with LocalClusterThread(nodes="1x{cpu:2,memory:4Gi}", workdir=tmp_path, crds=()) as cluster:
        out = subprocess.run([str(KUBECTL), "--server", cluster.url, "get", "--raw", "/metrics"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert 'kubelocal_events_dropped_total{component="default-scheduler"} 0.0' in out.splitlines(), out
