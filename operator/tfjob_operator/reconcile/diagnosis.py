"""Why a training container failed, in one line, and what usually fixes it.

Pure rules over what the pod status holds: the container's termination message (its log tail under
`terminationMessagePolicy: FallbackToLogsOnError`, which the operator sets on the TensorFlow container; or what
the kubelet says of a kill of its own), exit code and reason. The Failed condition, its Event, `tfjob status` and
`tfjob local` show the result. Lines that never say why (start-up noise of TensorFlow, CUDA and XLA; log lines
below error severity) are listed once, in `log_noise`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfjob_operator.reconcile import log_noise

#: At most this much of one line goes into a condition message.
LINE_LIMIT = 300

# A Python exception line: a dotted class name ending like an exception class, then its message.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)(?::\s.*)?$")
# An error line of the worker runtime (tfjob_worker.progress.error).
_RUNTIME_ERROR = re.compile(r"^\[tfjob\] error: ")
#: Container reasons whose message is the kubelet's or the runtime's own statement of what happened, not the
#: program's log tail: quoted as it is. `Killed` is the local kubelet's, for a SIGKILL it sent itself (the grace
#: period ran out) or a fault injection sent (`tfjob local --kill-worker-after`).
STATEMENT_REASONS = frozenset({"Killed", "StartError", "ContainerCannotRun", "ContainerStatusUnknown"})


@dataclass(frozen=True)
class Hint:
    """A well-known TensorFlow failure: how to recognise it, and one line of advice."""

    name: str
    pattern: re.Pattern[str] | None
    advice: str
    #: Exit codes (or container reasons) that mean this failure whatever the message says.
    exit_codes: frozenset[int] = frozenset()
    reasons: frozenset[str] = frozenset()
    #: Reasons under which the exit code says nothing more (the message already says who killed it).
    unless_reasons: frozenset[str] = frozenset()

    def matches(self, message: str, exit_code: int | None, reason: str | None) -> bool:
        return bool((self.pattern is not None and self.pattern.search(message))
                    or (exit_code is not None and exit_code in self.exit_codes and reason not in self.unless_reasons)
                    or (reason is not None and reason in self.reasons))


#: First match wins: the message's own words before what an exit code suggests.
HINTS: tuple[Hint, ...] = (
    Hint("keras3-mwms", re.compile(r"Attempt to convert a value \(PerReplica"),
         "Keras 3 cannot fit under MultiWorkerMirroredStrategy: use tf-keras (TF_USE_LEGACY_KERAS=1 with tf-keras "
         "installed, as the worker image does)"),
    Hint("nccl-duplicate-gpu", re.compile(r"Duplicate GPU detected"),
         "two workers were given the same GPU: request nvidia.com/gpu per pod instead of sharing one device"),
    Hint("address-in-use", re.compile(r"[Aa]ddress already in use|EADDRINUSE|Failed to add port"),
         "a TF_CONFIG port is taken on the node (an earlier run still alive, or a fixed hostPort): stop that "
         "process or change the container's tfjob-port"),
    Hint("peer-lost", re.compile(r"UnavailableError|DeadlineExceededError|Socket closed|Connection reset by peer"
                                 r"|failed to connect to all addresses|Collective ops is aborted"
                                 r"|[Cc]ollective\b.*\btim(?:ed|e) ?out|peer\b.*\b(?:lost|unreachable|went away)"),
         "a peer task went away or could not be reached: read the other pods' logs; if it recurs, check that "
         "pods reach each other on the tfjob-port (network policy, firewall)"),
    # Only what the kernel's OOM killer did, as the runtime (or kubelet) reports it, is called out of memory.
    Hint("out-of-memory", None,
         "the kernel's OOM killer stopped it at its memory limit: raise resources.limits.memory or lower the "
         "batch size", reasons=frozenset({"OOMKilled"})),
    Hint("sigkill", None,
         "a SIGKILL from outside the program, not reported as OOMKilled: the pod's events say who sent it (the "
         "kubelet when the grace period ran out, an eviction, kill -9)",
         exit_codes=frozenset({137}), unless_reasons=STATEMENT_REASONS | {"OOMKilled"}),
)


def _clip(line: str) -> str:
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 1] + "…"


def _open_brackets(text: str) -> int:
    return sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")


def _meaningful(message: str) -> list[str]:
    """The message's non-empty lines, stripped, without the lines of `log_noise`."""
    return [line for line in (raw.strip() for raw in message.splitlines()) if line and log_noise.noise(line) is None]


def killed_by_signal(exit_code: int | None) -> bool:
    """128+N: the process was ended by signal N rather than exiting by itself."""
    return exit_code is not None and 128 < exit_code <= 128 + 64


def _exception_text(lines: list[str], i: int) -> str:
    """An exception whose text prints a value over several lines (an open bracket): its first line, "…", and the
    line that closes the bracket."""
    text, depth = lines[i], _open_brackets(lines[i])
    for more in lines[i + 1:] if depth > 0 else []:
        depth += _open_brackets(more)
        if depth <= 0:
            return text + " … " + more
    return text


def failure_line(message: str, *, ended_itself: bool = True) -> str:
    """The line that says why, from the end: the last Python exception line or error line of the worker runtime;
    else the last error line of TensorFlow's logging; else, for a process that ended by itself (not by a
    signal: its last words are its own), its last line. Lines of `log_noise` never count."""
    lines = _meaningful(message)
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[i]) or _RUNTIME_ERROR.match(lines[i]):
            return _clip(_exception_text(lines, i))
    logged = next((line for line in reversed(lines) if log_noise.severity(line) in ("E", "F", "C")), None)
    if logged is not None:
        return _clip(logged)
    return _clip(lines[-1]) if lines and ended_itself else ""


def hint_for(message: str, exit_code: int | None = None, reason: str | None = None) -> Hint | None:
    """The first well-known failure the message (its noise aside), exit code or reason shows; None for anything
    else."""
    text = "\n".join(_meaningful(message))
    return next((h for h in HINTS if h.matches(text, exit_code, reason)), None)


def explain(message: str, exit_code: int | None = None, reason: str | None = None) -> str:
    """`: <exception line> (hint: <advice>)`, or the parts known, or "" when there is nothing to add."""
    ended_itself = reason in STATEMENT_REASONS or not killed_by_signal(exit_code)
    line = failure_line(message, ended_itself=ended_itself)
    hint = hint_for(message, exit_code, reason)
    return (f": {line}" if line else "") + (f" (hint: {hint.advice})" if hint else "")
