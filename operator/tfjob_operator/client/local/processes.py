"""Stopping a process started in a session of its own (the local plane, an operator, a bench's helpers)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Send `sig` to the process's group, wait up to `grace` seconds, then SIGKILL the group; reaps it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()
