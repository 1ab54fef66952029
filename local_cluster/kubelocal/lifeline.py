"""Child processes that die with their parent, so a SIGKILLed `tfjob local` leaves nothing running.

On Linux, prctl(PR_SET_PDEATHSIG) asks the kernel to SIGKILL the child when the thread that started it
ends; the kubelet starts pods from its event-loop thread, which ends only after it has stopped them,
and the operator is started from the main thread. Elsewhere there is no such call: children are then
stopped only by an orderly shutdown.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


# Looked up once, before any fork: the child between fork and exec must not load libraries.
_PRCTL = _load_prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child die when its parent does (None where the OS cannot)."""
    if _PRCTL is None:
        return None
    prctl, parent = _PRCTL, os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec
