"""Status writes for progress at scale: N running TFJobs whose chiefs serve worker metrics, one operator.

Each job's single pod serves the worker runtime's real /metrics (tfjob_worker.metrics) from a scripted
trainer (no TensorFlow) that takes a step every 0.5 s for `--train` seconds, then holds still. The operator
reads every running chief once per `--interval` and writes status.progress only when a figure moved, so the
bound is N / interval writes per second while they train and ~0 once they are idle. The figures come from
the operator's own counters (tfjob_progress_reads_total, tfjob_progress_writes_total).

    python bench/progress_scale.py [--jobs 100] [--interval 5] [--train 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from operator_harness import Operator, free_port, local_cluster, py, replica  # noqa: E402
from polling import poll_until  # noqa: E402


def chief(train_seconds: float) -> list[str]:
    return py(f"""
import os, time
from tfjob_worker.metrics import Identity, ReportCollector, serve
from tfjob_worker.reports import Report
served = ReportCollector(Identity.from_env(os.environ), 0)
serve(int(os.environ['TFJOB_WORKER_METRICS_PORT']), served, host='127.0.0.1')
start, step = time.time(), 0
while time.time() - start < {train_seconds}:
    step += 1
    served.update(Report(started=True, trains=True, epoch=1, epochs=1, global_step=step, examples_per_sec=100.0 + step,
                         last_progress=time.time()))
    time.sleep(0.5)
time.sleep(3600)
""")


def counters(port: int) -> tuple[float, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {line.split()[0]: float(line.split()[-1]) for line in text.splitlines()
              if line.startswith("tfjob_progress_")}
    return values.get('tfjob_progress_reads_total{result="ok"}', 0.0), values.get("tfjob_progress_writes_total", 0.0)


def rate(port: int, seconds: float) -> tuple[float, float]:
    reads0, writes0 = counters(port)
    time.sleep(seconds)
    reads1, writes1 = counters(port)
    return (reads1 - reads0) / seconds, (writes1 - writes0) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--train", type=float, default=90.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, local_cluster(Path(tmp), nodes="2x{cpu:512,memory:2Ti,pods:500}") as c:
        port = free_port()
        op = Operator(c.kubeconfig, Path(tmp) / "operator.log", TFJOB_PROGRESS_INTERVAL=str(args.interval),
                      TFJOB_METRICS_PORT=str(port), TFJOB_METRICS_HOST="127.0.0.1").start()
        try:
            started = time.monotonic()
            names = [c.submit({"Worker": replica(chief(args.train), 1)}, name=f"p{i:03d}") for i in range(args.jobs)]
            with_progress = lambda: sum(bool(c.status(n).get("progress")) for n in names)
            poll_until(lambda: with_progress() == len(names), 240, interval=2)
            ready = time.monotonic() - started
            missing = [f"{n}: {c.status(n).get('state')}" for n in names if not c.status(n).get("progress")]
            if missing:
                print(f"  {len(missing)} jobs without progress after {ready:.0f} s: {', '.join(missing[:5])}")
            window = min(3 * args.interval, max(args.train - ready - args.interval, args.interval))
            reads, writes = rate(port, window)
            print(f"{args.jobs} jobs, progress interval {args.interval:g} s: {args.jobs - len(missing)} had "
                  f"status.progress {ready:.0f} s after submit")
            print(f"  training: {reads:.1f} chief reads/s, {writes:.1f} status writes/s over {window:.0f} s "
                  f"(bound {args.jobs / args.interval:.1f}/s)")
            # the last chief started by `ready` and trains `--train` s from its own start
            remaining = ready + args.train + 2 * args.interval - (time.monotonic() - started)
            if remaining > 0:
                time.sleep(remaining)
            idle_reads, idle_writes = rate(port, 2 * args.interval)
            print(f"  idle (figures still): {idle_reads:.1f} reads/s, {idle_writes:.2f} writes/s")
            print(f"SUMMARY jobs={args.jobs} interval={args.interval:g}s with_progress={args.jobs - len(missing)}/"
                  f"{args.jobs} writes_per_s_training={writes:.1f} writes_bound={args.jobs / args.interval:.1f} "
                  f"writes_per_s_idle={idle_writes:.2f} reads_per_s_idle={idle_reads:.1f}")
        finally:
            op.stop()


if __name__ == "__main__":
    main()
