"""The worker's Prometheus `/metrics`, served by the supervisor from the trainer's latest report.

Served from the supervisor (no TensorFlow in it), so a scrape is answered even while the trainer is blocked
in C++. Every series carries `tfjob` (the TFJob's name; not `job`, which Prometheus reserves for the scrape
job), `replica_type` and `replica_index`; nothing is per step or per epoch in cardinality (the `metric`
label takes the compiled metrics' names: loss, accuracy, val_loss, ...).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .reports import STEP_BUCKETS, Report


@dataclass(frozen=True)
class Identity:
    """The labels every series carries."""

    job: str
    replica_type: str
    replica_index: str

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> Identity:
        """From the operator's TFJOB_NAME and the TF_CONFIG task (a laptop run: job "", worker 0)."""
        import json

        task: dict[str, object] = {}
        try:
            task = json.loads(env.get("TF_CONFIG") or "{}").get("task") or {}
        except (ValueError, AttributeError):
            pass
        return cls(job=env.get("TFJOB_NAME", ""), replica_type=str(task.get("type", "worker")),
                   replica_index=str(task.get("index", 0)))


class ReportCollector(Collector):
    """Turns the newest Report into metric families at scrape time."""

    def __init__(self, identity: Identity, stall_timeout: float) -> None:
        self.identity = identity
        self.stall_timeout = stall_timeout
        self._lock = threading.Lock()
        self._report = Report()

    def update(self, report: Report) -> None:
        with self._lock:
            self._report = report

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            r = self._report
        keys = ["tfjob", "replica_type", "replica_index"]
        ids = [self.identity.job, self.identity.replica_type, self.identity.replica_index]

        def gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
            if value is not None:
                family = GaugeMetricFamily(f"tfjob_worker_{name}", doc, labels=keys)
                family.add_metric(ids, value)
                yield family

        info = GaugeMetricFamily("tfjob_worker_info", "Constant 1; the run's strategy, collective and devices.",
                                 labels=[*keys, "strategy", "collective", "device_kind"])
        info.add_metric([*ids, r.strategy, r.collective, r.device_kind], 1)
        yield info
        yield from gauge("started", "1 once every peer is present and training began.", float(r.started))
        yield from gauge("world_size", "Processes training in sync.", r.world_size)
        yield from gauge("rank", "This process's rank (chief 0, then workers by index).", r.rank)
        yield from gauge("devices", "Accelerators (or CPU devices) this process trains on.", r.device_count)
        steps = CounterMetricFamily("tfjob_worker_steps", "Training steps this process completed.", labels=keys)
        steps.add_metric(ids, r.steps)
        yield steps
        yield from gauge("global_step", "Steps of the job so far, counting epochs done before a resume.",
                         r.global_step)
        yield from gauge("epoch", "Epoch in progress (1-based; 0 before the first).", r.epoch)
        yield from gauge("epochs", "Epochs the run will train.", r.epochs)
        yield from gauge("examples_per_second", "Global training examples per second (current epoch).",
                         r.examples_per_sec)
        if r.metrics:
            values = GaugeMetricFamily("tfjob_worker_metric", "Loss and compiled metrics, last value reported.",
                                       labels=[*keys, "metric"])
            for name, value in sorted(r.metrics.items()):
                values.add_metric([*ids, name], value)
            yield values
        yield from gauge("last_checkpoint_timestamp_seconds", "When the last checkpoint was written.",
                         r.last_checkpoint)
        yield from gauge("last_progress_timestamp_seconds", "Last training step, evaluation step or checkpoint.",
                         r.last_progress)
        yield from gauge("resized_from_replicas", "Present when this run resumed a backup saved at another width: "
                         "the replicas it was saved at.", r.resized_from)
        yield from gauge("stall_timeout_seconds", "The stall watchdog's timeout (0: off).", self.stall_timeout)
        cumulative, buckets = 0, []
        for bound, count in zip([*map(repr, STEP_BUCKETS), "+Inf"], r.step_buckets, strict=False):
            cumulative += count
            buckets.append((bound, cumulative))
        histogram = HistogramMetricFamily("tfjob_worker_step_seconds", "Time between consecutive training steps.",
                                          labels=keys)
        histogram.add_metric(ids, buckets, r.step_seconds_sum)
        yield histogram


def serve(port: int, collector: ReportCollector, host: str = "0.0.0.0") -> bool:
    """Start `/metrics` on a daemon thread; False (and a warning on stderr) if the port cannot be bound."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        from .progress import error

        error(f"warning: metrics endpoint not started on port {port}: {exc}")
        return False
    return True
