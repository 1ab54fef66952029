"""The upstream plane's start-up and memory: `--runs` starts of an UpstreamCluster (one process node, the pod
network where it can be made), each timed from start() until every process is healthy and the node agents serve,
then the resident memory of each of its processes after `--settle` idle seconds. Warm: the binaries are built
(`make upstream`) and the page cache holds them after the first run.

Prints each run and a one-line `SUMMARY key=value ...`.

    .venv/bin/python bench/upstream_start.py [--runs 3] [--settle 10] [--pod-network auto]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from kubelocal.upstream.cluster import UpstreamClusterThread

MIB = 1024 * 1024


def python_rss() -> int:
    """This process's own RSS: the node agents, DNS, relays and egress proxy live in it."""
    return int(psutil.Process().memory_info().rss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--pod-network", default="auto")
    args = parser.parse_args()
    ready, apiserver, rss = [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="upstream-start-") as tmp:
            started = time.monotonic()
            with UpstreamClusterThread(workdir=Path(tmp), nodes="1x{cpu:4}", pod_network=args.pod_network) as c:
                took = time.monotonic() - started
                timings = dict(c.cluster.plane.timings)
                time.sleep(args.settle)  # idle, as a plane waiting for its first job
                sizes = {**c.cluster.plane.rss(), "python (kubelet, DNS, relays)": python_rss()}
                stopping = time.monotonic()
            stopped = time.monotonic() - stopping
        ready.append(took)
        apiserver.append(timings["kube-apiserver"])
        rss.append(sizes)
        print(f"run {run + 1}: ready {took:.1f} s (etcd {timings['etcd']:.1f} s, kube-apiserver "
              f"{timings['kube-apiserver']:.1f} s, all four healthy {timings['ready']:.1f} s), "
              f"stop {stopped:.1f} s; RSS "
              + ", ".join(f"{k} {v / MIB:.0f} MiB" for k, v in sizes.items()), flush=True)
    last = rss[-1]
    print("SUMMARY " + " ".join([f"ready_median_s={statistics.median(ready):.1f}",
                                 f"apiserver_median_s={statistics.median(apiserver):.1f}",
                                 *(f"rss_{k.split()[0].replace('-', '_')}_mib={v / MIB:.0f}" for k, v in last.items()),
                                 f"rss_plane_mib={sum(last.values()) / MIB:.0f}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
