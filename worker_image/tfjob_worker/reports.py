"""The trainer's progress reports to its supervisor: one JSON line per report, over a pipe.

The trainer cannot serve its own metrics or judge its own stalls: the MultiWorkerMirroredStrategy constructor
(and a hung collective) can block in C++ holding the GIL, so no thread of the trainer would answer. It
reports instead: a background thread sends the state every `MIN_INTERVAL` seconds when it changed (so the
last steps before a hang are reported too), and start-up, epoch ends and checkpoints go at once. The
supervisor, which imports no TensorFlow, serves `/metrics` and runs the stall watchdog from them. A report
carries the whole cumulative state, so a dropped one (full pipe) loses nothing.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import blocked

REPORT_FD_ENV = "TFJOB_REPORT_FD"
MIN_INTERVAL = 0.5  # seconds between reports of steps (the stall watchdog's and /metrics' resolution)
#: Seconds without a sign of life before the reporter looks where the trainer is blocked (blocked.sample).
IDLE_LOOK = 1.0
#: Upper bounds (seconds) of the step-time histogram; +Inf is implied.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Writes up to PIPE_BUF bytes to a pipe are atomic; a report must fit so a reader never sees half of one.
PIPE_BUF = 4096


@dataclass
class Report:
    """What the supervisor knows of its trainer. Times are Unix seconds."""

    started: bool = False  # start-up done: every peer is here (or the role waits for none)
    trains: bool = False  # this process runs training steps (chief/worker), so the stall watchdog applies
    rank: int | None = None
    world_size: int = 1
    strategy: str = ""
    collective: str = "none"
    device_kind: str = "cpu"
    device_count: int = 1
    steps: int = 0  # training steps this process completed
    global_step: int = 0  # steps of the whole job, counting epochs done before a resume
    epoch: int = 0  # 1-based epoch in progress (0: none yet)
    epochs: int = 0
    examples_per_sec: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # loss and the compiled metrics, last known
    last_checkpoint: float | None = None
    last_progress: float | None = None  # last train step, evaluation step or checkpoint
    activity: int = 0  # bumps on every sign of life the stall watchdog counts
    step_buckets: list[int] = field(default_factory=lambda: [0] * (len(STEP_BUCKETS) + 1))  # per bucket, +Inf last
    step_seconds_sum: float = 0.0
    resized_from: int | None = None  # this run resumed a backup saved at this many replicas (another width)
    finishing: bool = False  # the training steps are over: the test evaluation and the export run (no watchdog)
    #: Once idle IDLE_LOOK seconds: blocked.OWN (waits in its own code, at `blocked_at`) or blocked.TENSORFLOW
    #: (inside TensorFlow's executor: peers, input pipeline or device); "" while it makes progress.
    blocked: str = ""
    blocked_at: str = ""

    def to_line(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self), separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> Report | None:
        """The report in one line, or None for a line that is not one (never raises)."""
        try:
            data = json.loads(line)
            names = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in names}) if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None


class Reporter:
    """The trainer's side: keeps the Report up to date and sends it to the supervisor, rate-limited."""

    def __init__(self, fd: int | None = None, clock: Any = time.time) -> None:
        if fd is None and os.environ.get(REPORT_FD_ENV, "").isdigit():
            fd = int(os.environ[REPORT_FD_ENV])
            try:
                os.set_blocking(fd, False)  # a busy supervisor must never stall training
            except OSError:
                fd = None
        self._fd = fd
        self._clock = clock
        self._lock = threading.Lock()  # the sender thread reads what the training thread writes
        self._dirty = False
        self._live_at = 0.0
        self._alive_mono = time.monotonic()
        self._last_step_end: float | None = None
        self._steps_per_epoch = 0
        self.report = Report()
        if fd is not None:
            threading.Thread(target=self._send_changes, name="tfjob-reports", daemon=True).start()

    # ---- what the trainer says -------------------------------------------------------------------
    def describe(self, *, trains: bool, rank: int | None, world_size: int, strategy: str, collective: str | None,
                 device_kind: str, device_count: int, epochs: int, steps_per_epoch: int) -> None:
        """Who this process is (sent with the start-up report)."""
        r = self.report
        r.trains, r.rank, r.world_size, r.strategy = trains, rank, world_size, strategy
        r.collective, r.device_kind, r.device_count, r.epochs = collective or "none", device_kind, device_count, epochs
        self._steps_per_epoch = steps_per_epoch

    def done(self) -> None:
        """Start-up is over (every peer is here, or the role waits for none): the supervisor stops its timer."""
        if not self.report.started:
            with self._lock:
                self.report.started = True
                self._alive()
            self.send()

    @property
    def is_done(self) -> bool:
        return self.report.started

    def epoch_begin(self, epoch: int) -> None:
        """`epoch` is 1-based; the first step of an epoch is not timed (it includes the epoch's set-up)."""
        with self._lock:
            self.report.epoch = epoch
            self.report.global_step = (epoch - 1) * self._steps_per_epoch
            self._last_step_end = None
            self._alive()

    def step_end(self, step_in_epoch: int) -> None:
        """A training step finished (`step_in_epoch` is 1-based)."""
        now = time.perf_counter()
        r = self.report
        with self._lock:
            if self._last_step_end is not None:
                seconds = now - self._last_step_end
                r.step_buckets[bisect.bisect_left(STEP_BUCKETS, seconds)] += 1
                r.step_seconds_sum += seconds
            self._last_step_end = now
            r.steps += 1
            r.global_step = max(r.epoch - 1, 0) * self._steps_per_epoch + step_in_epoch
            self._alive()

    def eval_step_end(self) -> None:
        """A validation step finished: a sign of life, not a training step."""
        with self._lock:
            self._alive()

    def epoch_end(self, metrics: dict[str, float], examples_per_sec: float | None) -> None:
        r = self.report
        with self._lock:
            r.metrics = {k: float(v) for k, v in metrics.items() if k != "examples_per_sec"}
            r.examples_per_sec = examples_per_sec
            if self._steps_per_epoch:
                r.global_step = r.epoch * self._steps_per_epoch
            self._last_step_end = None
            self._alive()
        self.send()

    def resized(self, old_replicas: int, new_replicas: int) -> None:
        """This run resumed a backup saved at another width (sent at once: the plot marks it)."""
        with self._lock:
            self.report.resized_from = old_replicas
            self._alive()
        self.send()

    def training_over(self) -> None:
        """The last training step is done; what follows (the test evaluation, the SavedModel export) is no
        training loop for the stall watchdog to watch: a large export may take longer than its timeout."""
        with self._lock:
            self.report.finishing = True
            self._alive()
        self.send()

    def checkpoint_saved(self) -> None:
        with self._lock:
            self.report.last_checkpoint = self._clock()
            self._alive()
        self.send()

    def live_rate(self, examples_per_sec: float, metrics: dict[str, float] | None = None) -> None:
        """Mid-epoch figures (throughput over the steps so far, running loss), sent with the next report."""
        with self._lock:
            self._live_at = time.monotonic()
            self.report.examples_per_sec = examples_per_sec
            if metrics:
                self.report.metrics = {**self.report.metrics, **metrics}
            self._dirty = True

    def due(self) -> bool:
        """True when mid-epoch figures are worth computing again (at most every MIN_INTERVAL: reading the
        loss syncs with the device)."""
        return time.monotonic() - self._live_at >= MIN_INTERVAL

    # ---- sending -------------------------------------------------------------------------------
    def _alive(self) -> None:
        self.report.activity += 1
        self.report.last_progress = self._clock()
        self.report.blocked = self.report.blocked_at = ""
        self._alive_mono = time.monotonic()
        self._dirty = True

    def _send_changes(self) -> None:
        while self._fd is not None:
            time.sleep(MIN_INTERVAL)
            if self._dirty:
                self.send()
            else:
                self.look_where_blocked()

    def look_where_blocked(self, now: float | None = None) -> None:
        """A trainer idle for IDLE_LOOK seconds (at `now`, monotonic): say where it waits (not a sign of life:
        activity stays)."""
        r = self.report
        since = self._alive_mono
        if not (r.started and r.trains) or (time.monotonic() if now is None else now) - since < IDLE_LOOK:
            return
        kind, at = blocked.sample()
        with self._lock:
            if since != self._alive_mono or (kind, at) == (r.blocked, r.blocked_at):
                return  # it moved on meanwhile, or nothing new
            r.blocked, r.blocked_at = kind, at
            self._dirty = True
        self.send()

    def send(self) -> None:
        """Write the report now; drop it if the pipe is full (the next one carries everything)."""
        if self._fd is None:
            return
        with self._lock:  # held over the (non-blocking) write too, so reports arrive in order
            self._dirty = False
            line = self.report.to_line()
            if len(line) > PIPE_BUF:  # too many compiled metrics: keep the report whole, drop their values
                line = dataclasses.replace(self.report, metrics={}).to_line()
            try:
                os.write(self._fd, line)
            except BlockingIOError:
                pass  # the supervisor is behind; the next report carries everything
            except OSError:
                self._fd = None  # the supervisor is gone (we die with it anyway)


class LineReader:
    """The supervisor's side: bytes from the pipe → the latest complete Report."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Report | None:
        """The newest report completed by `data`, if any."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        latest = None
        for line in lines:
            latest = Report.from_line(line) or latest
        return latest
