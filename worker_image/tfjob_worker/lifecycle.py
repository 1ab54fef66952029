"""Process lifecycle: a supervisor enforcing start-up timeout and SIGTERM, the trainer's environment, exiting."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import MutableMapping, Sequence
from typing import Any

from . import exit_codes
from .progress import error


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


STARTUP_FD_ENV = "TFJOB_STARTUP_FD"
CHILD_ENV = "TFJOB_WORKER_CHILD"


def child_exit_code(returncode: int) -> int:
    """A trainer killed by signal N reports 128+N, as a shell would."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(argv: Sequence[str], startup_timeout: float) -> int:
    """Run the trainer as a child process and enforce the start-up timeout and SIGTERM from outside it.

    This cannot live in a thread of the trainer: while peers are missing, the MultiWorkerMirroredStrategy
    constructor blocks in C++ holding the GIL, so no Python thread of that process runs again.
    The supervisor imports no TensorFlow; stdout and stderr pass straight through.
    """
    read_fd, write_fd = os.pipe()
    env = {**os.environ, CHILD_ENV: "1", STARTUP_FD_ENV: str(write_fd)}
    child = subprocess.Popen([sys.executable, "-m", "tfjob_worker", *argv], env=env, pass_fds=(write_fd,))
    os.close(write_fd)

    def on_sigterm(_signum: int, _frame: Any) -> None:
        child.kill()
        error(f"SIGTERM received: stopping now (exit {exit_codes.PREEMPTED}, retryable; "
              "the gang resumes from the last backup)")
        exit_now(exit_codes.PREEMPTED)

    signal.signal(signal.SIGTERM, on_sigterm)
    deadline = time.monotonic() + startup_timeout if startup_timeout > 0 else None
    started = False
    while not started and child.poll() is None:
        wait = 0.5 if deadline is None else max(min(deadline - time.monotonic(), 0.5), 0)
        readable, _, _ = select.select([read_fd], [], [], wait)
        if readable:
            started = True  # a byte: start-up done; EOF: the trainer exited (poll() says so next)
        elif deadline is not None and time.monotonic() >= deadline:
            child.kill()
            child.wait()
            error(f"not all peers were present within --startup-timeout {startup_timeout:g}s; "
                  f"exit {exit_codes.STARTUP_TIMEOUT}, retryable")
            return exit_codes.STARTUP_TIMEOUT
    os.close(read_fd)
    return child_exit_code(child.wait())


def die_with_supervisor() -> None:
    """Trainer: be killed if the supervisor dies (Linux PR_SET_PDEATHSIG), so no trainer outlives its pod."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor still kills the trainer on SIGTERM


class StartupWatchdog:
    """The trainer's side of the start-up timeout: tells the supervisor once start-up is done."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None and os.environ.get(STARTUP_FD_ENV, "").isdigit():
            fd = int(os.environ[STARTUP_FD_ENV])
        self._fd = fd
        self._done = False

    def done(self) -> None:
        """Every peer is here (the first step ran, or the chief was seen)."""
        if self._done:
            return
        self._done = True
        if self._fd is not None:
            try:
                os.write(self._fd, b"1")
                os.close(self._fd)
            except OSError:
                pass

    @property
    def is_done(self) -> bool:
        return self._done
