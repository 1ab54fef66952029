"""Graceful preemption, the pure part: the SIGTERM flag, the grace budget, and the stop-and-save decision.

On SIGTERM a worker must not stop alone: under MultiWorkerMirroredStrategy a worker leaving between steps hangs
the others in their next collective. So a SIGTERM only raises a flag; every K steps (K agreed at each exchange, so
the exchange stays about 1% of training time) all workers exchange their flags (`tfjob_worker.graceful`) and,
when any is raised, all stop after the same step, save if the save fits in the tightest grace left, and exit
PREEMPTED (retryable). The decision is a pure function of the exchanged rows, so every worker computes the same
one. Imports no TensorFlow (the supervisor reads the grace from here too).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import exit_codes
from .peers import PEER_PROBE_TIMEOUT, Peer, lost_peers

#: Seconds between SIGTERM and SIGKILL: the pod's terminationGracePeriodSeconds, rendered by the operator.
GRACE_ENV = "TFJOB_TERMINATION_GRACE_SECONDS"
#: Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE = 30.0
#: Steps between two exchanges of the stop flag, fixed; unset: adaptive (next_interval).
CHECK_EVERY_ENV = "TFJOB_STOP_CHECK_EVERY_STEPS"
#: Fault injection (tests, demos): "STEP [task=TYPE:INDEX] [world_size=N] [attempt=A]", or several such clauses
#: separated by ';': after its STEP-th training step, the process (every one, or only that task, at that width, in
#: that gang attempt: the operator's TFJOB_ATTEMPT) holds until it gets SIGTERM. A test then stops a run at a step
#: it chose, however fast the machine runs. Unset: no hold.
HOLD_ENV = "TFJOB_FAULT_HOLD_AT_STEP"
#: Adaptive interval: the exchange may cost this share of training time...
EXCHANGE_BUDGET = 0.01
#: ...as long as the stop waits no more than this many seconds of steps for the next exchange...
MAX_STOP_DELAY = 1.0
#: ...and never more than this many steps.
MAX_INTERVAL = 100
#: The supervisor kills a trainer still running this long before the grace ends, then exits itself: the
#: kubelet's SIGKILL never lands on a half-written file, and the exit code stays ours (143, not 137).
KILL_MARGIN = 1.0
#: What a save must leave of the grace: the supervisor's margin plus the trainer's exit.
EXIT_RESERVE = 2.0
#: A save is assumed to take up to this many times the last one measured (disks and peers vary).
SAVE_SAFETY = 2.0
#: Stands for "no SIGTERM here" in the exchanged rows (any finite number far beyond a grace period).
NO_DEADLINE = 1e9


def _env_float(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"environment variable {name}={text!r}: expected a number >= {minimum:g}")
    return value


def grace_seconds(env: Mapping[str, str] = os.environ) -> float:
    """The pod's grace period (TFJOB_TERMINATION_GRACE_SECONDS, default 30)."""
    return _env_float(env, GRACE_ENV, DEFAULT_GRACE, 0.0)


def check_every(env: Mapping[str, str] = os.environ) -> int | None:
    """Steps between stop-flag exchanges (TFJOB_STOP_CHECK_EVERY_STEPS); None: adaptive."""
    value = _env_float(env, CHECK_EVERY_ENV, 0.0, 1.0)
    if value and value != int(value):
        raise ValueError(f"environment variable {CHECK_EVERY_ENV}={value!r}: expected a whole number >= 1")
    return int(value) or None


def hold_step(role: str, index: int, world_size: int, env: Mapping[str, str] = os.environ) -> int | None:
    """The step after which this process holds until SIGTERM (TFJOB_FAULT_HOLD_AT_STEP: clauses separated by
    ';', the first that applies wins), or None."""
    text = env.get(HOLD_ENV, "").strip()
    wanted = {"task": f"{role}:{index}", "world_size": str(world_size), "attempt": env.get("TFJOB_ATTEMPT", "")}
    found = None
    for clause in filter(None, (c.strip() for c in text.split(";"))):
        step, *conditions = clause.split()
        if not step.isdigit() or int(step) < 1 or any(c.partition("=")[0] not in wanted for c in conditions):
            raise ValueError(f"environment variable {HOLD_ENV}={text!r}: expected STEP [task=TYPE:INDEX] "
                             "[world_size=N] [attempt=A], clauses separated by ';', e.g. '40 task=worker:1'")
        if found is None and all(wanted[key] == value for key, _, value in (c.partition("=") for c in conditions)):
            found = int(step)
    return found


def next_interval(step_seconds: float | None, exchange_seconds: float) -> int:
    """Steps until the next exchange: as few as keep its cost within EXCHANGE_BUDGET of the steps' time, but
    no more than MAX_STOP_DELAY seconds of steps (a stop waits for the next exchange) nor MAX_INTERVAL."""
    if not step_seconds or step_seconds <= 0:
        return 1
    wanted = math.ceil(exchange_seconds / (EXCHANGE_BUDGET * step_seconds))
    return max(1, min(wanted, int(MAX_STOP_DELAY / step_seconds), MAX_INTERVAL))


class Preempted(SystemExit):
    """Raised out of a training loop once every worker agreed to stop; exits PREEMPTED (143, retryable)."""

    def __init__(self, message: str) -> None:
        super().__init__(exit_codes.PREEMPTED)
        self.message = message

    def __str__(self) -> str:
        return self.message


class StopSignal:
    """This process's SIGTERM, as a flag with the time it came (monotonic) and the grace left.

    Until a training loop says it checks the flag (`deferred`), SIGTERM exits at once with PREEMPTED, as
    before there was anything to save: roles without steps (evaluator, parameter servers) stop promptly."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.received_at: float | None = None
        self.deferred = False

    def install(self) -> StopSignal:
        """Handle SIGTERM from now on (main thread only, as Python requires)."""
        signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def _on_sigterm(self, _signum: int, _frame: Any) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()
        if not self.deferred:
            sys.stderr.write(f"[tfjob] error: SIGTERM received: stopping now (exit {exit_codes.PREEMPTED}, "
                             "retryable; the gang resumes from the last backup)\n")
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(exit_codes.PREEMPTED)

    def raise_flag(self, now: float | None = None) -> None:
        """As if SIGTERM came now (tests, and callers with their own notice of a preemption)."""
        if self.received_at is None:
            self.received_at = time.monotonic() if now is None else now

    @property
    def raised(self) -> bool:
        return self.received_at is not None

    def remaining(self, now: float | None = None) -> float:
        """Seconds of grace left; NO_DEADLINE when no SIGTERM came."""
        if self.received_at is None:
            return NO_DEADLINE
        return self.grace - ((time.monotonic() if now is None else now) - self.received_at)


@dataclass(frozen=True)
class Decision:
    """What every worker does after the step at which the flags were exchanged."""

    stop: bool
    save: bool
    remaining: float  # tightest grace left among the workers, seconds
    save_estimate: float  # slowest worker's last save, seconds (0 when none measured)

    def describe(self) -> str:
        """Why it saves or not, in words for the log."""
        if self.save:
            return f"saving (last save {self.save_estimate:.2f}s, {self.remaining:.1f}s of grace left)"
        return (f"not saving: a save (last one {self.save_estimate:.2f}s, x{SAVE_SAFETY:g}) plus {EXIT_RESERVE:g}s "
                f"to exit does not fit in the {max(self.remaining, 0):.1f}s of grace left; the previous backup "
                "stays the resume point")


def agreed_interval(rows: Iterable[Sequence[float]]) -> int:
    """Every worker proposes an interval (the 4th column); all take the largest, so they exchange in step."""
    return max((int(row[3]) for row in rows if len(row) > 3), default=1) or 1


def save_fits(remaining: float, save_estimate: float) -> bool:
    """True when a save of about `save_estimate` seconds fits in `remaining` seconds of grace."""
    return remaining >= EXIT_RESERVE + SAVE_SAFETY * save_estimate


def decide(rows: Iterable[Sequence[float]]) -> Decision:
    """The decision from every worker's row (stop flag 0/1, grace left, last save seconds[, proposed interval])."""
    rows = [(row[0], row[1], row[2]) for row in rows]
    stop = any(flag > 0 for flag, _, _ in rows)
    remaining = min((left for _, left, _ in rows), default=NO_DEADLINE)
    estimate = max((seconds for _, _, seconds in rows), default=0.0)
    return Decision(stop=stop, save=stop and save_fits(remaining, estimate), remaining=remaining,
                    save_estimate=estimate)


_PROCESS_SIGNAL: StopSignal | None = None


def process_signal() -> StopSignal:
    """The process's one SIGTERM flag, installed on first use (signal handlers are process-wide)."""
    global _PROCESS_SIGNAL
    if _PROCESS_SIGNAL is None:
        _PROCESS_SIGNAL = StopSignal(grace_seconds()).install()
    return _PROCESS_SIGNAL


class LostPeerStop:
    """On SIGTERM, before the workers agreed: when a peer is already gone, no agreement and no save can come
    (both are collectives), so stop at once instead of waiting out the grace period in a collective that never
    returns. This is the survivors' case when a worker dies and the operator restarts the gang.

    The trainer's main thread is then blocked in TensorFlow, where Python signal handlers do not run, so a
    thread learns of the signal from the interpreter's wakeup fd (written by its C-level handler) and probes
    the peers' ports. `busy()` says the main thread has agreed (it stops and saves by itself): nothing then."""

    def __init__(self, peers: Sequence[Peer], busy: Callable[[], bool],
                 timeout: float = PEER_PROBE_TIMEOUT) -> None:
        self.peers = list(peers)
        self.busy = busy
        self.timeout = timeout

    def arm(self) -> bool:
        """Watch for SIGTERM from now on (main thread only). False when there is nobody to probe, or the
        process's wakeup fd is someone else's (an event loop's)."""
        if not self.peers or threading.current_thread() is not threading.main_thread():
            return False
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous != -1:
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return False
        threading.Thread(target=self._watch, args=(read_fd,), name="tfjob-lost-peer", daemon=True).start()
        return True

    def _watch(self, read_fd: int) -> None:
        while True:
            data = os.read(read_fd, 64)
            if signal.SIGTERM in data and not self.busy():
                self.check()

    def check(self) -> None:
        """Probe every peer; if one is gone (and the main thread has not agreed meanwhile), exit 143 now."""
        lost = lost_peers(self.peers, self.timeout)
        if not lost or self.busy():
            return
        names = ", ".join(f"{peer.name} ({peer.address}: {reason})" for peer, reason in lost)
        sys.stderr.write(f"[tfjob] error: SIGTERM received and a peer is gone: {names}; no worker can agree on a "
                         f"step or save without it, so stopping now (exit {exit_codes.PREEMPTED}, retryable; the "
                         "gang resumes from the last backup)\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(exit_codes.PREEMPTED)
