"""Why a training container failed, in one line, and what usually fixes it.

Pure rules over what the pod status holds: the container's termination message (its log tail under
`terminationMessagePolicy: FallbackToLogsOnError`, which the operator sets on the TensorFlow container),
exit code and reason. The Failed condition, its Event, `tfjob status` and `tfjob local` show the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: At most this much of one line goes into a condition message.
LINE_LIMIT = 300

# A Python exception line: a dotted class name ending like an exception class, then its message.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)(?::\s.*)?$")


@dataclass(frozen=True)
class Hint:
    """A well-known TensorFlow failure: how to recognise it, and one line of advice."""

    name: str
    pattern: re.Pattern[str] | None
    advice: str
    #: Exit codes (or container reasons) that mean this failure whatever the message says.
    exit_codes: frozenset[int] = frozenset()
    reasons: frozenset[str] = frozenset()

    def matches(self, message: str, exit_code: int | None, reason: str | None) -> bool:
        return bool((self.pattern is not None and self.pattern.search(message))
                    or (exit_code is not None and exit_code in self.exit_codes)
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
    Hint("out-of-memory", None,
         "killed for memory (or by SIGKILL): raise resources.limits.memory or lower the batch size",
         exit_codes=frozenset({137}), reasons=frozenset({"OOMKilled"})),
)


def _clip(line: str) -> str:
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 1] + "…"


def _open_brackets(text: str) -> int:
    return sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")


def failure_line(message: str) -> str:
    """The line that says why: the last Python exception line of the message, else its last non-empty line.
    An exception whose text prints a value over several lines (an open bracket) is shortened to its first
    line, "…", and the line that closes the bracket."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[i]):
            text, depth = lines[i], _open_brackets(lines[i])
            for more in lines[i + 1:] if depth > 0 else []:
                depth += _open_brackets(more)
                if depth <= 0:
                    text += " … " + more
                    break
            return _clip(text)
    return _clip(lines[-1]) if lines else ""


def hint_for(message: str, exit_code: int | None = None, reason: str | None = None) -> Hint | None:
    """The first well-known failure the message, exit code or reason shows; None for anything else."""
    return next((h for h in HINTS if h.matches(message, exit_code, reason)), None)


def explain(message: str, exit_code: int | None = None, reason: str | None = None) -> str:
    """`: <exception line> (hint: <advice>)`, or the parts known, or "" when there is nothing to add."""
    line = failure_line(message)
    hint = hint_for(message, exit_code, reason)
    return (f": {line}" if line else "") + (f" (hint: {hint.advice})" if hint else "")
