"""Run every benchmark in bench/ within a time budget and print one table: figure, value, goal, met or not.

    .venv/bin/python bench/run_all.py [--only NAME ...] [--results DIR] [--list]     (`make bench` runs it)

Each bench runs in its own process with the sizes in BENCHES and its share of the 15-minute budget. Its full
output goes live to the terminal and to <results>/<bench>.txt; its figures come from the one `SUMMARY key=value
...` line every bench ends with. A bench that fails or outlives its share (SIGINT, then SIGKILL to its process
group) shows as such in the table and the runner goes on with the next. The table is written to
<results>/summary.txt.

The goals live here and nowhere else (FIGURES): benches print figures, this table judges them. A goal's bound is
a number or, for a floor the bench computes from its own sizes, the SUMMARY key that holds it. A time goal is a
ratio to a floor the bench measured in the same run on the same machine (`Goal("<=", 3.0, floor="key")`: the
figure is at most 3 x the floor): a machine half as fast slows the figure and its floor alike.

Each bench sizes its work to its share (a `--budget` a little under it, or fixed sizes measured to take at most
half of it on 2 cores), so that `make bench` finishes on a machine half as fast as the one it was sized on.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results"
BUDGET_SECONDS = 15 * 60
# After SIGINT a bench gets this long to stop its control plane, operator and pods before SIGKILL.
STOP_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Bench:
    """One benchmark process: `bench/<name>.py` with `args` ({results} is the results directory)."""

    name: str
    args: tuple[str, ...]
    share: float  # seconds of the budget it may use
    sizes: str  # what the args mean, for the table's reader


@dataclass(frozen=True)
class Goal:
    op: str  # "<=", "<", ">=", ">", or "all" for a `done/total` figure
    bound: float | str = math.nan  # a number, or the SUMMARY key of a bound the bench computed
    unit: str = ""
    #: The SUMMARY key of a floor measured in the same run: the figure is judged as figure / floor against bound.
    floor: str = ""

    def text(self, summary: dict[str, str]) -> str:
        if self.op == "all":
            return "all"
        bound = self.bound if isinstance(self.bound, float) else summary.get(self.bound, f"{self.bound}?")
        shown = _fmt(bound) if isinstance(bound, float) else bound
        if self.floor:
            return f"{self.op} {shown} x floor ({summary.get(self.floor, '?')})"
        return f"{self.op} {shown}{(' ' + self.unit) if self.unit else ''}"


@dataclass(frozen=True)
class Figure:
    bench: str
    key: str  # SUMMARY key; a shell-style pattern matches keys that carry their size (get_p99_burst_*)
    label: str
    goal: Goal | None = None


# Sizes fit the 15 minutes on 2 cores twice over (measured: docs/performance.md): on a machine half as fast the
# benches with a --budget do less (fewer repeats, later phases or sizes skipped), the others take at most half
# their share here. Each bench's own defaults stay the full-size runs of its docstring. Shares total 890 s,
# leaving room to stop a bench.
BENCHES: tuple[Bench, ...] = (
    Bench("worker_metrics", (), 15, "2000 scrapes, 200,000 steps"),
    Bench("emulator_throughput", (), 25, "1000 objects, 10 watchers"),
    Bench("gang_replay", ("--png", "{results}/gang_replay.png"), 55,
          "ITP cluster03 (3,011 jobs) on 64 x 8 GPUs; admission pass 1000 jobs x 1000 nodes"),
    Bench("elastic_replay", ("--limit", "1000", "--png", "{results}/elastic_replay.png"), 20,
          "ITP cluster03 jobs 0-999 on 64 x 8 GPUs, G=1: rigid vs elastic (min = W/2), without and with seeded "
          "node preemptions"),
    Bench("taint_manager", ("--pods", "4000", "--window", "5"), 25,
          "4,000 cached pods, one NoExecute-tainted node, 5 s quiet window"),
    Bench("progress_scale", ("--jobs", "12", "--train", "20"), 60, "12 jobs, progress every 5 s, 20 s training"),
    # The burst before the after-finished phase: the table needs it; --budget skips what does not fit.
    Bench("local_scale", ("--pods", "10000", "--finished", "2000", "--burst-jobs", "500", "--budget", "120",
                          "--plot", "{results}/local_scale.png"), 130,
          "2,000 plain creates (floor); 10,000 gated creates; GET p99 in a 500 x 4 burst; creates after 2,000 ran"),
    # 1000 x 4 real pods takes about 300 s on this machine (the Python plane's cost per pod): run alone, its figures
    # are in docs/performance.md; --budget skips a size the last one's pace says cannot finish.
    Bench("operator_scale", ("--sweep", "100,250", "--budget", "160", "--plot", "{results}/operator_scale.png"), 190,
          "N TFJobs x 4 workers, pods exit at once, N = 100, 250 within 160 s; each after a plain controller's same "
          "burst (floor); 1000 x 4 when run alone"),
    Bench("runtime_overhead", ("--budget", "120", "--plot", "{results}/runtime_overhead.png"), 135,
          "conv net (>= 20 ms step) and tiny MLP, interleaved repeats within 120 s; recovery"),
    Bench("live_replay", ("--first", "2750", "--jobs", "250", "--speed", "2400", "--budget", "72", "--png",
                          "{results}/live_replay.png"), 85,
          "ITP cluster03 jobs 2750-2999 through the live operator on 64 simulated 8-GPU nodes at x2400"),
    Bench("operator_10k", ("--jobs", "400", "--running", "80", "--nodes", "20", "--idle", "25", "--burst", "15"),
          150, "400 TFJobs (80 x 4 running) on 20 simulated nodes: requests, idle, restart, 410, failover "
          "(full size, 10,000 jobs, when run alone)"),
)

# Bench scripts that another bench runs (their figures come in that bench's SUMMARY).
RUN_BY: dict[str, str] = {"recovery_time": "runtime_overhead"}
# Bench scripts `make bench` leaves to be run alone, and why.
RUN_ALONE: dict[str, str] = {
    "sim_nodes": "the simulated nodes' own cost to the plane at 1,000 nodes (several minutes; its figures are in "
                 "docs/local-cluster.md)",
    "elastic_recovery": "a node lost under an elastic gang of real TensorFlow workers -> training at 3 (about 1.5 min; "
                        "not yet in the budget: its figures are in docs/elastic.md)",
    "upstream_start": "the upstream plane's start and memory: needs the binaries `make upstream` builds with Go, which "
                      "`make bench` does not (its figures are in docs/local-cluster.md)",
    "kubeflow_side": "tfjob-operator beside Kubeflow's training-operator on the upstream plane: needs Go to build both "
                     "(`python -m kubelocal.upstream.build k8s training-operator`); about 10 minutes at 100 x 4 (its "
                     "figures are in docs/performance.md)",
}

FIGURES: tuple[Figure, ...] = (
    Figure("operator_scale", "jobs100_created_p99", "operator 100x4: submit -> all pods created p99",
           Goal("<=", 2.0, floor="jobs100_created_floor")),
    Figure("operator_scale", "jobs100_succeeded_p99", "operator 100x4: submit -> Succeeded p99"),
    Figure("operator_scale", "jobs100_requests_per_job", "operator 100x4: API requests per job",
           Goal("<=", "jobs100_requests_floor")),
    Figure("operator_scale", "jobs100_peak_rss_mib", "operator 100x4: operator peak RSS, MiB"),
    Figure("operator_scale", "jobs250_created_p99", "operator 250x4: submit -> all pods created p99",
           Goal("<=", 2.0, floor="jobs250_created_floor")),
    Figure("operator_scale", "jobs250_succeeded_p99", "operator 250x4: submit -> Succeeded p99"),
    Figure("operator_scale", "jobs250_succeeded", "operator 250x4: jobs Succeeded in the bench's time",
           Goal("all")),
    Figure("operator_scale", "jobs250_requests_per_job", "operator 250x4: API requests per job",
           Goal("<=", "jobs250_requests_floor")),
    Figure("operator_scale", "jobs250_peak_rss_mib", "operator 250x4: operator peak RSS, MiB", Goal("<", 200.0)),
    Figure("local_scale", "total", "local plane: 10,000 gated creates, total",
           Goal("<=", 1.5, floor="total_floor")),
    Figure("local_scale", "ratio", "local plane: last / first 500-create bucket", Goal("<=", 1.2)),
    Figure("local_scale", "get_p99_burst_*", "local plane: GET p99 during a burst of pods", Goal("<=", 50.0, "ms")),
    Figure("taint_manager", "idle_cpu_ms_per_s", "local plane: taint manager idle CPU at 4,000 pods, ms/s"),
    Figure("gang_replay", "admission_pass_g8", "admission pass, 1000 jobs x 1000 nodes (8 GPUs/worker)",
           Goal("<=", 50.0, "ms")),
    Figure("gang_replay", "admission_pass_g1", "admission pass, 1000 jobs x 1000 nodes (1 GPU/worker)",
           Goal("<=", 50.0, "ms")),
    Figure("gang_replay", "jct_builtin_g1", "trace replay: mean JCT, builtin gang (1 GPU/worker)"),
    Figure("gang_replay", "jct_no_gang_g1", "trace replay: mean JCT, no gang (1 GPU/worker)"),
    # No goals: what elastic gangs gain depends on the load and the model's knobs (docs/elastic.md).
    Figure("elastic_replay", "jct_rigid_loss", "elastic replay: mean JCT, rigid gangs, node preemptions (h)"),
    Figure("elastic_replay", "jct_elastic_loss", "elastic replay: mean JCT, elastic gangs, node preemptions (h)"),
    Figure("elastic_replay", "util_rigid_loss", "elastic replay: GPU utilisation, rigid, node preemptions"),
    Figure("elastic_replay", "util_elastic_loss", "elastic replay: GPU utilisation, elastic, node preemptions"),
    Figure("elastic_replay", "resizes_elastic_loss", "elastic replay: resizes, elastic, node preemptions"),
    Figure("live_replay", "done", "live trace replay (ITP, 400 jobs, x2400): jobs done in the bench's time",
           Goal("all")),
    Figure("live_replay", "jct_live", "live trace replay: mean JCT, live operator (simulated h)",
           Goal("<=", 1.25, floor="jct_resubmitted_done")),
    Figure("live_replay", "jct_pure", "live trace replay: mean JCT, pure replay of the same jobs (simulated h)"),
    Figure("live_replay", "start_latency_wall", "live trace replay: submit -> all pods Running, jobs that fit at once"),
    Figure("runtime_overhead", "ratio", "runtime / plain tf-keras throughput, conv net (median)", Goal(">=", 0.98)),
    Figure("runtime_overhead", "step_ms", "conv net step of the plain script, ms", Goal(">=", 20.0)),
    Figure("runtime_overhead", "mlp_ratio", "runtime / plain, tiny MLP (start-up dominated)"),
    Figure("runtime_overhead", "mwms_ratio", "runtime / plain, 2 MWMS workers"),
    Figure("runtime_overhead", "recovery", "worker SIGKILL -> resumed epoch"),
    Figure("runtime_overhead", "recovery_ours", "recovery: of it ours (beyond TF import, peers)", Goal("<=", 1.0, "s")),
    Figure("emulator_throughput", "list_rps", "emulator: list of 1000 objects, req/s"),
    Figure("emulator_throughput", "patch_rps", "emulator: patch, req/s"),
    Figure("emulator_throughput", "watch_events_per_s", "emulator: watch fan-out, events/s"),
    Figure("progress_scale", "writes_per_s_training", "progress: status writes/s while training",
           Goal("<=", "writes_bound")),
    Figure("progress_scale", "writes_per_s_idle", "progress: status writes/s idle", Goal("<=", 0.0)),
    Figure("worker_metrics", "scrape_p50", "worker /metrics scrape p50"),
    Figure("worker_metrics", "step_cost", "trainer's per-step report cost"),
    # Requests per job counted on the wire (bench/wire_proxy.py), the deletes cleanPodPolicy asks for apart.
    Figure("operator_scale", "jobs100_requests_rest", "operator 100x4: requests per job on the wire, without "
           "cleanPodPolicy deletes", Goal("<=", 13.5)),
    Figure("operator_scale", "jobs100_cleanup_deletes", "operator 100x4: cleanPodPolicy deletes per job"),
    Figure("operator_scale", "jobs250_requests_rest", "operator 250x4: requests per job on the wire, without "
           "cleanPodPolicy deletes", Goal("<=", 13.5)),
    Figure("operator_scale", "jobs250_cleanup_deletes", "operator 250x4: cleanPodPolicy deletes per job"),
    # operator_10k: a cluster of TFJobs on simulated nodes, the operator counted on the wire. Goals: what
    # client-go controllers reach (a resync or relist writes nothing when nothing changed; a standby takes over
    # within leaseDuration 15 s + retryPeriod 2 s plus its cache sync) and this bench's numbers.
    Figure("operator_10k", "requests_rest", "operator, N-job cluster: requests per job on the wire, without "
           "cleanPodPolicy deletes", Goal("<=", 13.5)),
    Figure("operator_10k", "cleanup_deletes", "operator, N-job cluster: cleanPodPolicy deletes per job"),
    Figure("operator_10k", "idle_operator_cpu", "operator idle CPU with the running jobs (% of a core)",
           Goal("<=", 5.0, "%")),
    Figure("operator_10k", "idle_plane_cpu", "local plane idle CPU with the running jobs (% of a core)"),
    Figure("operator_10k", "idle_status_writes_per_s", "status writes/s from progress polling, idle",
           Goal("<=", 0.0)),
    Figure("operator_10k", "restart_s", "operator restart: every job reconciled once", Goal("<=", 30.0, "s")),
    Figure("operator_10k", "restart_rss_mib", "operator restart: peak RSS, MiB", Goal("<", 300.0)),
    Figure("operator_10k", "restart_writes", "operator restart: writes (no job changed)", Goal("<=", 0.0)),
    Figure("operator_10k", "expire_missed", "watch expired (410) mid-burst: jobs missed", Goal("<=", 0.0)),
    Figure("operator_10k", "expire_created_twice", "watch expired (410) mid-burst: pods created twice",
           Goal("<=", 0.0)),
    Figure("operator_10k", "expire_old_writes", "watch expired (410): writes to unchanged jobs", Goal("<=", 0.0)),
    Figure("operator_10k", "failover_first_write_s", "failover mid-burst: leader killed -> standby's first write",
           Goal("<=", 30.0, "s")),
    Figure("operator_10k", "failover_lost", "failover mid-burst: jobs lost", Goal("<=", 0.0)),
    Figure("operator_10k", "failover_created_twice", "failover mid-burst: pods created twice", Goal("<=", 0.0)),
)

_SUMMARY_TOKEN = re.compile(r"(?<![\w.])([A-Za-z_]\w*)=(\S+)")
_NUMBER = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(\S*)$")
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0}


def parse_summary(output: str) -> dict[str, str]:
    """The key=value figures of the last line that starts with SUMMARY; words around them are ignored."""
    for line in reversed(output.splitlines()):
        if line.startswith("SUMMARY"):
            return {k: v.rstrip(";,)") for k, v in _SUMMARY_TOKEN.findall(line)}
    return {}


def parse_number(text: str) -> tuple[float, str] | None:
    """`1.23s` -> (1.23, "s"); `162` -> (162.0, ""); None if the text is not a number with a unit."""
    m = _NUMBER.match(text.strip())
    return (float(m.group(1)), m.group(2)) if m else None


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass
class Outcome:
    """How one bench's process ended and what it printed."""

    bench: str
    seconds: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    share: float = 0.0
    error: str = ""  # could not start
    summary: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.error and self.returncode == 0

    def status(self) -> str:
        if self.error:
            return f"did not run: {self.error}"
        if self.timed_out:
            return f"exceeded its share of {self.share:.0f} s (stopped)"
        if self.returncode != 0:
            return f"failed (exit {self.returncode})"
        return "ok"


@dataclass(frozen=True)
class Row:
    label: str
    value: str
    goal: str
    verdict: str  # met, NOT met, "-" (no goal), or why there is no figure


def _compare(value: float, op: str, bound: float) -> bool:
    return {"<=": value <= bound, "<": value < bound, ">=": value >= bound, ">": value > bound}[op]


def judge(figure: Figure, outcome: Outcome | None) -> Row:
    """One table row: the figure's value from its bench's SUMMARY and whether it meets its goal."""
    summary = outcome.summary if outcome else {}
    goal_text = figure.goal.text(summary) if figure.goal else "-"
    keys = [k for k in summary if fnmatch.fnmatchcase(k, figure.key)]
    if outcome is None:
        return Row(figure.label, "-", goal_text, "not run")
    if not keys:
        why = outcome.status() if not outcome.ok else f"no {figure.key} in its SUMMARY"
        return Row(figure.label, "-", goal_text, why)
    raw = summary[keys[0]]
    if figure.goal is None:
        return Row(figure.label, raw, goal_text, "-" if outcome.ok else f"-; bench {outcome.status()}")
    if figure.goal.floor:
        ratio = floor_ratio(raw, summary.get(figure.goal.floor, ""))
        if ratio is None:
            verdict = "no figure" if parse_number(raw) is None else f"no {figure.goal.floor} in its SUMMARY"
        else:
            verdict = "met" if _compare(ratio, figure.goal.op, float(figure.goal.bound)) else "NOT met"
            raw = f"{raw} = {ratio:.2f} x floor"
    else:
        verdict = _verdict(raw, figure.goal, summary)
    if not outcome.ok:
        verdict += f"; bench {outcome.status()}"
    return Row(figure.label, raw, goal_text, verdict)


def floor_ratio(raw: str, floor: str) -> float | None:
    """`1.2s` over a floor of `400ms` -> 3.0; None if either is not a number or their units do not compare."""
    value, bound = parse_number(raw), parse_number(floor)
    if value is None or bound is None or not bound[0] > 0 or math.isnan(value[0]):
        return None
    (v, v_unit), (b, b_unit) = value, bound
    if v_unit in _SECONDS and b_unit in _SECONDS:
        return v * _SECONDS[v_unit] / (b * _SECONDS[b_unit])
    return v / b if v_unit == b_unit else None


def _verdict(raw: str, goal: Goal, summary: dict[str, str]) -> str:
    if goal.op == "all":
        done, _, total = raw.partition("/")
        return "met" if total and done == total else "NOT met"
    value = parse_number(raw)
    bound = parse_number(summary.get(goal.bound, "")) if isinstance(goal.bound, str) else (goal.bound, goal.unit)
    if value is None or bound is None or math.isnan(value[0]):
        return "no figure" if value is None or math.isnan(value[0]) else f"no {goal.bound} in its SUMMARY"
    (v, v_unit), (b, b_unit) = value, (bound[0], bound[1] or goal.unit)
    if v_unit in _SECONDS and b_unit in _SECONDS:
        v, b = v * _SECONDS[v_unit], b * _SECONDS[b_unit]
    elif v_unit and b_unit and v_unit != b_unit:
        return f"unit {v_unit} vs goal's {b_unit}"
    return "met" if _compare(v, goal.op, b) else "NOT met"


def table(outcomes: dict[str, Outcome], figures: Iterable[Figure] = FIGURES) -> list[Row]:
    return [judge(f, outcomes.get(f.bench)) for f in figures if f.bench in outcomes]


def render(rows: Sequence[Row], outcomes: Sequence[Outcome], header: str = "") -> str:
    """The summary as Markdown: figures with goals, then how each bench ran."""
    lines = [header, ""] if header else []
    lines += ["| figure | value | goal | met |", "|---|---|---|---|"]
    lines += [f"| {r.label} | {r.value} | {r.goal} | {r.verdict} |" for r in rows]
    lines += ["", "| bench | seconds | share | run |", "|---|---|---|---|"]
    lines += [f"| {o.bench} | {o.seconds:.0f} | {o.share:.0f} | {o.status()} |" for o in outcomes]
    return "\n".join(lines) + "\n"


def _stop(proc: subprocess.Popen[str], flag: threading.Event) -> None:
    """Out of time: SIGINT lets the bench tear down its cluster and pods; SIGKILL the group if it lingers."""
    flag.set()
    for sig, wait in ((signal.SIGINT, STOP_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run(bench: Bench, results: Path, echo: Callable[[str], None], script_dir: Path = BENCH_DIR) -> Outcome:
    """Run one bench, teeing its output to <results>/<name>.txt; stop it when its share is spent."""
    outcome = Outcome(bench.name, share=bench.share)
    cmd = [sys.executable, "-u", str(script_dir / f"{bench.name}.py"), *(a.format(results=results) for a in bench.args)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with (results / f"{bench.name}.txt").open("w") as out:
        out.write(f"# {shlex.join(cmd)}\n# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
                  f"load average {_load()} at start; share {bench.share:.0f} s\n")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)
        except OSError as e:
            outcome.error = str(e)
            return outcome
        timed_out = threading.Event()
        timer = threading.Timer(bench.share, _stop, (proc, timed_out))
        timer.daemon = True
        timer.start()
        captured = []
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                captured.append(line)
                out.write(line)
                out.flush()
                echo(line)
            proc.wait()
        except KeyboardInterrupt:
            # The bench has its own session (so a stop reaches its whole group): pass the Ctrl-C on.
            timer.cancel()
            _stop(proc, threading.Event())
            raise
        timer.cancel()
        outcome.seconds = time.monotonic() - started
        outcome.returncode = proc.returncode
        outcome.timed_out = timed_out.is_set()
        outcome.summary = parse_summary("".join(captured))
        out.write(f"# {outcome.status()} after {outcome.seconds:.0f} s; load average {_load()}\n")
    return outcome


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=[b.name for b in BENCHES],
                        help="run these benches only")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where <bench>.txt, summary.txt and plots go")
    parser.add_argument("--list", action="store_true", help="print the benches, sizes and time shares; run nothing")
    args = parser.parse_args(argv)
    benches = [b for b in BENCHES if not args.only or b.name in args.only]
    if args.list:
        for b in benches:
            print(f"{b.name:<20} {b.share:4.0f} s  {b.sizes}")
        print(f"{'total':<20} {sum(b.share for b in benches):4.0f} s  (budget {BUDGET_SECONDS} s)")
        return 0
    args.results.mkdir(parents=True, exist_ok=True)
    load_before, started = _load(), time.monotonic()
    outcomes: dict[str, Outcome] = {}
    for b in benches:
        print(f"\n=== {b.name} ({b.sizes}; share {b.share:.0f} s)", flush=True)
        try:
            outcomes[b.name] = run(b, args.results, lambda line: print(line, end="", flush=True))
        except KeyboardInterrupt:
            print(f"\nbench/run_all.py: interrupted during {b.name} (stopped it); no summary written", file=sys.stderr)
            return 130
        print(f"=== {b.name}: {outcomes[b.name].status()} in {outcomes[b.name].seconds:.0f} s", flush=True)
    total = time.monotonic() - started
    header = (f"`make bench` {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {len(benches)} benches in {total / 60:.1f} min "
              f"(budget {BUDGET_SECONDS // 60} min) on {os.cpu_count()} CPUs; load average {load_before} before, "
              f"{_load()} after")
    text = render(table(outcomes), list(outcomes.values()), header)
    (args.results / "summary.txt").write_text(text)
    print("\n" + text, end="", flush=True)
    return 0 if all(o.ok for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
