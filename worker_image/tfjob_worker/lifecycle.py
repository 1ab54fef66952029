"""Process lifecycle: the supervisor (start-up timeout, stall watchdog, grace period, metrics), trainer env, exit."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import exit_codes, preemption, termination
from .progress import PREFIX, error
from .reach import ReachCheck
from .reports import REPORT_FD_ENV, LineReader, Report
from .stall import StallPolicy, StallRecord, stall_reason
from .startup import BEGAN_ENV


def prepare_environment(env: MutableMapping[str, str], verbose: bool) -> None:
    """Must run before TensorFlow is imported: tf-keras (Keras 3 fails multi-worker fit) and quieter logs."""
    env["TF_USE_LEGACY_KERAS"] = "1"
    if not verbose:
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("GRPC_VERBOSITY", "ERROR")


def exit_now(code: int) -> None:
    """Flush and leave without running TensorFlow's teardown, which can block on dead gRPC peers."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def process_started() -> float:
    """Unix time this process started (from /proc, so Python's own start-up counts too); now if unknown."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22, starttime, in clock ticks since boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])  # 10 ms resolution (/proc/stat's btime has whole seconds)
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


CHILD_ENV = "TFJOB_WORKER_CHILD"
#: Seconds between SIGUSR1 (the trainer dumps its threads' stacks) and SIGKILL when stopping a stalled trainer.
STACK_DUMP_WAIT = 1.0


def child_exit_code(returncode: int) -> int:
    """A trainer killed by signal N reports 128+N, as a shell would."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Watch:
    """The supervisor's view of its trainer: the newest report and when things happened (monotonic)."""

    report: Report | None = None
    started_at: float | None = None
    progress_at: float | None = None

    def take(self, report: Report, now: float) -> None:
        if report.started and self.started_at is None:
            self.started_at = now
        if self.report is None or report.activity != self.report.activity:
            self.progress_at = now
        self.report = report


def supervise(argv: Sequence[str], startup_timeout: float, stall: StallPolicy | None = None,
              metrics_port: int = 0, reach: ReachCheck | None = None) -> int:
    """Run the trainer as a child process; enforce the start-up timeout, the stall watchdog and the grace
    period from outside it, and serve its metrics.

    SIGTERM during start-up kills the trainer at once; once training, it is passed on (the trainer's peers
    agree on a step, save if it fits, exit 143) and the trainer is killed if still there KILL_MARGIN seconds
    before the grace period (TFJOB_TERMINATION_GRACE_SECONDS) ends.

    This cannot live in a thread of the trainer: while peers are missing, the MultiWorkerMirroredStrategy
    constructor blocks in C++ holding the GIL, so no Python thread of that process runs again.
    The supervisor imports no TensorFlow; stdout and stderr pass straight through.
    """
    stall = stall or StallPolicy()
    try:
        grace = preemption.grace_seconds()
    except ValueError as exc:
        error(str(exc))
        return exit_codes.USER_ERROR
    read_fd, write_fd = os.pipe()
    env = {**os.environ, CHILD_ENV: "1", REPORT_FD_ENV: str(write_fd), BEGAN_ENV: f"{process_started():.3f}"}
    child = subprocess.Popen([sys.executable, "-m", "tfjob_worker", *argv], env=env, pass_fds=(write_fd,))
    os.close(write_fd)
    watch = Watch()
    stop_by: list[float] = []  # when the trainer must be gone (monotonic), once SIGTERM came

    def on_sigterm(_signum: int, _frame: Any) -> None:
        if watch.started_at is None or watch.report is None or not watch.report.trains:
            # still starting (nothing trained to save), or a role without training steps (ps, evaluator)
            child.kill()
            error(f"SIGTERM received: stopping now (exit {exit_codes.PREEMPTED}, retryable; "
                  "the gang resumes from the last backup)")
            exit_now(exit_codes.PREEMPTED)
        if not stop_by:  # the trainer finishes its step, agrees with its peers, saves if it fits, exits 143
            stop_by.append(time.monotonic() + max(grace - preemption.KILL_MARGIN, 0.0))
            with contextlib.suppress(OSError):
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    from . import metrics  # prometheus_client: imported while the trainer starts, not before (a restart waits)

    collector = metrics.ReportCollector(metrics.Identity.from_env(os.environ), stall.timeout)
    if metrics_port:
        metrics.serve(metrics_port, collector)
    deadline = time.monotonic() + startup_timeout if startup_timeout > 0 else None
    reader, eof = LineReader(), False
    while not eof and child.poll() is None:
        wait = 0.5
        if deadline is not None and watch.started_at is None:
            wait = max(min(deadline - time.monotonic(), 0.5), 0)
        if stop_by:
            wait = max(min(stop_by[0] - time.monotonic(), wait), 0)
        readable, _, _ = select.select([read_fd], [], [], wait)
        now = time.monotonic()
        if stop_by and now < stop_by[0]:  # again each turn: a SIGTERM that came before the training loop took
            with contextlib.suppress(OSError):  # the signal over went to TensorFlow's own handler, which ignores it
                child.send_signal(signal.SIGTERM)
        if stop_by and now >= stop_by[0]:
            child.kill()
            child.wait()
            error(f"SIGTERM: the trainer did not stop within the {grace:g}s grace period less "
                  f"{preemption.KILL_MARGIN:g}s; killed it (exit {exit_codes.PREEMPTED}, retryable; "
                  "the gang resumes from the last complete backup)")
            return exit_codes.PREEMPTED
        if readable:
            data = os.read(read_fd, 65536)
            eof = not data  # the trainer exited: its code is next
            report = reader.feed(data)
            if report is not None:
                watch.take(report, now)
                collector.update(report)
        if reach is not None and reach.verdict is not None and watch.started_at is None:  # a peer never reachable
            child.kill()
            child.wait()
            error(f"{reach.verdict.message}; exit {reach.verdict.code}")
            return reach.verdict.code
        if watch.started_at is None and deadline is not None and now >= deadline:
            child.kill()
            child.wait()
            error(f"not all peers were present within --startup-timeout {startup_timeout:g}s; "
                  f"exit {exit_codes.STARTUP_TIMEOUT}, retryable")
            return exit_codes.STARTUP_TIMEOUT
        reason = stall_reason(stall, watch.report, now, watch.started_at, watch.progress_at)
        if reason is not None and watch.report is not None:
            record = StallRecord.of(watch.report)  # where it waited, before the stack dump disturbs it
            stop_stalled(child)
            where = record.describe()
            line = (f"training stalled{' ' + where if where else ''}: {reason}; exit {exit_codes.STALLED}, "
                    "retryable: the gang restarts and resumes from the last backup (the trainer's stacks are above)")
            error(line)
            termination.write_text(f"{PREFIX} error: {line}\n{record.line()}\n")
            return exit_codes.STALLED
    if stop_by:  # SIGTERM came: wait for the trainer's exit within the grace period too
        try:
            code = child_exit_code(child.wait(max(stop_by[0] - time.monotonic(), 0)))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            code = exit_codes.PREEMPTED
    else:
        code = child_exit_code(child.wait())
    report = _drain(read_fd, reader) or watch.report  # the last reports may still sit in the pipe
    os.close(read_fd)
    if code == exit_codes.SUCCESS:
        termination.write(report)
    return code


def _drain(read_fd: int, reader: LineReader) -> Report | None:
    """The newest report left in the pipe by a trainer that has exited."""
    latest = None
    while select.select([read_fd], [], [], 0)[0]:
        data = os.read(read_fd, 65536)
        if not data:
            break
        latest = reader.feed(data) or latest
    return latest


def stop_stalled(child: subprocess.Popen[bytes]) -> None:
    """Ask the trainer for its stacks (where it hangs is the one thing worth knowing), then kill it."""
    with contextlib.suppress(OSError):
        child.send_signal(signal.SIGUSR1)
    try:
        child.wait(STACK_DUMP_WAIT)
    except subprocess.TimeoutExpired:
        pass
    child.kill()
    child.wait()


def dump_stacks_on_sigusr1() -> None:
    """Trainer: SIGUSR1 writes every thread's Python stack to stderr, even while C++ holds the GIL."""
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def hang_on_sigusr2() -> None:
    """Trainer: SIGUSR2 hangs the training loop for good while the process stays alive (TensorFlow's heartbeats
    go on, so no peer sees it die): a rehearsal of a stuck input pipeline or collective for the stall
    watchdog (`tfjob local --stall-worker-after`). SIGUSR2 would end the process otherwise."""
    def hang(_signum: int, _frame: Any) -> None:
        error("SIGUSR2 received: training hangs here on purpose (a stall for the watchdog to catch)")
        threading.Event().wait()

    signal.signal(signal.SIGUSR2, hang)


def die_with_supervisor() -> None:
    """Trainer: be killed if the supervisor dies (Linux PR_SET_PDEATHSIG), so no trainer outlives its pod."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor still kills the trainer on SIGTERM
