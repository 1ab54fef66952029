"""The chief's training progress, as the operator reads it from the worker runtime's `/metrics`. Pure.

The operator asks the chief pod directly (its IP and the `tfjob-metrics` container port): workers need no
RBAC and write nothing to the API. `progress.poller` does the reading, at most one request per running job per
interval; this module says where to ask, what the answer means, and whether it is worth a status write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tfjob_operator import constants
from tfjob_operator.api import JobProgress
from tfjob_operator.times import format_time

#: Series of tfjob_worker.metrics read into JobProgress.
_SERIES = {
    "tfjob_worker_epoch": "epoch",
    "tfjob_worker_epochs": "epochs",
    "tfjob_worker_global_step": "step",
    "tfjob_worker_examples_per_second": "examples_per_second",
    "tfjob_worker_last_checkpoint_timestamp_seconds": "last_checkpoint",
    "tfjob_worker_last_progress_timestamp_seconds": "last_progress",
    "tfjob_worker_started": "started",
}


def metrics_url(pod: Mapping[str, Any]) -> str | None:
    """`http://<pod IP>:<tfjob-metrics port>/metrics`, or None while the pod has no IP or declares no such port."""
    ip = (pod.get("status") or {}).get("podIP")
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == constants.METRICS_PORT_NAME and ip:
                host = f"[{ip}]" if ":" in ip else ip
                return f"http://{host}:{port.get('containerPort')}/metrics"
    return None


def read_samples(text: str) -> dict[str, float]:
    """The progress series of a worker's /metrics text (unknown series ignored; bad text reads as nothing)."""
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _SERIES:
                    values[_SERIES[sample.name]] = float(sample.value)
    except ValueError:
        return {}
    return values


def final_progress(message: str, now: datetime) -> JobProgress | None:
    """JobProgress from the figures a chief left in its termination message on exit 0 (tfjob_worker.termination);
    None for any other message (a log tail, or nothing)."""
    try:
        figures = json.loads(message)
    except ValueError:
        return None
    if not isinstance(figures, dict):
        return None
    values = {_SERIES[k]: float(v) for k, v in figures.items()
              if k in _SERIES and isinstance(v, int | float) and not isinstance(v, bool)}
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


def worth_writing(old: JobProgress | None, new: JobProgress | None) -> bool:
    """Write only when a figure moved (updatedAt alone is not news): an idle job costs no status writes."""
    if new is None:
        return False
    if old is None:
        return True
    return old.model_dump(exclude={"updatedAt"}) != new.model_dump(exclude={"updatedAt"})


def seconds_since_progress(values: Mapping[str, float], now: datetime) -> float | None:
    """How long the chief has made no progress (train step, eval step, checkpoint), if it said."""
    last = values.get("last_progress")
    return max(now.timestamp() - last, 0.0) if last else None


def chief_pod(pods: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The running pod labelled as the job's chief (the chief, or worker 0 without one)."""
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if (labels.get(constants.LABEL_JOB_ROLE) == constants.ROLE_CHIEF
                and (pod.get("status") or {}).get("phase") == "Running"
                and not (pod.get("metadata") or {}).get("deletionTimestamp")):
            return pod
    return None
