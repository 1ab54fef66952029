"""What watching training costs: a scrape of a worker's /metrics, and the trainer's per-step report.

The endpoint is the worker runtime's own (tfjob_worker.metrics.serve on a ReportCollector holding a report
with the usual compiled metrics), scraped over HTTP the way Prometheus or the operator does, one connection
per scrape. The per-step figure is Reporter.step_end, the only work the trainer adds to every step.

    python bench/worker_metrics.py [--scrapes 2000] [--steps 200000]
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import time

from tfjob_worker.metrics import Identity, ReportCollector, serve
from tfjob_worker.reports import STEP_BUCKETS, Report, Reporter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()

    collector = ReportCollector(Identity("mnist", "worker", "0"), stall_timeout=300)
    collector.update(Report(started=True, trains=True, rank=0, world_size=8, strategy="MultiWorkerMirroredStrategy",
                            collective="NCCL", device_kind="gpu", device_count=8, steps=12345, global_step=12345,
                            epoch=3, epochs=10, examples_per_sec=25000.0, last_checkpoint=time.time(),
                            last_progress=time.time(), metrics={"loss": 0.3, "accuracy": 0.9, "val_loss": 0.35,
                                                                "val_accuracy": 0.88},
                            step_buckets=[i * 10 for i in range(len(STEP_BUCKETS) + 1)], step_seconds_sum=1234.5))
    port = free_port()
    assert serve(port, collector, host="127.0.0.1")
    times, size = [], 0
    for _ in range(args.scrapes):
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
        conn.close()
        times.append(time.perf_counter() - started)
        size = len(body)
    times.sort()
    p50, p99 = statistics.median(times) * 1e3, times[int(len(times) * 0.99)] * 1e3

    reporter = Reporter(fd=None)
    reporter.describe(trains=True, rank=0, world_size=8, strategy="MWMS", collective="NCCL", device_kind="gpu",
                      device_count=8, epochs=10, steps_per_epoch=args.steps)
    reporter.epoch_begin(1)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        reporter.step_end(step)
    per_step = (time.perf_counter() - started) / args.steps * 1e6

    print(f"scrape of /metrics: {size} bytes, p50 {p50:.2f} ms, p99 {p99:.2f} ms over {args.scrapes} scrapes "
          "(new connection each, same machine)")
    print(f"trainer's per-step report (Reporter.step_end): {per_step:.2f} µs per step over {args.steps} steps")
    print(f"SUMMARY scrape_p50={p50:.2f}ms scrape_p99={p99:.2f}ms scrape_bytes={size} step_cost={per_step:.2f}us")


if __name__ == "__main__":
    main()
