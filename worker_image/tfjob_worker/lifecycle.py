"""Process lifecycle: environment before TensorFlow loads, SIGTERM, the start-up watchdog, exiting."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import MutableMapping

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


def install_sigterm_exit() -> None:
    """Exit PREEMPTED promptly on SIGTERM, even while the main thread is blocked inside TensorFlow.

    SIGTERM is blocked here, before TensorFlow starts its threads (they inherit the mask), and a
    dedicated thread takes it with sigwait: a Python-level handler would only run once the main
    thread returned from C++, which can be never (a collective waiting for a dead peer).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait_for_sigterm() -> None:
        signal.sigwait({signal.SIGTERM})
        error(f"SIGTERM received: stopping now (exit {exit_codes.PREEMPTED}, retryable; "
              "the gang resumes from the last backup)")
        exit_now(exit_codes.PREEMPTED)

    threading.Thread(target=wait_for_sigterm, name="tfjob-sigterm", daemon=True).start()


class StartupWatchdog:
    """Exit STARTUP_TIMEOUT if start-up (peers joining, the first step) is not done in time.

    A thread is needed because a missing peer blocks the MultiWorkerMirroredStrategy constructor
    forever inside C++; nothing on the main thread gets a chance to time out.
    """

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout = timeout
        self.what = what
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StartupWatchdog:
        if self.timeout > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="tfjob-startup-watchdog", daemon=True)
            self._thread.start()
        return self

    def done(self) -> None:
        """Start-up finished: disarm."""
        self._done.set()

    @property
    def is_done(self) -> bool:
        return self._done.is_set()

    def _watch(self) -> None:
        if not self._done.wait(self.timeout):
            error(f"not all peers were present within --startup-timeout {self.timeout:g}s ({self.what}); "
                  f"exit {exit_codes.STARTUP_TIMEOUT}, retryable")
            exit_now(exit_codes.STARTUP_TIMEOUT)
