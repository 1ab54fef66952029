"""The chief's training progress, as the operator reads it from the worker runtime's `/metrics`. Pure.
(What a figure means is `reconcile.chief_report`'s, which reads the chief's last report on success too.)

The operator asks the chief pod directly (its IP and the `tfjob-metrics` container port): workers need no
RBAC and write nothing to the API. `progress.poller` does the reading, at most one request per running job per
interval; this module says where to ask, what the answer means, and whether it is worth a status write.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tfjob_operator.api import JobProgress, constants
from tfjob_operator.reconcile.chief_report import SERIES


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
                if sample.name in SERIES:
                    values[SERIES[sample.name]] = float(sample.value)
    except ValueError:
        return {}
    return values


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
