"""The trainer's last progress figures, left in the container's termination message when it exits 0.

The operator reads the chief's `/metrics` once an interval (30 s by default), so a job shorter than that could
end with none of its figures read. Kubernetes keeps what a container writes to its terminationMessagePath (at
most 4 KiB) in the pod's status, `state.terminated.message`, after the process is gone: the operator copies
these figures from there into `status.progress` when the job succeeds. One JSON object, keyed by the `/metrics`
series the figures also go out as. Nothing is written on a failure, so that `terminationMessagePolicy:
FallbackToLogsOnError` still puts the log's tail there, which says why; except after a stall, when the supervisor
writes its error line and where the trainer was blocked (`stall.StallRecord`), for the operator to tell the worker
that stopped from those that only waited for it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from .reports import Report

#: Where the operator says the container's terminationMessagePath is (a local process kubelet maps it to a file).
PATH_ENV = "TFJOB_TERMINATION_MESSAGE_PATH"
#: Kubernetes' default terminationMessagePath; written without PATH_ENV only if it exists (in a container it does).
DEFAULT_PATH = "/dev/termination-log"


def message(report: Report) -> str | None:
    """The figures as one JSON line, or None before the first epoch (there is no progress to keep)."""
    if not report.started or not report.epoch:
        return None
    figures = {
        "tfjob_worker_started": 1,
        "tfjob_worker_epoch": report.epoch,
        "tfjob_worker_epochs": report.epochs,
        "tfjob_worker_global_step": report.global_step,
        "tfjob_worker_examples_per_second": report.examples_per_sec,
        "tfjob_worker_last_checkpoint_timestamp_seconds": report.last_checkpoint,
        "tfjob_worker_last_progress_timestamp_seconds": report.last_progress,
    }
    return json.dumps({k: v for k, v in figures.items() if v is not None}, separators=(",", ":"))


def write(report: Report | None, env: Mapping[str, str] = os.environ) -> bool:
    """Write the figures to the termination message file; False when there are none or nowhere to write."""
    text = message(report) if report is not None else None
    return text is not None and write_text(text + "\n", env)


def write_text(text: str, env: Mapping[str, str] = os.environ) -> bool:
    """Write the termination message (a stalled trainer's: the error line and its `stall.StallRecord`); False when
    there is nowhere to write."""
    path = env.get(PATH_ENV) or (DEFAULT_PATH if os.path.isfile(DEFAULT_PATH) else None)
    if path is None:
        return False
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        return False  # a read-only or missing path costs the message, never the job's exit code
    return True
