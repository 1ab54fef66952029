"""Exit codes of `python -m tfjob_worker`: the failure contract with the operator.

This module is the one table of exit codes: the operator (`tfjob_operator.reconcile`) imports it to name codes in
its messages and to decide which failures are retryable, so the two sides cannot drift apart. It imports nothing.

Codes 1-127 mean "your code or configuration is broken" and are not retried. Codes >= 128 mean
the process was stopped by something outside the user's code; the operator's `ExitCode` restart
policy restarts the whole gang, which then resumes from the backup directory.

| code | name            | meaning                                                                 |
|------|-----------------|-------------------------------------------------------------------------|
| 0    | SUCCESS         | training finished; the chief wrote result.json and the SavedModel       |
| 1    | USER_ERROR      | error in user code or configuration (bad TF_CONFIG, bad entry point)     |
| 2    | USAGE_ERROR     | command-line usage error (argparse)                                      |
| 143  | PREEMPTED       | SIGTERM: all workers stopped after one agreed step (backed up if it fit) |
| 200  | PEER_LOST       | a peer went away: UnavailableError, DeadlineExceededError, aborted collective |
| 201  | STARTUP_TIMEOUT | not all peers were present within --startup-timeout                      |
| 202  | STALLED         | the trainer made no progress for --stall-timeout (the stall watchdog)     |
"""

from __future__ import annotations

SUCCESS = 0
USER_ERROR = 1
USAGE_ERROR = 2
PREEMPTED = 143
PEER_LOST = 200
STARTUP_TIMEOUT = 201
STALLED = 202

#: The code of a process killed by SIGKILL (the kubelet after the grace period, kill -9, the OOM killer: only the
#: container's reason OOMKilled says it was memory); not ours to exit with.
KILLED = 137

RETRYABLE = frozenset({PREEMPTED, PEER_LOST, STARTUP_TIMEOUT, STALLED})
#: Codes that are a consequence of another pod's failure: the operator names the cause, not these, first.
PEER_FAILURE = frozenset({PEER_LOST, STARTUP_TIMEOUT})
#: What a failed pod's exit code means, as the operator's messages say it ("exited with code 143 (SIGTERM/preempted)").
MEANINGS = {
    PREEMPTED: "SIGTERM/preempted",
    KILLED: "SIGKILL",
    PEER_LOST: "peer lost",
    STARTUP_TIMEOUT: "start-up timeout",
    STALLED: "training stalled",
}

# TF error classes (tf.errors.*) that mean "a peer or the network failed", not "the program is wrong".
# Matched by class name so this module stays importable without TensorFlow.
_PEER_LOST_ERRORS = frozenset({"UnavailableError", "DeadlineExceededError", "AbortedError"})
# A collective aborted by MWMS's health check surfaces as CancelledError on the other pending ops.
_PEER_LOST_MESSAGE_HINTS = (
    "collective ops is aborted",
    "cluster check alive failed",
    "is down",
    "socket closed",
    "connection reset",
    "failed to connect",
)


def is_retryable(code: int) -> bool:
    """True when the operator should restart the gang for this exit code."""
    return code >= 128


def classify_exception(exc: BaseException) -> int:
    """Map an exception raised while training to the exit code the process should end with."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        if names & _PEER_LOST_ERRORS:
            return PEER_LOST
        if "OpError" in names or "CancelledError" in names:
            message = str(current).lower()
            if any(hint in message for hint in _PEER_LOST_MESSAGE_HINTS):
                return PEER_LOST
        current = current.__cause__ or current.__context__
    return USER_ERROR
