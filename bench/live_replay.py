"""Replay the Microsoft ITP trace through the live operator on simulated GPU nodes, next to the pure replay.

The trace and its G=8 gangs are bench/gang_replay.py's (cluster03, arrivals compressed x4, `gpus_per_worker =
min(num_gpu, 8)`). Here every trace job is a TFJob of `workers` pods submitted at its arrival time; the pods
carry `kubelocal.dev/sim-duration` = the job's duration and run on `--nodes` simulated 8-GPU nodes
(`sim:true`: no process, Running then Succeeded after the duration). The control plane compresses simulated
time `--speed` times (`LocalCluster(sim_speed=...)`), and so does the submitting client: a simulated hour is
3600 / speed wall seconds. The operator runs as `tfjob operator` (builtin gang backend) in its own process; the
client that submits and watches is a third process, as in bench/operator_scale.py.

From the live system (a watch's receive times, in simulated hours; the TFJobs' status times as a cross-check):
mean JCT (submit -> Succeeded), mean wait (submit -> all pods Running), GPU-hours held by partial gangs (pods
bound while a pod of their gang is not). Beside them, on the same jobs, three pure replays, each one difference
further from gang_replay.py's: 1. that one (`builtin`, waits counted per event); 2. on the live loop's clock (a
pass every ADMISSION_PERIOD_SECONDS of wall time while gangs wait, a wait counted at most once per period, so
anti-starvation follows wall time); 3. as 2 with each job arriving when the live client sent it. What is left
between 3 and the live run is the operator and plane's own latency, times the speed.

    .venv/bin/python bench/live_replay.py [--first 0 --jobs 0] [--speed 4000] [--budget 900] [--png PATH]

By default the whole trace (3,011 jobs, 21 simulated days) at x4000: 453 s of replay, if the operator keeps up
(on 2 CPUs at load 9 it did not: docs/performance.md). `--first/--jobs` takes a contiguous window of the trace
(`make bench`: jobs 2600-2999 at x2400, 94 s); `--budget` is the wall time for the whole bench (jobs not done by
then count as unfinished). Ends with one `SUMMARY key=value ...` line; writes a plot of pure vs live JCT.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import heapq
import itertools
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import figures
import psutil
from gang_replay import HOUR, TRACE, GangReplay, Job, Outcome, load_trace, make_jobs, replay
from kubernetes import client, config, watch

from kubelocal.apiserver import write_kubeconfig
from kubelocal.cluster import LocalClusterThread
from tfjob_operator.api.crd import CRD_PATH
from tfjob_operator.client.local.processes import stop_process
from tfjob_operator.gang.admission import ADMISSION_PERIOD_SECONDS
from tfjob_operator.gang.placement import AdmissionPolicy

RESULTS = Path(__file__).resolve().parent / "results"
G = 8
UA = "tfjob-live-replay"
#: Seconds of the budget kept for what is not the replay: control plane and operator start, tear-down, the
#: pure replays, figures and plot.
RESERVE_SECONDS = 20.0
#: Connections the client submits on.
SUBMITTERS = 4


def tfjob(name: str, job: Job) -> dict[str, Any]:
    """A TFJob of `job.workers` workers of `job.per_worker` GPUs whose pods run the job's duration, simulated."""
    gpus = job.per_worker
    resources = {"cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi", "nvidia.com/gpu": str(gpus)}
    template = {
        "metadata": {"annotations": {"kubelocal.dev/sim-duration": repr(job.duration)}},
        "spec": {"containers": [{"name": "tensorflow", "image": "local", "command": ["true"],
                                 "resources": {"requests": resources, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    return {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": job.workers, "restartPolicy": "Never",
                                                   "template": template}}}}


def job_name(job: Job) -> str:
    return f"itp-{job.id:04d}"


class Recorder(threading.Thread):
    """A watch of pods or TFJobs (raw dicts, resumed from its resourceVersion) that records when it saw what:
    pods first bound and first Running; jobs first Succeeded/Failed."""

    def __init__(self, api: client.ApiClient, kind: str) -> None:
        super().__init__(daemon=True)
        self.kind = kind
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.finished: dict[str, tuple[float, str]] = {}
        self.stop = False

    def run(self) -> None:
        version: str | None = None
        while not self.stop:
            resume = {"resource_version": version} if version else {}
            try:
                if self.kind == "pods":
                    stream = watch.Watch().stream(self.core.list_namespaced_pod, "default", timeout_seconds=5,
                                                  deserialize=False, **resume)
                else:
                    stream = watch.Watch().stream(self.custom.list_namespaced_custom_object, "tfjob.dev", "v1",
                                                  "default", "tfjobs", timeout_seconds=5, deserialize=False, **resume)
                for event in stream:
                    if event["type"] == "ERROR":  # 410 Gone: list again
                        version = None
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    self.observe(event["object"])
            except Exception:
                version = None
                time.sleep(0.1)

    def observe(self, obj: dict[str, Any]) -> None:
        now, name = time.monotonic(), obj["metadata"]["name"]
        status = obj.get("status") or {}
        if self.kind == "pods":
            if (obj.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
            if status.get("phase") in ("Running", "Succeeded", "Failed"):
                self.running.setdefault(name, now)
        elif status.get("state") in ("Succeeded", "Failed"):
            self.finished.setdefault(name, (now, status["state"]))


@dataclass
class Seen:
    """What the measuring client saw, monotonic seconds; `zero` is the wall moment of simulated time 0."""

    zero: float
    submitted: dict[str, float]
    bound: dict[str, float]
    running: dict[str, float]
    finished: dict[str, tuple[float, str]]
    #: name -> (creationTimestamp, status.startTime, status.completionTime) as the API server stored them.
    status_times: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: wall seconds of each create call
    create_seconds: list[float] = field(default_factory=list)


def measure(kubeconfig: str, jobs: list[Job], speed: float, timeout: float, conn: Connection) -> None:
    """The measuring client, in its own process: submits each job at its compressed arrival time, watches pods
    and jobs until every job finished (or `timeout` wall seconds), then reads the jobs' status times."""
    api = config.new_client_from_config(kubeconfig)
    api.user_agent = UA
    pods, tfjobs = Recorder(api, "pods"), Recorder(api, "tfjobs")
    pods.start()
    tfjobs.start()
    custom = client.CustomObjectsApi(api)
    conn.send("ready")
    conn.recv()
    zero = time.monotonic() + 0.5
    submitted: dict[str, float] = {}
    took: list[float] = []

    def create(name: str, job: Job) -> None:
        began = submitted[name] = time.monotonic()
        custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", tfjob(name, job),
                                               _preload_content=False).read()
        took.append(time.monotonic() - began)

    # Jobs the trace submits together go out on a few connections at once, as several users' would.
    with concurrent.futures.ThreadPoolExecutor(SUBMITTERS) as pool:
        for job in jobs:
            time.sleep(max(0.0, zero + job.submit / speed - time.monotonic()))
            pool.submit(create, job_name(job), job)
    deadline = zero + timeout
    while len(tfjobs.finished) < len(jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
    pods.stop = tfjobs.stop = True
    seen = Seen(zero, submitted, dict(pods.bound), dict(pods.running), dict(tfjobs.finished), create_seconds=took)
    listed = custom.list_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs")
    for item in listed["items"]:
        status = item.get("status") or {}
        seen.status_times[item["metadata"]["name"]] = (item["metadata"].get("creationTimestamp", ""),
                                                       status.get("startTime", ""), status.get("completionTime", ""))
    conn.send(seen)


def run_live(jobs: list[Job], speed: float, nodes: int,
             timeout: float) -> tuple[Seen, tuple[float, float], collections.Counter[str]]:
    """The jobs through a fresh control plane and operator; what the client saw, the CPU seconds of the operator
    and of the control plane (this process), and the operator's API requests by verb and resource."""
    spec = f"{nodes}x{{gpu:8,cpu:96,memory:768Gi,sim:true}}"
    with (
        tempfile.TemporaryDirectory(prefix="tfjob-live-replay-", ignore_cleanup_errors=True) as tmp,
        LocalClusterThread(workdir=Path(tmp), nodes=spec, max_grace_seconds=1.0, crds=(CRD_PATH,),
                           sim_speed=speed) as cluster,
    ):
        kubeconfig = Path(tmp) / "kubeconfig"
        write_kubeconfig(kubeconfig, cluster.url)
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "TFJOB_METRICS_PORT": "0",
               "TFJOB_LIVENESS_PORT": "0", "TFJOB_LOG_LEVEL": "WARNING", "TFJOB_GANG_BACKEND": "builtin"}
        log = (Path(tmp) / "operator.log").open("wb")
        operator = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "operator"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            ctx = multiprocessing.get_context("spawn")
            ours, theirs = ctx.Pipe()
            measurer = ctx.Process(target=measure, args=(str(kubeconfig), jobs, speed, timeout, theirs), daemon=True)
            measurer.start()
            ours.recv()
            time.sleep(3.0)  # the operator's start is not replayed
            first_request = len(cluster.apiserver.requests)
            cpu_before = sum(psutil.Process(operator.pid).cpu_times()[:2])
            plane_before = sum(psutil.Process().cpu_times()[:2])
            ours.send("go")
            seen: Seen = ours.recv()
            cpu = sum(psutil.Process(operator.pid).cpu_times()[:2]) - cpu_before
            plane = sum(psutil.Process().cpu_times()[:2]) - plane_before
            requests: collections.Counter[str] = collections.Counter(
                f"{r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''}"
                for r in list(cluster.apiserver.requests)[first_request:]
                if r.user_agent.startswith(("tfjob-operator", "kopf")))
            measurer.join(10)
        finally:
            stop_process(operator, 20)  # a loaded machine: do not let it outlive the bench
            log.close()
    return seen, (cpu, plane), requests


class ClockedReplay(GangReplay):
    """The pure builtin replay on the live loop's clock: a pass also every `period` simulated seconds while a gang
    waits, and a gang's wait counted at most once per period (AdmissionLoop._count_passes), where the pure
    replay counts one per event."""

    def __init__(self, jobs: list[Job], nodes: int, gpn: int, period: float) -> None:
        super().__init__(jobs, nodes, gpn, "builtin", AdmissionPolicy().starvation_passes)
        self.period = period
        self.counted_at: float | None = None
        self.ticking = False

    def run(self) -> Outcome:
        while self.events:
            t = self.events[0][0]
            self.outcome.partial_gpu_hours += self.partial_gpus * (t - self.now) / HOUR
            self.now = t
            while self.events and self.events[0][0] == t:
                _, kind, jid = heapq.heappop(self.events)
                if kind == 2:
                    self.ticking = False
                elif kind == 0:
                    self.running_gpus -= self.jobs[jid].gpus
                    self.finish(self.jobs[jid])
                else:
                    self.arrive(self.jobs[jid])
            self.schedule_clocked()
            if self.queue and not self.ticking:
                heapq.heappush(self.events, (self.now + self.period, 2, -1))
                self.ticking = True
        self.outcome.unfinished = sum(1 for j in self.jobs if j.end is None)
        return self.outcome

    def schedule_clocked(self) -> None:
        before = dict(self.waited)
        self.schedule()
        if self.counted_at is not None and self.now - self.counted_at < self.period:
            self.waited = {k: before.get(k, 0) for k in self.waited}
        else:
            self.counted_at = self.now


@dataclass
class LiveJob:
    submit: float  # simulated seconds from the replay's zero, as submitted (not as scheduled)
    start: float | None  # all pods Running
    end: float | None  # Succeeded or Failed seen
    state: str
    partial_gpu_seconds: float
    status_jct: float | None  # from the stored creationTimestamp / completionTime (1 s wall resolution)


def live_jobs(jobs: list[Job], seen: Seen, speed: float) -> dict[int, LiveJob]:
    def sim(t: float) -> float:
        return (t - seen.zero) * speed

    out = {}
    for job in jobs:
        name = job_name(job)
        pods = [f"{name}-worker-{i}" for i in range(job.workers)]
        bound = [seen.bound[p] for p in pods if p in seen.bound]
        running = [seen.running[p] for p in pods if p in seen.running]
        start = sim(max(running)) if len(running) == job.workers else None
        all_bound = max(bound) if len(bound) == job.workers else None
        partial = sum(job.per_worker * ((all_bound if all_bound is not None else b) - b) for b in bound) * speed
        end, state = seen.finished.get(name, (None, ""))
        created, _, completed = seen.status_times.get(name, ("", "", ""))
        status_jct = None
        if created and completed:
            status_jct = (datetime.fromisoformat(completed) - datetime.fromisoformat(created)).total_seconds() * speed
        out[job.id] = LiveJob(sim(seen.submitted[name]) if name in seen.submitted else float("nan"), start,
                              sim(end) if end is not None else None, state, partial, status_jct)
    return out


def mean_or_nan(values: list[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def plot(path: Path, jobs: list[Job], pure: Outcome, clocked: Outcome, resubmitted: Outcome,
         live: dict[int, LiveJob], title: str) -> None:
    """JCT CDFs of the pure replays and the live run; per job, live JCT against replay 3's."""
    import numpy as np

    fig, (cdf, scatter) = figures.subplots(1, 2, figsize=(12, 4.6))
    series = {
        "1 pure replay (waits per event)": sorted(pure.jct_hours()),
        "2 pure, waits per period of wall time": sorted(clocked.jct_hours()),
        "3 as 2, arrivals as the live client sent": sorted(resubmitted.jct_hours()),
        "live operator": sorted((lj.end - lj.submit) / HOUR for lj in live.values() if lj.end is not None),
    }
    for (label, jct), colour in zip(series.items(), ("tab:blue", "tab:orange", "tab:purple", "tab:green"), strict=True):
        if jct:
            cdf.plot(jct, np.linspace(0, 1, len(jct)), label=f"{label}: mean {statistics.mean(jct):.1f} h",
                     color=colour)
    cdf.set_xscale("log")
    cdf.set_xlabel("job completion time (simulated hours, log)")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_title("JCT CDF")
    cdf.legend(fontsize=8)
    xs, ys, cs = [], [], []
    for job in jobs:
        lj, pj = live[job.id], resubmitted.jobs[job.id]
        if lj.end is not None and pj.end is not None:
            xs.append((pj.end - pj.submit) / HOUR)
            ys.append((lj.end - lj.submit) / HOUR)
            cs.append("tab:red" if job.workers > 1 else "tab:grey")
    scatter.scatter(xs, ys, s=4, c=cs, alpha=0.6)
    top = max(xs + ys, default=1.0)
    scatter.plot([0.1, top], [0.1, top], color="black", lw=0.6)
    scatter.set_xscale("log")
    scatter.set_yscale("log")
    scatter.set_xlabel("JCT, pure replay 3 (h)")
    scatter.set_ylabel("JCT, live operator (h)")
    scatter.set_title("per job (red: gangs of > 1 pod)")
    figures.save(fig, path, title, fontsize=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--cluster-file", default="cluster03.csv")
    parser.add_argument("--speedup", type=float, default=4.0, help="arrivals compressed as in gang_replay.py")
    parser.add_argument("--first", type=int, default=0, help="the window's first job (in arrival order)")
    parser.add_argument("--jobs", type=int, default=0, help="jobs in the window (0: to the end)")
    parser.add_argument("--speed", type=float, default=4000.0, help="simulated seconds per wall second")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--budget", type=float, default=900.0,
                        help="wall seconds for the whole bench: jobs not finished by then count as unfinished")
    parser.add_argument("--png", type=Path, default=RESULTS / "live_replay.png")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = load_trace(args.trace, args.cluster_file, args.speedup, None)
    window = rows[args.first:args.first + args.jobs if args.jobs else None]
    if not window:
        parser.error(f"--first {args.first} --jobs {args.jobs}: the trace has {len(rows)} jobs")
    t0 = window[0][0]
    window = [(s - t0, d, g) for s, d, g in window]
    jobs = make_jobs(window, G)
    pure = replay(window, G, "builtin", args.nodes, 8, AdmissionPolicy().starvation_passes)
    period = ADMISSION_PERIOD_SECONDS * args.speed
    clocked = ClockedReplay(make_jobs(window, G), args.nodes, 8, period).run()
    makespan = max(j.end for j in pure.jobs if j.end is not None)
    print(f"live_replay: ITP {args.cluster_file} jobs {args.first}..{args.first + len(jobs) - 1} of {len(rows)} "
          f"(arrivals x{args.speedup:g}, {window[-1][0] / HOUR / 24:.1f} days; pure makespan "
          f"{makespan / HOUR / 24:.1f} days), G={G}: {sum(j.workers for j in jobs)} pods; {args.nodes} simulated "
          f"8-GPU nodes; speed x{args.speed:g}: 1 wall s = {args.speed / HOUR:.2f} simulated h, the replay "
          f"~{makespan / args.speed:.0f} s; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)

    began = time.monotonic()
    # Start-up (3 s for the operator), tear-down and the figures after the wait: what the wait leaves of the budget.
    wait = args.budget - (time.monotonic() - started) - RESERVE_SECONDS
    if makespan / args.speed > wait:
        print(f"  the budget leaves {wait:.0f} s to wait, less than the replay's {makespan / args.speed:.0f} s: "
              "jobs still running then count as unfinished", flush=True)
    seen, (cpu, plane_cpu), requests = run_live(jobs, args.speed, args.nodes, wait)
    wall = time.monotonic() - began
    live = live_jobs(jobs, seen, args.speed)
    done = [lj for lj in live.values() if lj.end is not None]
    failed = sum(1 for lj in done if lj.state != "Succeeded")
    lag = [(lj.submit - j.submit) for j, lj in zip(jobs, live.values(), strict=True)]

    # The jobs as the live client submitted them (its create calls lag the trace in bursts).
    as_submitted = [Job(j.id, lj.submit if lj.submit == lj.submit else j.submit, j.duration, j.gpus, j.workers,
                        j.per_worker) for j, lj in zip(jobs, live.values(), strict=True)]
    resubmitted = ClockedReplay(as_submitted, args.nodes, 8, period).run()

    def row(label: str, jct: list[float], wait: list[float], partial: float, finished: int) -> None:
        print(f"  {label:<52} {mean_or_nan(jct):>8.2f}h {mean_or_nan(wait):>9.2f}h {partial:>13.1f} "
              f"{finished:>5}/{len(jobs)}")

    print(f"\n  {'replay':<52} {'mean JCT':>9} {'mean wait':>10} {'partial GPU-h':>13} {'done':>11}")
    pures = (("1 pure (gang_replay.py: waits counted per event)", pure),
             (f"2 pure, a wait counted per {ADMISSION_PERIOD_SECONDS:g} s wall as live", clocked),
             ("3 as 2, jobs arriving when the live client sent them", resubmitted))
    for label, out in pures:
        row(label, out.jct_hours(), [(j.start - j.submit) / HOUR for j in out.jobs if j.start is not None],
            out.partial_gpu_hours, len(out.jct_hours()))
    live_jct = [(lj.end - lj.submit) / HOUR for lj in done if lj.end is not None]
    live_partial = sum(lj.partial_gpu_seconds for lj in live.values()) / HOUR
    row("4 live operator (times its watch saw)", live_jct,
        [(lj.start - lj.submit) / HOUR for lj in live.values() if lj.start is not None], live_partial, len(done))
    status_jct = [lj.status_jct / HOUR for lj in live.values() if lj.status_jct is not None]
    row("5 live operator (status times, 1 s wall each)", status_jct, [], float("nan"), len(status_jct))

    # Where the live run differs from replay 3, job by job.
    both = [(j, resubmitted.jobs[j.id], live[j.id]) for j in jobs
            if live[j.id].start is not None and live[j.id].end is not None and resubmitted.jobs[j.id].start is not None]
    start_delta = [(lj.start - pj.start) / HOUR for _, pj, lj in both if lj.start is not None and pj.start is not None]
    end_extra = [((lj.end - lj.start) - j.duration) / HOUR for j, _, lj in both
                 if lj.end is not None and lj.start is not None]
    latency = [(lj.start - lj.submit) / HOUR for _, pj, lj in both if pj.start == pj.submit and lj.start is not None]
    order_pure = [j.id for j, pj, _ in sorted(both, key=lambda b: (b[1].start, b[0].id))]
    order_live = [j.id for j, _, lj in sorted(both, key=lambda b: (b[2].start, b[0].id))]
    rank = {jid: k for k, jid in enumerate(order_live)}
    swaps = sum(1 for x, y in itertools.pairwise(order_pure) if rank[x] > rank[y])
    print(f"\n  1 -> 2: anti-starvation after {AdmissionPolicy().starvation_passes} waits: per event in 1; "
          f"per {ADMISSION_PERIOD_SECONDS:g} s wall = {period / HOUR:.1f} simulated h in 2 and live")
    print(f"  2 -> 3: create calls mean {1000 * mean_or_nan(seen.create_seconds):.0f} ms, max "
          f"{1000 * max(seen.create_seconds, default=float('nan')):.0f} ms on {SUBMITTERS} connections: "
          f"submissions late by {mean_or_nan(lag) / HOUR:.3f} h mean, {max(lag, default=0) / HOUR:.3f} h max")
    print(f"  3 -> 4: jobs 3 started on arrival, live submit -> all pods Running {mean_or_nan(latency):.3f} h mean "
          f"({len(latency)} jobs; {mean_or_nan(latency) * HOUR / args.speed:.2f} s wall): operator, admission pass, "
          f"release, scheduler, kubelet")
    print(f"          last pod Running -> job's end seen, beyond the trace duration: {mean_or_nan(end_extra):.3f} h "
          f"mean ({mean_or_nan(end_extra) * HOUR / args.speed:.2f} s wall)")
    print(f"          start, live - 3: mean {mean_or_nan(start_delta):+.2f} h, median "
          f"{statistics.median(start_delta) if start_delta else float('nan'):+.2f} h; start order: {swaps} of "
          f"{max(0, len(both) - 1)} consecutive pairs of 3's order swapped live")
    # Replay 3's mean JCT over the jobs done live: the floor of the live mean when the budget cut the run short.
    same = mean_or_nan([(p.end - p.submit) / HOUR for j in jobs if live[j.id].end is not None
                        and (p := resubmitted.jobs[j.id]).end is not None])
    print(f"  4 -> 5: timestamps of 1 s wall = {args.speed / HOUR:.2f} simulated h each")
    print(f"  CPU: operator {cpu:.0f} s ({1000 * cpu / len(jobs):.0f} ms per job), control plane {plane_cpu:.0f} s "
          f"({1000 * plane_cpu / len(jobs):.0f} ms per job); failed jobs {failed}; wall {wall:.0f} s")
    total = sum(requests.values())
    print(f"  operator API requests: {total} ({total / len(jobs):.1f} per job): "
          + ", ".join(f"{k} {v / len(jobs):.2f}" for k, v in requests.most_common()))

    title = (f"ITP {args.cluster_file}, jobs {args.first}..{args.first + len(jobs) - 1}, {args.nodes} x 8 GPUs "
             f"(simulated), G={G}, speed x{args.speed:g}")
    plot(args.png, jobs, pure, clocked, resubmitted, live, title)
    print(f"plot: {args.png}")
    print(f"SUMMARY jobs={len(jobs)} speed={args.speed:g} done={len(done)}/{len(jobs)} "
          f"jct_pure={mean_or_nan(pure.jct_hours()):.2f}h jct_clocked={mean_or_nan(clocked.jct_hours()):.2f}h "
          f"jct_live={mean_or_nan(live_jct):.2f}h jct_live_status={mean_or_nan(status_jct):.2f}h "
          f"partial_gpu_h_pure={pure.partial_gpu_hours:.1f} partial_gpu_h_live={live_partial:.1f} "
          f"start_latency={mean_or_nan(latency):.3f}h "
          f"start_latency_wall={mean_or_nan(latency) * HOUR / args.speed:.2f}s "
          f"start_delta={mean_or_nan(start_delta):+.2f}h "
          f"jct_resubmitted={mean_or_nan(resubmitted.jct_hours()):.2f}h jct_resubmitted_done={same:.2f}h "
          f"order_swaps={swaps} operator_cpu={cpu:.0f}s "
          f"wall={wall:.0f}s")
    return 0  # jobs not done in time, or failed, are figures (done=k/N), judged by bench/run_all.py's table


if __name__ == "__main__":
    sys.exit(main())
