"""The chief's report as the operator reads it: the progress series of the worker runtime (`tfjob_worker.metrics`)
and what they make of `status.progress`, from its `/metrics` (`progress.chief_metrics`, the poller's) or from the
figures it leaves in its termination message on exit 0 (`success_policy`). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from tfjob_operator.api import JobProgress
from tfjob_operator.api.times import format_time

#: Series of tfjob_worker.metrics read into JobProgress.
SERIES = {
    "tfjob_worker_epoch": "epoch",
    "tfjob_worker_epochs": "epochs",
    "tfjob_worker_global_step": "step",
    "tfjob_worker_examples_per_second": "examples_per_second",
    "tfjob_worker_last_checkpoint_timestamp_seconds": "last_checkpoint",
    "tfjob_worker_last_progress_timestamp_seconds": "last_progress",
    "tfjob_worker_started": "started",
}


def final_progress(message: str, now: datetime) -> JobProgress | None:
    """JobProgress from the figures a chief left in its termination message on exit 0 (tfjob_worker.termination);
    None for any other message (a log tail, or nothing)."""
    try:
        figures = json.loads(message)
    except ValueError:
        return None
    if not isinstance(figures, dict):
        return None
    values = {SERIES[k]: float(v) for k, v in figures.items()
              if k in SERIES and isinstance(v, int | float) and not isinstance(v, bool)}
    return to_progress(values, now)


def _time(seconds: float | None) -> str | None:
    return format_time(datetime.fromtimestamp(seconds, UTC)) if seconds else None


def to_progress(values: Mapping[str, float], now: datetime) -> JobProgress | None:
    """JobProgress from read_samples(); None before the chief has started training."""
    if not values.get("started") or not values.get("epoch"):
        return None
    epoch, epochs, step = int(values["epoch"]), int(values.get("epochs", 0)) or None, int(values.get("step", 0))
    rate = values.get("examples_per_second")
    summary = f"epoch {epoch}/{epochs} step {step}" if epochs else f"epoch {epoch} step {step}"
    return JobProgress(epoch=epoch, epochs=epochs, step=step,
                       examplesPerSecond=round(rate, 1) if rate is not None else None,
                       lastCheckpointTime=_time(values.get("last_checkpoint")),
                       updatedAt=format_time(now), summary=summary)
