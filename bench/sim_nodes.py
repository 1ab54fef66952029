"""Simulated nodes at scale: what 1,000 sim nodes and thousands of sim pods cost the local control plane.

The plane runs in a child process (this script with `--serve`: a LocalCluster with `--nodes` sim nodes and
`--speed`), so its CPU and RSS are its own; this process is the client (the official Python client, 8
threads creating pods). Phases:

1. start: the plane registers the nodes (wall time until it serves);
2. idle: `--window` seconds with no pods: plane CPU (% of one core), RSS, requests per second by kind;
3. burst: `--pods` pods (1 GPU each, sim-duration `--minutes` simulated minutes) created; wall time until every
   one is Running, plane CPU over the burst;
4. running: `--window` seconds with every pod Running: CPU, RSS, requests per second;
5. finish: until every pod has Succeeded; the kubelet's pods/status writes per pod over the whole run (one
   per transition: Running, then Succeeded).

Prints the figures and a one-line SUMMARY (JSON).

    .venv/bin/python bench/sim_nodes.py [--nodes 1000] [--pods 2000] [--speed 60] [--minutes 90] [--window 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, watch

NAMESPACE = "default"


# -- the plane (child process) -------------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """Run the plane; on stdin `report`, print the requests served since the last report by kind (JSON)."""
    from kubelocal.cluster import LocalClusterThread

    spec = f"{args.nodes}x{{gpu:8,cpu:96,memory:1Ti,pods:110,sim:true}}"
    with tempfile.TemporaryDirectory() as workdir, \
            LocalClusterThread(nodes=spec, workdir=Path(workdir), sim_speed=args.speed, start_timeout=600) as c:
        c.apiserver.manage_gc()  # as `tfjob local up` does once started
        print(json.dumps({"url": c.url}), flush=True)
        for line in sys.stdin:
            if line.strip() != "report":
                break
            records = c.apiserver.requests[:]
            del c.apiserver.requests[:len(records)]
            counts = Counter(f"{r.user_agent.split('/')[0]} {r.verb} {r.resource}"
                             f"{'/' + r.subresource if r.subresource else ''}" for r in records)
            per_pod = Counter(r.name for r in records if r.resource == "pods" and r.subresource == "status"
                              and r.user_agent.startswith("tfjob-local-kubelet"))
            print(json.dumps({"counts": counts, "kubelet_status_writes": sum(per_pod.values()),
                              "pods_written": len(per_pod), "threads": thread_cpu()}), flush=True)


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each named thread of this process (the API server's, the components')."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for t in psutil.Process().threads():
        name = names.get(t.id, "other")
        out[name] = out.get(name, 0.0) + t.user_time + t.system_time
    return out


class Plane:
    def __init__(self, args: argparse.Namespace) -> None:
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--nodes", str(args.nodes), "--speed", str(args.speed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.ps = psutil.Process(self.proc.pid)
        line = self.stdout.readline()
        if not line:
            raise RuntimeError("the plane did not start")
        self.url = json.loads(line)["url"]
        #: The kubelet's pods/status writes over every report so far.
        self.status_writes = 0

    def report(self) -> dict[str, Any]:
        """Requests served since the last report."""
        self.stdin.write("report\n")
        self.stdin.flush()
        report = dict(json.loads(self.stdout.readline()))
        self.status_writes += report["kubelet_status_writes"]
        return report

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def rss_mb(self) -> float:
        return float(self.ps.memory_info().rss / 2**20)

    def close(self) -> None:
        self.stdin.write("stop\n")
        self.stdin.flush()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def window(plane: Plane, seconds: float) -> dict[str, Any]:
    """Plane CPU (% of one core), RSS and requests per second over `seconds` of nothing asked of it."""
    before = plane.report()["threads"]
    cpu0, t0 = plane.cpu(), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = plane.cpu(), time.monotonic()
    report = plane.report()
    wall = t1 - t0
    threads = {name: round(100 * (cpu - before.get(name, 0.0)) / wall, 1) for name, cpu in report["threads"].items()}
    per_s = {k: round(v / wall, 1) for k, v in sorted(report["counts"].items(), key=lambda kv: -kv[1])}
    return {"cpu_pct": round(100 * (cpu1 - cpu0) / wall, 1), "rss_mb": round(plane.rss_mb()),
            "requests_per_s": round(sum(report["counts"].values()) / wall, 1), "thread_cpu_pct": threads,
            "by_kind_per_s": per_s}


def sim_pod(i: int, minutes: float) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"sim-{i:05d}", "annotations": {"kubelocal.dev/sim-duration": f"{minutes:g}m"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "python:3.11", "command": ["true"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def watch_phases(api: client.ApiClient, want: int, phases: dict[str, str], done: dict[str, threading.Event],
                 stop: threading.Event) -> None:
    """Track each pod's phase; set done[phase] once `want` pods have reached it (or passed it)."""
    core = client.CoreV1Api(api)
    order = {"Pending": 0, "Running": 1, "Succeeded": 2, "Failed": 2}
    w = watch.Watch()
    while not stop.is_set():
        for event in w.stream(core.list_namespaced_pod, NAMESPACE, timeout_seconds=5, _preload_content=True):
            pod = event["object"]
            phases[pod.metadata.name] = pod.status.phase or "Pending"
            for phase, flag in done.items():
                if sum(order.get(p, 0) >= order[phase] for p in phases.values()) >= want:
                    flag.set()
            if stop.is_set():
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--speed", type=float, default=60.0, help="simulated seconds per wall second")
    parser.add_argument("--minutes", type=float, default=90.0, help="each pod's simulated run time")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of each idle measurement")
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return

    t0 = time.monotonic()
    plane = Plane(args)
    started = time.monotonic() - t0
    print(f"plane up with {args.nodes} sim nodes in {started:.1f} s (RSS {plane.rss_mb():.0f} MB)", flush=True)
    results: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "speed": args.speed,
                               "start_s": round(started, 1)}
    try:
        idle = window(plane, args.window)
        print(f"idle: {json.dumps(idle)}", flush=True)
        config = client.Configuration()
        config.host = plane.url
        api = client.ApiClient(config)
        core = client.CoreV1Api(api)
        phases: dict[str, str] = {}
        done = {"Running": threading.Event(), "Succeeded": threading.Event()}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_phases, args=(api, args.pods, phases, done, stop), daemon=True)
        watcher.start()
        plane.report()
        cpu0, b0 = plane.cpu(), time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: core.create_namespaced_pod(NAMESPACE, sim_pod(i, args.minutes),
                                                               _preload_content=False), range(args.pods)))
        created = time.monotonic() - b0
        if not done["Running"].wait(timeout=600):
            raise SystemExit(f"not every pod Running after 600 s: {Counter(phases.values())}")
        burst = time.monotonic() - b0
        burst_cpu = 100 * (plane.cpu() - cpu0) / burst
        print(f"burst: {args.pods} pods created in {created:.1f} s, all Running after {burst:.1f} s, "
              f"plane CPU {burst_cpu:.0f}%, RSS {plane.rss_mb():.0f} MB", flush=True)
        running = window(plane, args.window)
        print(f"running: {json.dumps(running)}", flush=True)
        wait = args.minutes * 60 / args.speed + 300
        if not done["Succeeded"].wait(timeout=wait):
            raise SystemExit(f"not every pod Succeeded after {wait:.0f} s: {Counter(phases.values())}")
        finished = time.monotonic() - b0
        plane.report()
        stop.set()
        results.update({
            "idle_cpu_pct": idle["cpu_pct"], "idle_rss_mb": idle["rss_mb"], "idle_req_per_s": idle["requests_per_s"],
            "created_s": round(created, 1), "all_running_s": round(burst, 1), "burst_cpu_pct": round(burst_cpu),
            "running_cpu_pct": running["cpu_pct"], "running_rss_mb": running["rss_mb"],
            "running_req_per_s": running["requests_per_s"], "all_succeeded_s": round(finished, 1),
            "kubelet_status_writes_per_pod": round(plane.status_writes / args.pods, 2)})
        api.close()
    finally:
        plane.close()
    print("SUMMARY " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
