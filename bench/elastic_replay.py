"""Replay the ITP trace with elastic gangs and node preemptions, against the rigid gang on the same seed.

The trace, cluster and admission are `gang_replay.py`'s (`builtin`: `tfjob_operator.gang.placement.admit_in`),
at G=1 (one GPU per MWMS worker). Four runs: rigid and elastic, each without and with node preemptions.

Model (a simulation, not the operator):
- Elastic: every multi-worker job gets min = ceil(W/2), max = W. Admission is the operator's own: `admit_in`
  with the gang's `Elastic` widths (a waiting gang that fits narrower is recreated at that width and admitted
  at the same instant; the operator takes a pass more). A gang on a lost node goes back to the queue at its
  width: `admit_in` restarts it there when it fits, else at the widest width >= min that fits, else it waits.
  A running gang below max widens when `gang.elastic.widest_fit` (the operator's `fits_workers`, its own pods
  counted free) gives more room, no gang waits for room, that room has lasted `WIDEN_STABLE_SECONDS` and
  `--cooldown` has passed since its last resize or its start (the rule of `reconcile/elastic.py`, restated
  here: that module's functions work on a reconcile context, not plain data). Room is looked at on every
  event, where the operator polls every `RECHECK_SECONDS`.
- Work is conserved: a job's rigid duration D at width W is D x W GPU-seconds-equivalent; at width w it
  progresses at `--efficiency` x w/W of its rigid speed (capped at 1). Linear scaling (1.0) is a choice, not
  a measurement: MWMS scales sublinearly (a narrower gang loses less than w/W: efficiency > 1), while a global
  batch or learning rate changed by the resize can cost convergence (< 1). Neither is measured here.
- Every restart (a resize, a restart after a lost node) costs `--restart-penalty` seconds of held GPUs without
  progress (checkpoint restore + TensorFlow start). No work is lost beyond that: the runtime saves on SIGTERM
  (spot notice, docs/elastic.md), and a widen saves first.
- Preemptions: each node is lost as a Poisson process (`--loss-per-node-day`) during the trace's submission
  window and comes back after `--down-hours` (exponential mean), from one seed shared by rigid and elastic. A
  rigid gang on a lost node restarts whole at its width, waiting until it fits.

Run: `.venv/bin/python bench/elastic_replay.py` (the whole trace, about 70 s of CPU; `--limit N`: the first N jobs).
Writes bench/results/elastic_replay.png.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from pathlib import Path

import figures
import numpy as np
from gang_replay import HOUR, RESULTS, TRACE, GangReplay, Job, load_trace, make_jobs, pod_dict, pod_requests

from tfjob_operator.api import ReplicaType, constants
from tfjob_operator.gang.elastic import gang_at, widest_fit
from tfjob_operator.gang.placement import AdmissionResult, Elastic, WaitKind
from tfjob_operator.gang.request import GangRequest
from tfjob_operator.reconcile.elastic import WIDEN_STABLE_SECONDS

FINISH, ARRIVE, DOWN, UP, CHECK = range(5)
WORKER_LABELS = {constants.LABEL_REPLICA_TYPE: ReplicaType.WORKER.tf_name}


@dataclass(frozen=True)
class Knobs:
    elastic: bool = False
    efficiency: float = 1.0
    restart_penalty: float = 60.0
    cooldown: float = 300.0  # resizeCooldownSeconds' default


@dataclass
class Run:
    """Per-job attempt state and the totals a run reports."""

    width: dict[int, int] = field(default_factory=dict)
    remaining: dict[int, float] = field(default_factory=dict)  # seconds of work at full width
    attempt: dict[int, tuple[float, float]] = field(default_factory=dict)  # job → (attempt start, penalty)
    version: dict[int, int] = field(default_factory=dict)
    restarts: int = 0
    resizes: int = 0
    busy: float = 0.0  # GPU-seconds held by running gangs inside the window
    available: float = 0.0  # GPU-seconds of nodes up inside the window
    penalty_gpu_seconds: float = 0.0
    util_samples: list[tuple[float, int, int]] = field(default_factory=list)  # (time, busy GPUs, GPUs up)


def preemptions(nodes: int, window: float, per_node_day: float, down_hours: float,
                seed: int) -> list[tuple[float, float, int]]:
    """(lost at, back at, node) for each node: Poisson losses during [0, window], exponential downtimes."""
    rng = random.Random(seed)
    out = []
    for n in range(nodes):
        t = 0.0
        while per_node_day > 0:
            t += rng.expovariate(per_node_day / (24 * HOUR))
            if t >= window:
                break
            back = t + rng.expovariate(1 / (down_hours * HOUR))
            out.append((t, back, n))
            t = back
    return out


class ElasticReplay(GangReplay):
    """`GangReplay`'s builtin admission with widths, restarts and lost nodes. Rigid without losses it makes the
    same decisions as `GangReplay` (tests/gang/test_elastic_replay.py checks it)."""

    def __init__(self, jobs: list[Job], nodes: int, gpus_per_node: int, knobs: Knobs,
                 losses: Sequence[tuple[float, float, int]] = (), starvation_passes: int = 10):
        super().__init__(jobs, nodes, gpus_per_node, "builtin", starvation_passes)
        self.knobs = knobs
        self.r = Run()
        self.events: list[tuple[float, int, int, int]] = [(t, k, i, 0) for t, k, i in self.events]  # type: ignore
        heapq.heapify(self.events)
        self.lost = {}  # event id → node
        for k, (down, up, node) in enumerate(losses):
            heapq.heappush(self.events, (down, DOWN, k, 0))
            heapq.heappush(self.events, (up, UP, k, 0))
            self.lost[k] = f"node-{node:03d}"
        self.down: dict[str, int] = {}  # node → overlapping losses
        self.bounds: dict[int, tuple[int, int]] = {}
        for j in jobs:
            self.r.width[j.id] = j.workers
            self.r.remaining[j.id] = j.duration
            if knobs.elastic and j.workers > 1:
                self.bounds[j.id] = (math.ceil(j.workers / 2), j.workers)
        self.full: dict[str, dict[str, Decimal]] = {}
        self.wider_since: dict[int, float] = {}
        self.last_resize: dict[int, float] = {}
        self.no_room_waits = False
        self.first_start: dict[int, float] = {}
        self.checks: dict[int, float] = {}  # job → the time of its pending widen check
        self.requests: dict[tuple[int, int], GangRequest] = {}
        self.roomier = False  # capacity freed (or the last gang waiting for room admitted) since widen() looked

    # -- the event loop -------------------------------------------------------------------------------------
    def run(self):  # type: ignore[override]
        up = self.n_nodes * self.gpn
        while self.events:
            t = self.events[0][0]
            lo, hi = min(self.now, self.window), min(t, self.window)
            self.r.busy += self.running_gpus * (hi - lo)
            self.r.available += up * (hi - lo)
            self.now = t
            while self.events and self.events[0][0] == t:
                _, kind, ident, version = heapq.heappop(self.events)
                if kind == FINISH and version == self.r.version.get(ident, 0):
                    job = self.jobs[ident]
                    self.running_gpus -= self.r.width[ident] * job.per_worker
                    self.r.remaining[ident] = 0.0
                    self.finish(job)
                elif kind == ARRIVE:
                    self.arrive(self.jobs[ident])
                elif kind == DOWN:
                    up -= self.gpn * self.node_down(self.lost[ident])
                elif kind == UP:
                    up += self.gpn * self.node_up(self.lost[ident])
            self.schedule()
            if self.knobs.elastic:
                self.widen()
            self.outcome.queue_samples.append((t, len(self.queue)))
            self.r.util_samples.append((t, self.running_gpus, up))
        self.outcome.unfinished = sum(1 for j in self.jobs if j.end is None)
        return self.outcome

    # -- requests at a width --------------------------------------------------------------------------------
    def request(self, job: Job, width: int) -> GangRequest:
        """The job's gang at ``width``: an elastic one is `gang_at` of its gang at max, kept per width so a pass
        parses its pods once (as the operator keeps each queued job's parsed request)."""
        found = self.requests.get((job.id, width))
        if found is None:
            pods = tuple(pod_dict(f"j{job.id}-worker-{i}", job.per_worker) for i in range(job.workers))
            if job.id in self.bounds:
                for pod in pods:
                    pod["metadata"]["labels"] = WORKER_LABELS
            found = GangRequest(str(job.id), pods, arrival=job.submit)
            if width != job.workers:
                found = gang_at(found, width)
            self.requests[(job.id, width)] = found
        return found

    def arrive(self, job: Job) -> None:
        if job.id in self.bounds:
            self.queue[str(job.id)] = self.request(job, self.r.width[job.id])
        else:
            super().arrive(job)

    def schedule(self) -> None:
        if not self.queue:
            self.roomier |= self.no_room_waits
            self.no_room_waits = False
        if not self.queue or self.free_gpus == 0:
            return
        elastic = {key: Elastic(*self.bounds[int(key)], width=self.r.width[int(key)],
                                at=partial(self.request, self.jobs[int(key)]))
                   for key in self.queue if int(key) in self.bounds}
        result = self.admit(elastic)
        # A waiting elastic gang that fits narrower is recreated at that width; the next pass admits it.
        narrower = {k: w for k, w in result.fits.items() if k not in result.admitted and w is not None}
        if narrower:
            for key, width in narrower.items():
                self.set_width(int(key), width)
                self.queue[key] = self.request(self.jobs[int(key)], width)
            self.schedule()

    def admit(self, elastic: dict[str, Elastic] | None = None) -> AdmissionResult:
        result = super().admit(elastic)
        waits = any(w.kind is WaitKind.NO_ROOM for w in result.waits.values())
        self.roomier |= self.no_room_waits and not waits
        self.no_room_waits = waits
        return result

    def set_width(self, jid: int, width: int) -> None:
        if width != self.r.width[jid]:
            if jid in self.first_start:  # a restarted gang, not the first start choosing its width
                self.r.resizes += 1
                self.last_resize[jid] = self.now
            self.r.width[jid] = width

    # -- attempts -------------------------------------------------------------------------------------------
    def rate(self, job: Job) -> float:
        w = self.r.width[job.id]
        return 1.0 if w == job.workers else min(1.0, self.knobs.efficiency * w / job.workers)

    def start(self, job: Job) -> None:
        penalty = 0.0 if job.id not in self.first_start else self.knobs.restart_penalty
        self.first_start.setdefault(job.id, self.now)
        if job.start is None:
            job.start = self.now
        gpus = self.r.width[job.id] * job.per_worker
        self.running_gpus += gpus
        self.r.penalty_gpu_seconds += penalty * gpus
        self.r.attempt[job.id] = (self.now, penalty)
        job.end = self.now + penalty + self.r.remaining[job.id] / self.rate(job)
        heapq.heappush(self.events, (job.end, FINISH, job.id, self.r.version.get(job.id, 0)))

    def stop(self, job: Job) -> None:
        """End the running attempt: progress kept (saved on SIGTERM), its pods' capacity given back."""
        began, penalty = self.r.attempt.pop(job.id)
        done = max(0.0, self.now - began - penalty) * self.rate(job)
        self.r.remaining[job.id] = max(0.0, self.r.remaining[job.id] - done)
        self.r.version[job.id] = self.r.version.get(job.id, 0) + 1
        job.end = None
        self.running_gpus -= self.r.width[job.id] * job.per_worker
        self.finish(job)  # gives back its pods' capacity
        self.r.restarts += 1
        self.wider_since.pop(job.id, None)

    def finish(self, job: Job) -> None:
        req = pod_requests(job.per_worker)
        for node in self.placed.pop(job.id).values():
            self.cluster.give(node, req)
        self.roomier = True
        self.free_gpus = int(self.cluster.free[:, self.cluster.gpu].sum()) // 1000

    def node_down(self, node: str) -> int:
        """Lose a node: the gangs on it restart (back in the queue at their width). 1 if it was up."""
        self.down[node] = self.down.get(node, 0) + 1
        if self.down[node] > 1:
            return 0
        for jid in [j for j, placement in self.placed.items() if node in placement.values()]:
            self.stop(self.jobs[jid])
            self.queue[str(jid)] = self.request(self.jobs[jid], self.r.width[jid])
        row = self.cluster.alloc[self.cluster.node_index[node]]  # all of it free now: nothing runs there
        self.full[node] = {name: Decimal(int(row[i])) / 1000 for i, name in enumerate(self.cluster.resource_names)}
        self.cluster.take(node, self.full[node])
        self.free_gpus = int(self.cluster.free[:, self.cluster.gpu].sum()) // 1000
        return 1

    def node_up(self, node: str) -> int:
        self.down[node] -= 1
        if self.down[node]:
            return 0
        del self.down[node]
        self.cluster.give(node, self.full.pop(node))
        self.roomier = True
        self.free_gpus = int(self.cluster.free[:, self.cluster.gpu].sum()) // 1000
        return 1

    # -- widening -------------------------------------------------------------------------------------------
    def widen(self) -> None:
        """Running elastic gangs below max: widen once room has lasted and the cooldown has passed."""
        roomier, self.roomier = self.roomier, False
        for jid in [j for j in self.placed if j in self.bounds and self.r.width[j] < self.bounds[j][1]]:
            if not roomier and jid not in self.wider_since:
                continue  # no capacity freed since it last looked: still no room (the operator would look)
            job = self.jobs[jid]
            fits = self.fits(job) if self.free_gpus >= job.per_worker and not self.no_room_waits else None
            if fits is None or fits <= self.r.width[jid]:
                self.wider_since.pop(jid, None)
                continue
            since = self.wider_since.setdefault(jid, self.now)
            last = self.last_resize.get(jid, self.first_start[jid])
            ready = max(since + WIDEN_STABLE_SECONDS, last + self.knobs.cooldown)
            if self.now < ready:
                if self.checks.get(jid) != ready:
                    self.checks[jid] = ready
                    heapq.heappush(self.events, (ready, CHECK, jid, 0))
                continue
            self.stop(job)
            self.set_width(jid, min(fits, self.bounds[jid][1]))
            self.queue[str(jid)] = self.request(job, self.r.width[jid])
            self.schedule()

    def fits(self, job: Job) -> int | None:
        own: dict[str, dict[str, Decimal]] = {}
        for node in self.placed[job.id].values():
            held = own.setdefault(node, {})
            for name, value in pod_requests(job.per_worker).items():
                held[name] = held.get(name, Decimal(0)) + value
        # Only a width above the current one matters: searching (current, max] decides the same, in fewer probes.
        width = self.r.width[job.id]
        return widest_fit(self.cluster, self.request(job, width), (width + 1, self.bounds[job.id][1]), own)


@dataclass
class Result:
    mode: str
    jobs: list[Job]
    run: Run
    seconds: float

    def jct(self) -> list[float]:
        return [(j.end - j.submit) / HOUR for j in self.jobs if j.end is not None]

    def summary(self) -> dict[str, float]:
        waits = [(j.start - j.submit) / HOUR for j in self.jobs if j.start is not None]
        return {
            "util": 100 * self.run.busy / self.run.available,
            "jct": statistics.mean(self.jct()),
            "wait": statistics.mean(waits),
            "resizes": self.run.resizes,
            "restarts": self.run.restarts,
            "penalty_gpu_h": self.run.penalty_gpu_seconds / HOUR,
            "unfinished": sum(1 for j in self.jobs if j.end is None),
        }


def replay(rows: list[tuple[float, float, int]], knobs: Knobs, losses: Sequence[tuple[float, float, int]] = (),
           nodes: int = 64, gpn: int = 8, g: int = 1, passes: int = 10) -> Result:
    jobs = make_jobs(rows, g)
    began = time.perf_counter()
    sim = ElasticReplay(jobs, nodes, gpn, knobs, losses, passes)
    sim.run()
    return Result("elastic" if knobs.elastic else "rigid", jobs, sim.r, time.perf_counter() - began)


def plot(results: dict[str, Result], path: Path, title: str) -> None:
    fig, (cdf, util) = figures.subplots(1, 2, figsize=(13, 4.5))
    styles = {"rigid": ("tab:blue", "-"), "elastic": ("tab:green", "-"),
              "rigid+loss": ("tab:blue", "--"), "elastic+loss": ("tab:green", "--")}
    for name, res in results.items():
        colour, ls = styles[name]
        jct = sorted(res.jct())
        cdf.plot(jct, np.linspace(0, 1, len(jct)), color=colour, ls=ls, label=name)
        if name.endswith("+loss"):
            s = np.array(res.run.util_samples, dtype=float)
            bins = np.arange(0, s[-1, 0] + HOUR, HOUR)
            idx = np.clip(np.searchsorted(s[:, 0], bins, side="right") - 1, 0, len(s) - 1)
            util.plot(bins / HOUR / 24, 100 * s[idx, 1] / np.maximum(s[idx, 2], 1), color=colour, lw=0.7,
                      label=f"{name}: GPUs held / GPUs up")
            if name == "rigid+loss":
                util.plot(bins / HOUR / 24, 100 * s[idx, 2] / s[0, 2], color="grey", lw=0.7, label="GPUs up")
    cdf.set_xscale("log")
    cdf.set_xlabel("job completion time (hours, log)")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_title("JCT CDF (dashed: with node preemptions)")
    cdf.legend()
    util.set_xlabel("simulated time (days)")
    util.set_ylabel("%")
    util.set_ylim(0, 105)
    util.set_title("with node preemptions: utilisation (hourly)")
    util.legend(fontsize=8)
    figures.save(fig, path, title)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--cluster-file", default="cluster03.csv")
    parser.add_argument("--speedup", type=float, default=4.0, help="divide inter-arrival times by this")
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N jobs (0: all)")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--efficiency", type=float, default=1.0,
                        help="a gang at width w progresses at efficiency x w/W of its rigid speed (capped at 1)")
    parser.add_argument("--restart-penalty", type=float, default=60.0, help="seconds without progress per restart")
    parser.add_argument("--cooldown", type=float, default=300.0, help="resizeCooldownSeconds")
    parser.add_argument("--loss-per-node-day", type=float, default=0.5, help="node losses per node per day")
    parser.add_argument("--down-hours", type=float, default=2.0, help="mean hours a lost node stays away")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--png", type=Path, default=RESULTS / "elastic_replay.png")
    args = parser.parse_args()

    started = time.perf_counter()
    rows = load_trace(args.trace, args.cluster_file, args.speedup, args.limit or None)
    window = rows[-1][0]
    losses = preemptions(args.nodes, window, args.loss_per_node_day, args.down_hours, args.seed)
    multi = sum(1 for _, _, n in rows if n > 1)
    print(f"trace: {args.cluster_file}, {len(rows)} jobs ({multi} multi-worker at 1 GPU per worker), arrivals "
          f"x{args.speedup:g} over {window / HOUR / 24:.1f} days; {args.nodes} x {args.gpus_per_node} GPUs")
    print(f"elastic: min = ceil(W/2), max = W; efficiency {args.efficiency:g} x w/W; restart penalty "
          f"{args.restart_penalty:g} s; cooldown {args.cooldown:g} s + {WIDEN_STABLE_SECONDS} s of lasting room")
    print(f"preemptions (seed {args.seed}): {len(losses)} node losses ({args.loss_per_node_day:g} per node-day, "
          f"back after {args.down_hours:g} h on average) during the submission window")
    results: dict[str, Result] = {}
    print(f"\n  {'run':<13} {'GPU util':>8} {'mean JCT':>9} {'mean wait':>9} {'resizes':>7} {'restarts':>8} "
          f"{'penalty GPU-h':>13} {'unfinished':>10} {'seconds':>7}")
    for name, elastic, lost in (("rigid", False, []), ("elastic", True, []),
                                ("rigid+loss", False, losses), ("elastic+loss", True, losses)):
        knobs = Knobs(elastic, args.efficiency, args.restart_penalty, args.cooldown)
        res = replay(rows, knobs, lost, args.nodes, args.gpus_per_node)
        results[name] = res
        s = res.summary()
        print(f"  {name:<13} {s['util']:>7.1f}% {s['jct']:>8.1f}h {s['wait']:>8.1f}h {s['resizes']:>7.0f} "
              f"{s['restarts']:>8.0f} {s['penalty_gpu_h']:>13.0f} {s['unfinished']:>10.0f} {res.seconds:>7.1f}")
    plot(results, args.png, f"ITP {args.cluster_file}, {len(rows)} jobs on {args.nodes}x{args.gpus_per_node} GPUs, "
                            f"G=1, rigid vs elastic (min = W/2)")
    print(f"\nwrote {args.png}")
    s = {k: r.summary() for k, r in results.items()}
    print(
        f"SUMMARY jobs={len(rows)} losses={len(losses)} "
        + " ".join(f"util_{k.replace('+loss', '_loss')}={v['util']:.1f}%" for k, v in s.items()) + " "
        + " ".join(f"jct_{k.replace('+loss', '_loss')}={v['jct']:.1f}h" for k, v in s.items()) + " "
        + " ".join(f"wait_{k.replace('+loss', '_loss')}={v['wait']:.1f}h" for k, v in s.items()) + " "
        + f"resizes_elastic={s['elastic']['resizes']:.0f} resizes_elastic_loss={s['elastic+loss']['resizes']:.0f} "
        f"replay={time.perf_counter() - started:.0f}s"
    )


if __name__ == "__main__":
    main()
