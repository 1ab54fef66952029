"""The kubelet's pure decisions: exit codes, restarts and their back-off, and the pod phase.

Kept apart from everything that runs processes or talks to the API so each rule has one table test
(tests/local/test_kubelet_rules.py) and the process and simulated pod workers share it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Exit code and reason a runtime reports for a container that could not be started.
START_ERROR_EXIT = 128
#: The reason of a container that a signal sent by the kubelet itself (the grace period ran out) or by a fault
#: injection ended; its message says who and why. A container runtime would say Error: only the kubelet knows.
KILLED_REASON = "Killed"
#: The reason of a container in whose cgroup the kernel's OOM killer acted (it went over its memory limit).
OOM_KILLED_REASON = "OOMKilled"


def exit_code(returncode: int) -> int:
    """A runtime's exit code: a process killed by signal N reports 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def should_restart(restart_policy: str, code: int) -> bool:
    return restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0)


def backoff_delay(restarts: int, base: float, cap: float) -> float:
    """Delay before restart number `restarts + 1`: base, doubling, capped (kubelet: 10s doubling to 5m)."""
    return min(cap, base * (2 ** restarts))


def terminated_reason(code: int) -> str:
    """The reason of a container that exited by itself: Completed for 0, else Error."""
    return "Completed" if code == 0 else "Error"


def pod_phase(restart_policy: str, statuses: Sequence[Mapping[str, Any]], *, terminal: bool = False) -> str:
    """The pod phase from its app container statuses, as kubelet's getPhase computes it.

    terminal: the pod is being torn down, so no container will restart.
    """
    running = waiting = stopped = succeeded = 0
    for status in statuses:
        state = status.get("state") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif "terminated" in (status.get("lastState") or {}) and not terminal:
            stopped += 1  # waiting to restart after a crash
        else:
            waiting += 1
    if waiting and not (terminal and running == 0):
        return "Pending"
    if running:
        return "Running"
    if terminal:
        return "Succeeded" if stopped == succeeded and stopped else "Failed"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Running" if restart_policy == "OnFailure" else "Failed"
