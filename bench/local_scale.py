"""Local control plane at scale: what one create costs as objects pile up, and whether reads wait on a burst.

The control plane runs as `tfjob local up` does, in its own process (4 nodes: API server, scheduler
stand-in and process kubelet on one event loop); this process is the client, with the official Python
client (responses not turned into models, so the figures are the control plane's and HTTP's, not the
client's model building).

1. fresh: the floor first, the same client's plain create loop (`--floor` ConfigMaps one after another, scaled
   to `--pods`: what any create costs on this plane and machine); then one client creates `--pods` gated pods
   one after another (nothing schedules or runs them);
   ms per create for each bucket of `--bucket` pods; a watch (official client) records when each ADDED
   arrives: delivery = create sent -> event received.
2. after-finished: a new control plane runs `--finished` pods (`true`, exit 0) to completion, then the same
   gated creates.
3. burst: a new control plane; 4 clients create `--burst-jobs` x 4 ungated pods that run and exit at once
   (the pods of the operator's 1000 x 4 benchmark) while another client GETs one pod every 10 ms; the
   GET latency p50/p99 over the burst, until every pod has finished.

Prints figures and a one-line summary (bench/run_all.py judges them against the goals); writes a plot of ms
per create against the pods already there.

    .venv/bin/python bench/local_scale.py [--pods 10000] [--finished 2000] [--burst-jobs 1000] [--plot PATH]
                                          [--phases fresh,after,burst]

`--phases` runs some of the three (the summary then carries only their figures; the plot needs fresh and after);
`--budget` skips phase 3 or 2 when it would overrun the time given. The phases run in the order 1, 3, 2 (the table
of bench/run_all.py judges phase 3's figure; phase 2 only feeds the plot).
A SUMMARY line follows each phase with the figures so far; the last one has them all.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import figures
import psutil
from kubernetes import client, config, watch

from tfjob_operator.client.local.processes import stop_process

NODES = "4x{cpu:64,memory:256Gi,pods:5000}"
NAMESPACE = "default"
GATE = [{"name": "bench.example.com/hold"}]
#: Drawn on the plot as a reference; the goals themselves are judged by bench/run_all.py's table.
FLAT_RATIO = 1.2
PHASES = ("fresh", "after", "burst")
#: Wall of phases 2 and 3 over phase 1's on 2 cores (phase 3 per 1000 x 4 pods: each pod a process, a
#: TokenRequest and its status writes): what --budget judges them by.
PHASE_COST = {"after": 1.5, "burst": 3.8}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


@contextmanager
def control_plane(workdir: Path) -> Iterator[tuple[client.ApiClient, Path, psutil.Process]]:
    """`tfjob local up` in its own process; the official client configured from the kubeconfig it writes."""
    kubeconfig = workdir / "kubeconfig"
    log = (workdir / "local-up.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfjob_operator", "local", "up", "--port", "0", "--nodes", NODES,
         "--workdir", str(workdir / "wd"), "--kubeconfig", str(kubeconfig)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while b"Press Ctrl-C" not in (workdir / "local-up.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tfjob local up did not start; see {workdir / 'local-up.log'}")
            time.sleep(0.1)
        api = config.new_client_from_config(str(kubeconfig))
        api.user_agent = "local-scale-bench"
        yield api, kubeconfig, psutil.Process(proc.pid)
        api.close()
    finally:
        stop_process(proc, 60)
        log.close()


def pod_body(name: str, *, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "local", "command": ["true"]}]}
    if gated:
        spec["schedulingGates"] = GATE
    labels = {"bench": "local-scale", "gated": str(gated).lower()}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": spec}


def watch_added(api: client.ApiClient, stop: Path, out: dict[str, float]) -> None:
    """When each pod's ADDED event arrives on an official-client watch, until the file `stop` exists."""
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_pod(NAMESPACE, limit=1).metadata.resource_version
    stop.with_suffix(".ready").touch()
    while not stop.exists():
        for event in watch.Watch().stream(core.list_namespaced_pod, NAMESPACE, resource_version=rv,
                                          timeout_seconds=2, deserialize=False):
            obj = event["object"]
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] == "ADDED":
                out.setdefault(obj["metadata"]["name"], time.monotonic())


def get_latencies(api: client.ApiClient, name: str, stop: Path, out: list[float]) -> None:
    """GET one pod every 10 ms until the file `stop` exists; ms per GET."""
    core = client.CoreV1Api(api)
    stop.with_suffix(".ready").touch()
    while not stop.exists():
        t0 = time.perf_counter()
        core.read_namespaced_pod(name, NAMESPACE, _preload_content=False).read()
        out.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.01)


@contextmanager
def helper(kind: str, kubeconfig: Path, workdir: Path) -> Iterator[Path]:
    """A measuring client in its own process (its threads must not compete for this process's GIL);
    yields the file where it writes its figures once the context ends."""
    stop, out = workdir / f"{kind}.stop", workdir / f"{kind}.json"
    proc = subprocess.Popen([sys.executable, __file__, "--helper", kind, "--kubeconfig", str(kubeconfig),
                             "--stop", str(stop), "--out", str(out)])
    deadline = time.monotonic() + 30
    while not stop.with_suffix(".ready").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    try:
        yield out
    finally:
        stop.touch()
        proc.wait(60)


def run_helper(kind: str, kubeconfig: Path, stop: Path, out: Path) -> int:
    api = config.new_client_from_config(str(kubeconfig))
    result: Any
    if kind == "watch":
        result = {}
        watch_added(api, stop, result)
    else:
        result = []
        get_latencies(api, "probe", stop, result)
    out.write_text(json.dumps(result))
    return 0


@dataclass
class Creates:
    """Per bucket: wall ms per create (as the client sees it), the control plane's and the client's CPU ms."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    seconds: float = 0.0
    sent: dict[str, float] = field(default_factory=dict)


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def gated_creates(api: client.ApiClient, server: psutil.Process, count: int, bucket: int, prefix: str) -> Creates:
    """One client creating gated pods one after another."""
    core = client.CoreV1Api(api)
    out = Creates()
    started = bucket_start = time.perf_counter()
    me = psutil.Process()
    cpu_start, mine_start = cpu_seconds(server), cpu_seconds(me)
    for i in range(count):
        name = f"{prefix}-{i:05d}"
        out.sent[name] = time.monotonic()
        core.create_namespaced_pod(NAMESPACE, pod_body(name, gated=True), _preload_content=False).read()
        if (i + 1) % bucket == 0:
            now, cpu, mine = time.perf_counter(), cpu_seconds(server), cpu_seconds(me)
            out.wall.append((now - bucket_start) * 1000 / bucket)
            out.cpu.append((cpu - cpu_start) * 1000 / bucket)
            out.client_cpu.append((mine - mine_start) * 1000 / bucket)
            bucket_start, cpu_start, mine_start = now, cpu, mine
    out.seconds = time.perf_counter() - started
    return out


def plain_creates(api: client.ApiClient, count: int) -> float:
    """Seconds for the same client to create `count` ConfigMaps one after another: the plain create loop, the floor
    of any create on this control plane and machine (no pod defaulting, validation, scheduler or kubelet)."""
    core = client.CoreV1Api(api)
    started = time.perf_counter()
    for i in range(count):
        body = {"metadata": {"name": f"floor-{i:05d}", "labels": {"bench": "local-scale"}}, "data": {"a": "b"}}
        core.create_namespaced_config_map(NAMESPACE, body, _preload_content=False).read()
    return time.perf_counter() - started


def succeeded_count(core: client.CoreV1Api) -> int:
    """Pods Succeeded, from one small page: an equality field selector (indexed) with limit=1, and the
    server's remainingItemCount (a scan with `!=` would cost the server what the bench measures)."""
    page = json.loads(core.list_namespaced_pod(NAMESPACE, label_selector="bench=local-scale,gated=false", limit=1,
                                               field_selector="status.phase=Succeeded",
                                               _preload_content=False).read())
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


def run_to_completion(api: client.ApiClient, prefix: str, jobs: int, workers: int, timeout: float) -> float:
    """`workers` clients create `jobs` pods each (ungated, exit 0 at once); seconds until all finished."""
    started = time.monotonic()

    def creator(w: int) -> None:
        core = client.CoreV1Api(api)
        for j in range(jobs):
            core.create_namespaced_pod(NAMESPACE, pod_body(f"{prefix}-{j:04d}-{w}", gated=False),
                                       _preload_content=False).read()

    threads = [threading.Thread(target=creator, args=(w,), daemon=True) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while succeeded_count(core) < jobs * workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{prefix}: not every pod finished within {timeout:g}s")
        time.sleep(2.0)
    return time.monotonic() - started


def plot(path: Path, bucket: int, fresh: Creates, after: Creates, finished: int) -> None:
    fig, (wall, cpu) = figures.subplots(1, 2, figsize=(11, 4), sharex=True)
    for ax, what, label in ((wall, "wall", "ms per create, as the client sees it"),
                            (cpu, "cpu", "control plane CPU ms per create")):
        for run, name, marker in ((fresh, "fresh control plane", "o"),
                                  (after, f"after {finished:,} pods ran and finished", "s")):
            values = getattr(run, what)
            ax.plot([(i + 0.5) * bucket for i in range(len(values))], values, marker=marker, label=name)
        ax.axhline(getattr(fresh, what)[0] * FLAT_RATIO, color="grey", linestyle="--", linewidth=1,
                   label=f"{FLAT_RATIO} x first bucket")
        ax.set_xlabel("gated pods already created")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    wall.legend(loc="best")
    figures.save(fig, path, f"Local control plane: one pod create vs objects stored (mean per bucket of {bucket})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000, help="gated pods to create (default 10000)")
    parser.add_argument("--bucket", type=int, default=500)
    parser.add_argument("--finished", type=int, default=2000, help="pods that run first in phase 2 (default 2000)")
    parser.add_argument("--burst-jobs", type=int, default=1000, help="burst of N x 4 pods in phase 3")
    parser.add_argument("--floor", type=int, default=2000,
                        help="ConfigMaps of the plain create loop in phase 1, before the pods (the floor)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--budget", type=float, default=0.0, metavar="SECONDS",
                        help="wall time for the bench: a later phase that would overrun it (judged by phase 1's "
                        "time) is skipped (0: no limit)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated, of {', '.join(PHASES)} (default: all three)")
    parser.add_argument("--plot", type=Path, default=Path(__file__).parent / "results" / "local_scale.png")
    parser.add_argument("--helper", choices=("watch", "get"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.helper:
        return run_helper(args.helper, args.kubeconfig, args.stop, args.out)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        parser.error(f"--phases: unknown phase {', '.join(unknown) or '(none)'}; choose from {', '.join(PHASES)}")
    root = Path(tempfile.mkdtemp(prefix="local-scale-"))
    print(f"local_scale: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; control plane "
          f"`tfjob local up --nodes '{NODES}'` in its own process; official Python client", flush=True)

    def show(run: Creates) -> None:
        print("     wall ms/create:              " + " ".join(f"{v:.2f}" for v in run.wall), flush=True)
        print("     control plane cpu ms/create: " + " ".join(f"{v:.2f}" for v in run.cpu), flush=True)
        print("     client cpu ms/create:        " + " ".join(f"{v:.2f}" for v in run.client_cpu), flush=True)

    summary: list[str] = []

    def print_summary() -> None:
        # after every phase, figures so far: a run stopped at its time share (bench/run_all.py) keeps them
        print(f"SUMMARY {' '.join(summary)}", flush=True)

    began = time.monotonic()
    first_phase = 0.0

    def fits(phase: str) -> bool:
        """Phase 2 took 1.5 times phase 1 on 2 cores, phase 3 3.8 times per 1000 x 4 pods."""
        if not args.budget or not first_phase:
            return True
        need = first_phase * PHASE_COST[phase] * (args.burst_jobs / 1000 if phase == "burst" else 1.0)
        if time.monotonic() + need <= began + args.budget:
            return True
        print(f"  {phase}: skipped, {began + args.budget - time.monotonic():.0f} s of the {args.budget:.0f} s budget "
              f"left (it takes about {need:.0f} s here)", flush=True)
        return False

    fresh = after = None
    if "fresh" in phases:
        (root / "fresh").mkdir()
        with (control_plane(root / "fresh") as (api, kubeconfig, server),
              helper("watch", kubeconfig, root / "fresh") as seen_at):
            floor_s = plain_creates(api, args.floor) if args.floor else float("nan")
            fresh = gated_creates(api, server, args.pods, args.bucket, "gated")
            time.sleep(3)  # the last events on their way
        seen: dict[str, float] = json.loads(seen_at.read_text())
        delivery = [(seen[n] - t) * 1000 for n, t in fresh.sent.items() if n in seen]
        print(f"  1. fresh: {args.pods:,} gated creates in {fresh.seconds:.1f}s; per bucket of {args.bucket}:",
              flush=True)
        show(fresh)
        watch_p99 = percentile(delivery, 99)
        print(f"     watch: create sent -> ADDED received p50 {percentile(delivery, 50):.1f} ms  "
              f"p99 {watch_p99:.1f} ms ({len(delivery):,}/{len(fresh.sent):,} events)", flush=True)
        ratio, cpu_ratio = fresh.wall[-1] / fresh.wall[0], fresh.cpu[-1] / fresh.cpu[0]
        floor_total = floor_s * args.pods / args.floor if args.floor else float("nan")
        print(f"     floor: the same client's plain create loop, {args.floor:,} ConfigMaps first: "
              f"{1000 * floor_s / max(1, args.floor):.2f} ms/create, {floor_total:.1f}s for {args.pods:,}; "
              f"pods {fresh.seconds / floor_total:.2f} x that", flush=True)
        summary.append(f"pods={args.pods} first_bucket={fresh.wall[0]:.2f}ms last_bucket={fresh.wall[-1]:.2f}ms "
                       f"ratio={ratio:.2f} cpu_ratio={cpu_ratio:.2f} total={fresh.seconds:.1f}s "
                       f"total_floor={floor_total:.1f}s watch_p99={watch_p99:.1f}ms")
        print_summary()
        first_phase = time.monotonic() - began

    if "burst" in phases and fits("burst"):
        (root / "burst").mkdir()
        with control_plane(root / "burst") as (api, kubeconfig, _):
            client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, pod_body("probe", gated=True))
            with helper("get", kubeconfig, root / "burst") as gets_at:
                burst_s = run_to_completion(api, "burst", args.burst_jobs, 4, args.timeout)
        gets: list[float] = json.loads(gets_at.read_text())
        get_p50, get_p99 = percentile(gets, 50), percentile(gets, 99)
        print(f"  3. burst of {args.burst_jobs} x 4 pods (run, exit 0) in {burst_s:.1f}s: GET pod p50 {get_p50:.1f} ms "
              f"p99 {get_p99:.1f} ms max {max(gets):.1f} ms ({len(gets):,} GETs from another process)", flush=True)
        summary.append(f"get_p99_burst_{args.burst_jobs}x4={get_p99:.1f}ms")
        print_summary()

    if "after" in phases and fits("after"):
        (root / "after").mkdir()
        with control_plane(root / "after") as (api, _, server):
            ran_s = run_to_completion(api, "ran", args.finished // 4, 4, args.timeout)
            after = gated_creates(api, server, args.pods, args.bucket, "gated")
        print(f"  2. after {args.finished:,} pods ran and finished ({ran_s:.1f}s): {args.pods:,} gated creates in "
              f"{after.seconds:.1f}s:", flush=True)
        show(after)
        summary.append(f"after_{args.finished}_finished_last_bucket={after.wall[-1]:.2f}ms")
        print_summary()

    if fresh is not None and after is not None:
        plot(args.plot, args.bucket, fresh, after, args.finished)
        print(f"  plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
