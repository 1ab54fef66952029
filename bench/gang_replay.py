"""Replay the Microsoft ITP GPU trace against three ways of starting distributed jobs.

A discrete-event simulation on a declared cluster (default: 64 nodes x 8 GPUs). Each trace job becomes a
gang of `workers = num_gpu / gpus_per_worker` pods with `gpus_per_worker = min(num_gpu, G)` (the trace
README's rule), replayed for G=8 (ElasticFlow's own placement) and G=1 (one GPU per MWMS worker).

Policies compared:
  builtin    the operator's built-in admission (`tfjob_operator.gang.placement.admit_in`): all-or-nothing,
             priority then FIFO, best fit, backfill, anti-starvation reservation after N passes.
  fifo-gang  the same admission with backfill off: strict FIFO, nothing starts behind a waiting gang.
  no-gang    kube-scheduler alone: every pending pod is bound on its own as soon as a node has room
             (FIFO over pods, LeastAllocated spreading as kube-scheduler's default scoring); a job runs
             only once all its pods are bound, so partial gangs hold GPUs. A deadlock is a set of partial
             gangs none of which could complete even if every running job finished; the simulation
             then deletes the most recent partial gang and resubmits it, as an operator would by hand.

Run: `.venv/bin/python bench/gang_replay.py` (about a minute on 2 cores). Writes bench/results/gang_replay.png.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import random
import statistics
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import figures
import numpy as np

from tfjob_operator.gang.cluster import Cluster, ClusterState
from tfjob_operator.gang.placement import AdmissionPolicy, AdmissionResult, Elastic, admit_in
from tfjob_operator.gang.request import GangRequest

TRACE = (Path(__file__).resolve().parents[1] / "third_party" / "traces" / "microsoft-itp-elasticflow"
         / "raw-traces.tar.gz")
RESULTS = Path(__file__).resolve().parent / "results"
POLICIES = ("builtin", "fifo-gang", "no-gang")
HOUR = 3600.0


@dataclass
class Job:
    id: int
    submit: float
    duration: float
    gpus: int
    workers: int
    per_worker: int
    start: float | None = None
    end: float | None = None


def load_trace(path: Path, cluster_file: str, speedup: float, limit: int | None) -> list[tuple[float, float, int]]:
    """(submit, duration, num_gpu) rows of one cluster's file; submissions compressed by ``speedup``."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(path, "r:gz") as tar:
        tar.extract(cluster_file, tmp, filter="data")
        with open(Path(tmp) / cluster_file, newline="") as fh:
            rows = [(float(r["submission_time"]), float(r["duration"]), int(r["num_gpu"])) for r in csv.DictReader(fh)]
    rows.sort()
    if limit:
        rows = rows[:limit]
    t0 = rows[0][0]
    return [((s - t0) / speedup, d, g) for s, d, g in rows]


def make_jobs(rows: Iterable[tuple[float, float, int]], g: int) -> list[Job]:
    jobs = []
    for i, (submit, duration, num_gpu) in enumerate(rows):
        per = min(num_gpu, g)
        jobs.append(Job(i, submit, duration, num_gpu, num_gpu // per, per))
    return jobs


def node_dict(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}},
    }


def pod_dict(name: str, gpus: int) -> dict[str, Any]:
    requests = {"cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "tensorflow", "resources": {"requests": requests}}]},
    }


def pod_requests(gpus: int) -> dict[str, Decimal]:
    return {"cpu": Decimal(4 * gpus), "memory": Decimal(32 * gpus * 2**30), "nvidia.com/gpu": Decimal(gpus)}


@dataclass
class Outcome:
    policy: str
    jobs: list[Job]
    gpus: int
    window: float
    partial_gpu_hours: float = 0.0
    deadlocks: int = 0
    passes: int = 0
    pass_seconds: float = 0.0
    unfinished: int = 0
    #: GPU-seconds of fully running gangs, and GPU-seconds of capacity, while some job was waiting.
    busy_while_waiting: float = 0.0
    capacity_while_waiting: float = 0.0
    queue_samples: list[tuple[float, int]] = field(default_factory=list)

    def jct_hours(self) -> list[float]:
        return [(j.end - j.submit) / HOUR for j in self.jobs if j.end is not None]

    def utilisation(self) -> float:
        """GPU-time of fully running gangs inside [first, last submission] over the GPUs in that window."""
        busy = 0.0
        for j in self.jobs:
            if j.start is None:
                continue
            end = j.end if j.end is not None else self.window
            busy += j.gpus * max(0.0, min(end, self.window) - min(j.start, self.window))
        return busy / (self.gpus * self.window)

    def utilisation_while_waiting(self) -> float:
        """Share of GPUs doing useful work while jobs were waiting: what a policy wastes under backlog."""
        return self.busy_while_waiting / self.capacity_while_waiting if self.capacity_while_waiting else 1.0


class Replay:
    """Shared event loop; subclasses decide how pending work is started at each event time."""

    def __init__(self, jobs: list[Job], nodes: int, gpus_per_node: int, policy: str):
        self.jobs = jobs
        self.n_nodes, self.gpn = nodes, gpus_per_node
        self.policy = policy
        self.window = max(j.submit for j in jobs)
        self.outcome = Outcome(policy, jobs, nodes * gpus_per_node, self.window)
        self.events: list[tuple[float, int, int]] = []  # (time, 0 = finish / 1 = arrival, job id)
        for j in jobs:
            heapq.heappush(self.events, (j.submit, 1, j.id))
        self.partial_gpus = 0  # GPUs bound to pods of gangs not yet fully bound
        self.running_gpus = 0  # GPUs of gangs fully bound (doing useful work)
        self.waiting = 0
        self.now = 0.0

    def run(self) -> Outcome:
        while self.events:
            t = self.events[0][0]
            self.outcome.partial_gpu_hours += self.partial_gpus * (t - self.now) / HOUR
            if self.waiting:
                self.outcome.busy_while_waiting += self.running_gpus * (t - self.now)
                self.outcome.capacity_while_waiting += self.outcome.gpus * (t - self.now)
            self.now = t
            while self.events and self.events[0][0] == t:
                _, kind, jid = heapq.heappop(self.events)
                job = self.jobs[jid]
                if kind == 0:
                    self.running_gpus -= job.gpus
                    self.finish(job)
                else:
                    self.arrive(job)
            self.schedule()
            self.waiting = self.queued()
            self.outcome.queue_samples.append((t, self.waiting))
        self.outcome.unfinished = sum(1 for j in self.jobs if j.end is None)
        return self.outcome

    def start(self, job: Job) -> None:
        job.start = self.now
        job.end = self.now + job.duration
        self.running_gpus += job.gpus
        heapq.heappush(self.events, (job.end, 0, job.id))

    def arrive(self, job: Job) -> None:
        raise NotImplementedError

    def finish(self, job: Job) -> None:
        raise NotImplementedError

    def schedule(self) -> None:
        raise NotImplementedError

    def queued(self) -> int:
        raise NotImplementedError


class GangReplay(Replay):
    """builtin and fifo-gang: one admission pass of the real placement code per event time."""

    def __init__(self, jobs: list[Job], nodes: int, gpus_per_node: int, policy: str, starvation_passes: int):
        super().__init__(jobs, nodes, gpus_per_node, policy)
        self.cluster = Cluster.from_objects([node_dict(f"node-{i:03d}", gpus_per_node) for i in range(nodes)])
        self.admission = AdmissionPolicy(backfill=policy == "builtin", starvation_passes=starvation_passes)
        self.queue: dict[str, GangRequest] = {}
        self.placed: dict[int, dict[str, str]] = {}
        self.waited: dict[str, int] = {}
        self.free_gpus = nodes * gpus_per_node
        self.smallest_waiting = 0

    def arrive(self, job: Job) -> None:
        pods = tuple(pod_dict(f"j{job.id}-worker-{i}", job.per_worker) for i in range(job.workers))
        self.queue[str(job.id)] = GangRequest(str(job.id), pods, arrival=job.submit)

    def finish(self, job: Job) -> None:
        req = pod_requests(job.per_worker)
        for node in self.placed.pop(job.id).values():
            self.cluster.give(node, req)
        self.free_gpus += job.gpus

    def schedule(self) -> None:
        # Every gang needs a GPU: with none free a pass cannot admit anything, so the operator's pass
        # would only refresh reasons. Skipping it keeps the replay fast and does not change admissions.
        if not self.queue or self.free_gpus == 0:
            return
        self.admit()

    def admit(self, elastic: dict[str, Elastic] | None = None) -> AdmissionResult:
        """One pass of the operator's admission over the queue (timed); each admitted gang takes its nodes and
        starts (`start`)."""
        began = time.perf_counter()
        result = admit_in(self.cluster, list(self.queue.values()), self.admission, self.waited, elastic or None)
        self.outcome.pass_seconds += time.perf_counter() - began
        self.outcome.passes += 1
        self.waited = result.passes_waited
        for key, placement in result.admitted.items():
            job = self.jobs[int(key)]
            del self.queue[key]
            req = pod_requests(job.per_worker)
            for node in placement.values():
                self.cluster.take(node, req)
            self.placed[job.id] = placement
            self.free_gpus -= len(placement) * job.per_worker
            self.start(job)
        return result

    def queued(self) -> int:
        return len(self.queue)


class NoGangReplay(Replay):
    """Pods bound one by one as room appears; partial gangs hold GPUs; deadlocks are broken by hand."""

    def __init__(self, jobs: list[Job], nodes: int, gpus_per_node: int, pod_spread: float = 0.0):
        super().__init__(jobs, nodes, gpus_per_node, "no-gang")
        self.pod_spread = pod_spread
        self.free = np.full(nodes, gpus_per_node, dtype=np.int64)
        self.pending: list[tuple[float, int, int]] = []  # FIFO of (submitted, pod index, job id)
        self.bound: dict[int, list[int]] = {}  # job id → nodes of its bound pods
        self.running: set[int] = set()
        self.resubmits = 0

    def arrive(self, job: Job) -> None:
        # kube-scheduler takes pods in creation order. A job's pods are created over `pod_spread` seconds
        # (API client rate limits), so the pods of jobs submitted close together interleave.
        self.pending.extend((job.submit + self.pod_spread * i / job.workers, i, job.id) for i in range(job.workers))
        self.pending.sort()

    def finish(self, job: Job) -> None:
        for node in self.bound.pop(job.id):
            self.free[node] += job.per_worker
        self.running.discard(job.id)

    def schedule(self) -> None:
        resubmitted: list[tuple[float, int, int]] = []
        while True:
            self._bind_pending()
            stuck = self._deadlocked()
            if not stuck:
                break
            # Break the deadlock as an administrator would: delete the newest partial gang and resubmit it.
            # Its pods rejoin the queue after this round, so each round removes one gang and ends.
            victim = max(stuck, key=lambda jid: (self.jobs[jid].submit, jid))
            job = self.jobs[victim]
            for node in self.bound.pop(victim):
                self.free[node] += job.per_worker
                self.partial_gpus -= job.per_worker
            self.pending = [p for p in self.pending if p[2] != victim]
            resubmitted.extend((self.now, i, victim) for i in range(job.workers))
            self.outcome.deadlocks += 1
        if resubmitted:
            self.pending = sorted(self.pending + resubmitted)

    def _bind_pending(self) -> None:
        left = []
        most = int(self.free.max())
        for k, item in enumerate(self.pending):
            if most == 0:
                left.extend(self.pending[k:])
                break
            job = self.jobs[item[2]]
            if job.per_worker > most:
                left.append(item)
                continue
            node = int(np.argmax(self.free))  # LeastAllocated: the emptiest node
            self.free[node] -= job.per_worker
            most = int(self.free.max())
            pods = self.bound.setdefault(job.id, [])
            pods.append(node)
            self.partial_gpus += job.per_worker
            if len(pods) == job.workers:
                self.partial_gpus -= job.gpus
                self.running.add(job.id)
                self.start(job)
        self.pending = left

    def _deadlocked(self) -> list[int]:
        """Partial gangs that could not complete even if every fully running job finished."""
        partial = [jid for jid in self.bound if jid not in self.running]
        if not partial:
            return []
        capacity = self.free.copy()
        for jid in self.running:
            for node in self.bound[jid]:
                capacity[node] += self.jobs[jid].per_worker
        room: dict[int, int] = {}  # pods of that many GPUs the capacity could take
        for jid in partial:
            job = self.jobs[jid]
            if job.per_worker not in room:
                room[job.per_worker] = int((capacity // job.per_worker).sum())
            if room[job.per_worker] >= job.workers - len(self.bound[jid]):
                return []
        return partial

    def queued(self) -> int:
        return len({p[2] for p in self.pending})


def replay(
    rows: list[tuple[float, float, int]],
    g: int,
    policy: str,
    nodes: int,
    gpn: int,
    passes: int,
    pod_spread: float = 0.0,
) -> Outcome:
    jobs = make_jobs(rows, g)
    if policy == "no-gang":
        return NoGangReplay(jobs, nodes, gpn, pod_spread).run()
    return GangReplay(jobs, nodes, gpn, policy, passes).run()


def admission_pass_time(
    rows: list[tuple[float, float, int]], g: int, n_jobs: int, n_nodes: int
) -> tuple[float, float, int]:
    """Seconds for one pass of `n_jobs` queued trace gangs over `n_nodes` half-busy 8-GPU nodes.

    Returns (incremental, rebuild, admitted). Incremental is the pass with state kept: the free capacity is a
    :class:`ClusterState` fed by pod and node events before the pass, and each queued gang's pod requests were
    parsed once beforehand, so the pass is `admit_in` alone (the replay runs this way, and so does the operator's
    loop, its ClusterState fed by watches of nodes and pods). Rebuild parses
    nodes, bound pods and every queued pod afresh (`Cluster.from_objects` and new GangRequests), as a pass
    without kept state does. Best of three each (the machine may be shared).
    """
    rng = random.Random(8)
    nodes = [node_dict(f"n{i:04d}", 8) for i in range(n_nodes)]
    bound = []
    for i in range(n_nodes):
        used = rng.choice([0, 2, 4, 6, 8])
        if used:
            pod = pod_dict(f"busy-{i}", used)
            pod["spec"]["nodeName"] = f"n{i:04d}"
            bound.append(pod)
    queue = []
    for k, (_, _, num_gpu) in enumerate(rng.choices(rows, k=n_jobs)):
        per = min(num_gpu, g)
        pods = tuple(pod_dict(f"q{k}-worker-{i}", per) for i in range(num_gpu // per))
        queue.append(GangRequest(f"q{k}", pods, arrival=float(k)))
    waited = {q.key: 100 for q in queue}
    state = ClusterState()
    for node in nodes:
        state.node_event("ADDED", node)
    for pod in bound:
        state.pod_event("ADDED", pod)
    state.cluster()  # built at the first pass, then kept
    for q in queue:
        _ = q.classes  # parsed with the job, not in the pass
    incremental = rebuild = float("inf")
    admitted = -1
    for _ in range(3):
        began = time.perf_counter()
        result = admit_in(state.cluster(), queue, AdmissionPolicy(), waited)
        incremental = min(incremental, time.perf_counter() - began)
        fresh = [GangRequest(q.key, q.pods, arrival=q.arrival) for q in queue]  # no cached pod parsing
        began = time.perf_counter()
        again = admit_in(Cluster.from_objects(nodes, bound), fresh, AdmissionPolicy(), waited)
        rebuild = min(rebuild, time.perf_counter() - began)
        assert again.admitted == result.admitted and again.waiting == result.waiting  # kept state decides alike
        admitted = len(result.admitted)
    return incremental, rebuild, admitted


def plot(outcomes: dict[int, dict[str, Outcome]], path: Path, title: str) -> None:
    colours = {"builtin": "tab:green", "fifo-gang": "tab:blue", "no-gang": "tab:red"}
    fig, axes = figures.subplots(len(outcomes), 3, figsize=(15, 4.2 * len(outcomes)), squeeze=False)
    for row, (g, by_policy) in enumerate(sorted(outcomes.items(), reverse=True)):
        cdf, bars, queue = axes[row]
        for policy, out in by_policy.items():
            jct = sorted(out.jct_hours())
            if jct:
                cdf.plot(jct, np.linspace(0, 1, len(jct)), label=policy, color=colours[policy])
            t = [s[0] / HOUR / 24 for s in out.queue_samples]
            queue.plot(t, [s[1] for s in out.queue_samples], label=policy, color=colours[policy], lw=0.8)
        cdf.set_xscale("log")
        cdf.set_xlabel("job completion time (hours, log)")
        cdf.set_ylabel("fraction of jobs")
        cdf.set_title(f"G={g}: job completion time CDF")
        cdf.legend()
        names = list(by_policy)
        x = np.arange(len(names))
        util = [100 * by_policy[p].utilisation_while_waiting() for p in names]
        held = [by_policy[p].partial_gpu_hours for p in names]
        bars.bar(x - 0.2, util, 0.4, color=[colours[p] for p in names])
        bars.set_ylabel("GPUs doing useful work while jobs wait (%)")
        bars.set_ylim(0, 100)
        twin = bars.twinx()
        twin.bar(x + 0.2, held, 0.4, color="grey", alpha=0.6, label="GPU-hours held by partial gangs")
        twin.set_ylabel("GPU-hours held by partial gangs (grey)")
        bars.set_xticks(x, [f"{p}\n{by_policy[p].deadlocks} deadlocks" for p in names])
        bars.set_title(f"G={g}: utilisation under backlog (colour), partial-gang GPU-h (grey)", fontsize=10)
        queue.set_xlabel("simulated time (days)")
        queue.set_ylabel("jobs waiting")
        queue.set_title(f"G={g}: queue length")
        queue.legend()
    figures.save(fig, path, title)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--cluster-file", default="cluster03.csv", help="which of the trace's clusters to replay")
    parser.add_argument("--speedup", type=float, default=4.0, help="divide inter-arrival times by this")
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N jobs (0: all)")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--starvation-passes", type=int, default=AdmissionPolicy().starvation_passes)
    parser.add_argument(
        "--pod-spread-seconds",
        type=float,
        default=30.0,
        help="no-gang: a job's pods are created over this many seconds, so close submissions interleave",
    )
    parser.add_argument("--png", type=Path, default=RESULTS / "gang_replay.png")
    args = parser.parse_args()

    rows = load_trace(args.trace, args.cluster_file, args.speedup, args.limit or None)
    span_days = rows[-1][0] / HOUR / 24
    offered = sum(d * n for _, d, n in rows) / (rows[-1][0] * args.nodes * args.gpus_per_node)
    print(
        f"trace: {args.trace.name} {args.cluster_file}, {len(rows)} jobs"
        f"{' (first ' + str(args.limit) + ')' if args.limit else ' (all)'}, arrivals compressed x{args.speedup:g} "
        f"into {span_days:.1f} days; offered load {100 * offered:.0f}% of the cluster"
    )
    print(
        f"cluster: {args.nodes} nodes x {args.gpus_per_node} GPUs = {args.nodes * args.gpus_per_node} GPUs; "
        f"pods request GPUs (+4 cpu, 32Gi per GPU); builtin anti-starvation after {args.starvation_passes} passes; "
        f"no-gang creates each job's pods over {args.pod_spread_seconds:g} s"
    )
    outcomes: dict[int, dict[str, Outcome]] = {}
    started = time.perf_counter()
    for g in (8, 1):
        outcomes[g] = {}
        gangs = sum(1 for _, _, n in rows if n > g)
        print(f"\nG={g}: gpus_per_worker = min(num_gpu, {g}); {gangs} jobs have more than one worker")
        print(
            f"  {'policy':<10} {'GPU util':>8} {'util|wait':>9} {'mean JCT':>9} {'p95 JCT':>9} {'mean wait':>9} "
            f"{'partial GPU-h':>13} {'deadlocks':>9} {'unfinished':>10} {'passes':>7} {'ms/pass':>8}"
        )
        for policy in POLICIES:
            out = replay(
                rows, g, policy, args.nodes, args.gpus_per_node, args.starvation_passes, args.pod_spread_seconds
            )
            outcomes[g][policy] = out
            jct = out.jct_hours()
            waits = [(j.start - j.submit) / HOUR for j in out.jobs if j.start is not None]
            p95 = statistics.quantiles(jct, n=20)[-1] if len(jct) > 1 else float("nan")
            per_pass = 1000 * out.pass_seconds / out.passes if out.passes else float("nan")
            print(
                f"  {policy:<10} {100 * out.utilisation():>7.1f}% {100 * out.utilisation_while_waiting():>8.1f}% "
                f"{statistics.mean(jct):>8.1f}h {p95:>8.1f}h "
                f"{statistics.mean(waits):>8.1f}h {out.partial_gpu_hours:>13.0f} {out.deadlocks:>9} "
                f"{out.unfinished:>10} {out.passes:>7} {per_pass:>8.2f}"
            )
    print("\n  no-gang at G=1 is sensitive to how interleaved pods reach the scheduler (pod creation spread):")
    for spread in (0.0, 120.0):
        out = replay(rows, 1, "no-gang", args.nodes, args.gpus_per_node, args.starvation_passes, spread)
        print(
            f"    spread {spread:>4.0f} s: mean JCT {statistics.mean(out.jct_hours()):.1f}h, "
            f"{out.partial_gpu_hours:.0f} GPU-h held by partial gangs, {out.deadlocks} deadlocks"
        )
    replay_seconds = time.perf_counter() - started
    plot(
        outcomes,
        args.png,
        f"ITP {args.cluster_file} on {args.nodes}x{args.gpus_per_node} GPUs, arrivals x{args.speedup:g}",
    )
    print(f"\nwrote {args.png}")

    print("\nadmission pass, 1000 queued trace jobs x 1000 nodes (8 GPUs each, about half busy):")
    pass_times = {}
    for g in (8, 1):
        incremental, rebuild, admitted = admission_pass_time(rows, g, 1000, 1000)
        pass_times[g] = incremental
        print(
            f"  G={g}: {1000 * incremental:.0f} ms with free capacity and parsed requests kept between passes, "
            f"{1000 * rebuild:.0f} ms rebuilding it and parsing every pod; {admitted} admitted"
        )

    parts = []
    for g in (8, 1):
        o = outcomes[g]
        jct = "/".join(f"{statistics.mean(o[p].jct_hours()):.1f}" for p in POLICIES)
        busy = "/".join(f"{100 * o[p].utilisation_while_waiting():.0f}" for p in POLICIES)
        parts.append(
            f"G={g} mean JCT {jct} h, GPUs busy under backlog {busy} % (builtin/fifo-gang/no-gang), "
            f"no-gang held {o['no-gang'].partial_gpu_hours:.0f} GPU-h in partial gangs with {o['no-gang'].deadlocks} "
            "deadlocks"
        )
    print(
        f"\nsummary: {'; '.join(parts)}; admission pass 1000 jobs x 1000 nodes {1000 * pass_times[8]:.0f} ms (G=8) / "
        f"{1000 * pass_times[1]:.0f} ms (G=1) with kept state; replay {replay_seconds:.0f} s"
    )
    jcts = " ".join(
        f"jct_{p.replace('-', '_')}_g{g}={statistics.mean(outcomes[g][p].jct_hours()):.1f}h"
        for g in (8, 1)
        for p in POLICIES
    )
    print(
        f"SUMMARY jobs={len(rows)} admission_pass_g8={1000 * pass_times[8]:.0f}ms "
        f"admission_pass_g1={1000 * pass_times[1]:.0f}ms {jcts} "
        f"partial_gpu_hours_no_gang_g1={outcomes[1]['no-gang'].partial_gpu_hours:.0f} replay={replay_seconds:.0f}s"
    )


if __name__ == "__main__":
    main()
