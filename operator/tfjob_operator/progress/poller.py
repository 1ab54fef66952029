"""The operator's periodic look at running training: chief progress into `status.progress`, and job census metrics.

Every `TFJOB_PROGRESS_INTERVAL` seconds one pass: for each Running job, one GET of its chief's `/metrics`
(concurrency bounded, short timeout); `status.progress` is merge-patched only when a figure moved, so the
status writes are at most one per running job per interval (100 jobs at the default 30 s: ≤ 3.3/s), and an
idle or stalled job costs none. The reads are bounded too (`TFJOB_PROGRESS_READS_PER_SECOND`, 10): with more
running jobs than that rate reads in one interval, the reads are spread one every 1/rate s and the passes come
further apart (2,000 running jobs: every 200 s), so the operator's idle CPU does not grow with the cluster (a
read costs a few ms of Python). The same pass sets `tfjob_jobs{state}` and adds the GPU-seconds held by
Running jobs whose chief reports no progress for `STALLED_AFTER` intervals. Our own timer rather than a kopf
timer per job: one pass shares one HTTP session and bounds the total rate, whatever the number of jobs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

import aiohttp

from tfjob_operator.api import apigroups
from tfjob_operator.api.keys import JobKey
from tfjob_operator.api.observed import job_state, latest, prior_status
from tfjob_operator.api.times import now as utcnow
from tfjob_operator.dispatch import paced
from tfjob_operator.gang import resources
from tfjob_operator.gang.resources import is_terminal
from tfjob_operator.metrics import Metrics
from tfjob_operator.progress.chief_metrics import (
    chief_pod,
    metrics_url,
    read_samples,
    seconds_since_progress,
    worth_writing,
)
from tfjob_operator.reconcile.chief_report import to_progress

log = logging.getLogger(__name__)

#: Requests in flight at once, and how long one may take: a hung chief must not hold the pass up.
CONCURRENCY = 16
READ_TIMEOUT = 3.0
#: A Running job whose chief made no progress for this many intervals (and at least a minute) holds idle GPUs.
STALLED_AFTER = 2
STATES = ("Created", "Queued", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


class ProgressHost(Protocol):
    """What the poller needs from the controller."""

    jobs: Mapping[JobKey, Any]
    metrics: Metrics

    @property
    def pods(self) -> Mapping[JobKey, Any]:
        """The operator's index of TFJob pods by job (`pod_index`)."""

    async def write_progress(self, key: JobKey, progress: dict[str, Any]) -> bool:
        """Merge-patch status.progress (under the job's reconcile lock); False if the job is gone."""
        ...



class ProgressPoller:
    """One pass every `interval` seconds (or further apart, to read at most `reads_per_second` chiefs a second on
    average); `interval` 0 reads no progress (the census still runs every 30 s)."""

    def __init__(self, host: ProgressHost, interval: float, reads_per_second: float) -> None:
        self.host = host
        self.interval = interval
        self.reads_per_second = reads_per_second
        #: Chiefs read in the last pass: the next pass comes once they fit in the rate.
        self.last_reads = 0
        self._task: asyncio.Task[None] | None = None
        self._last_pass: float | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tfjob progress")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=READ_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                began = time.monotonic()
                try:
                    await self.one_pass(session)
                except Exception:  # a bad pass must not end the loop: the next one may do better
                    log.exception("progress pass failed")
                # Passes start once a period however long one took (a hung chief's read, slow status writes), so
                # new figures show within one interval; a sleep after each pass would let the start drift.
                await asyncio.sleep(max(self.period() - (time.monotonic() - began), 0.0))

    def period(self) -> float:
        """Seconds from one pass's start to the next: the interval, or longer when the last pass read more
        chiefs than the read rate allows in it."""
        return max(self.interval or 30.0, self.last_reads / self.reads_per_second)

    async def one_pass(self, session: aiohttp.ClientSession) -> None:
        """Census, then read each running job's chief and write what moved."""
        started = time.monotonic()
        elapsed = started - self._last_pass if self._last_pass is not None else 0.0
        self._last_pass = started
        metrics = self.host.metrics
        counts = dict.fromkeys(STATES, 0)
        running: list[tuple[JobKey, Mapping[str, Any], Mapping[str, Any], list[Mapping[str, Any]]]] = []
        for key, store in list(self.host.jobs.items()):
            if not store:
                continue
            # The state as written (not the parsed status: a pass over 10,000 jobs would parse each, 0.4 s; nor
            # the packed body of a finished job: `observed.job_state`).
            state = job_state(store) or "Created"
            counts[state] = counts.get(state, 0) + 1
            if state != "Running" or not self.interval:
                continue
            pods = [p for p in list(self.host.pods.get(key) or []) if not is_terminal(p)]
            chief = chief_pod(pods)
            obj = latest(store)
            if chief is not None and obj is not None:
                running.append((key, obj, chief, pods))
        for state, n in counts.items():
            metrics.jobs_by_state.labels(state).set(n)
        self.last_reads = len(running)
        if not running:
            return
        gate = asyncio.Semaphore(CONCURRENCY)
        # Each job's figures are written as soon as its chief answers: a hung chief holds up only its own job. More
        # than the rate allows in one interval: one read every 1/rate s over the stretched period.
        updates = [asyncio.create_task(self._update(session, gate, job, elapsed))
                   async for job in paced(running, self.reads_per_second, self.interval or 30.0)]
        await asyncio.gather(*updates)

    async def _update(self, session: aiohttp.ClientSession, gate: asyncio.Semaphore,
                      job: tuple[JobKey, Mapping[str, Any], Mapping[str, Any], list[Mapping[str, Any]]],
                      elapsed: float) -> None:
        key, obj, chief, pods = job
        values = await self._read(session, gate, chief)
        if values is None:
            return
        now = utcnow()
        idle = seconds_since_progress(values, now)
        if idle is not None and idle >= max(STALLED_AFTER * self.interval, 60.0) and elapsed:
            self.host.metrics.stalled_gpu_seconds.inc(float(resources.requested_gpus(pods)) * elapsed)
        progress = to_progress(values, now)
        if apigroups.group_of(obj).kubeflow:
            return  # Kubeflow's TFJob schema has no progress field
        if worth_writing(prior_status(obj).progress, progress):
            assert progress is not None
            if await self.host.write_progress(key, progress.model_dump(mode="json", exclude_none=True)):
                self.host.metrics.progress_writes.inc()

    async def _read(self, session: aiohttp.ClientSession, gate: asyncio.Semaphore,
                    chief: Mapping[str, Any]) -> dict[str, float] | None:
        url = metrics_url(chief)
        if url is None:
            return None
        async with gate:
            try:
                async with session.get(url) as response:
                    text = await response.text() if response.status == 200 else ""
            except (aiohttp.ClientError, TimeoutError, OSError):
                text = ""
        self.host.metrics.progress_reads.labels("ok" if text else "error").inc()
        return read_samples(text) if text else None
