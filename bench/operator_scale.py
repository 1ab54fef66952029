"""Operator at scale: N TFJobs × W workers on the local control plane, pods that exit 0 at once.

Prints p50/p99 of submit → all pods created (and its floor: the same burst through a plain controller in the
measuring client, just before) and submit → Succeeded, the operator's API requests per job by verb and resource
(counted on the wire by a proxy between the operator and the plane: `wire_proxy`), and the operator's peak RSS.
The operator runs as
`tfjob operator` in its own process, as in production; the pods are real (trivial) processes. The control plane
runs in this process (its request log is read in place); the client that submits and watches runs in a third, as
a user's kubectl would, so that it does not take the API server's GIL.

    .venv/bin/python bench/operator_scale.py [--jobs 100] [--workers 4]
    .venv/bin/python bench/operator_scale.py --sweep 100,250,500,1000 [--plot bench/results/operator_scale.png]

The sweep runs each size on a fresh control plane and operator, in the order given, prints a table, plots latency
and operator peak RSS against the number of jobs, and ends with one SUMMARY line whose keys carry the size
(jobs100_created_p99=...). With --budget, a size waits at most for what is left of the budget (its figures then
cover the jobs that finished; `jobsN_succeeded=k/N` says how many), and a size is skipped when the last size's pace
says it cannot finish in what is left (`make bench`: --sweep 100,250 --budget 160; 1000 x 4 is run alone).
--simulated puts the pods on kwok-style simulated nodes (no process each; they still exit 0 at once).
--control-plane upstream runs it on the real control plane (`make upstream`: etcd, kube-apiserver, ...; the proxy
reaches kube-apiserver over TLS as its admin); `both` runs each size on kubelocal, then on upstream, and adds
upstream / kubelocal ratios (`ratio_jobsN_created_p99=...`) and the upstream figures (`up_jobsN_...`) to the SUMMARY.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import figures
import psutil
from kubernetes import client, config, watch

from kubelocal import planes
from kubelocal.apiserver import write_kubeconfig
from tfjob_operator.api.crd import CRD_PATH
from tfjob_operator.client.local.processes import stop_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wire_proxy import for_cluster

BENCH_UA = "tfjob-bench"
RESULTS = Path(__file__).resolve().parent / "results"
# Per size, around the wait for the jobs: control plane and operator start (3 s), the plain controller's floor
# (N x (1 + W) ConfigMap creates, ~8 ms a job), the 2 s tail, tear-down of what still runs and removing the pods'
# directories (grows with the jobs: ~10 s for 200 jobs cut short at load 6, over a minute for 1000 at load 10).
SIZE_OVERHEAD_SECONDS = 15.0
SIZE_OVERHEAD_PER_JOB = 0.09
#: With --budget, a size runs only if the last size's wall time per job, times this, times its jobs fits what is left.
SIZE_MARGIN = 1.2


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


class Watcher(threading.Thread):
    """Records when each pod is first seen and when each job is first Succeeded/Failed (official client watch).

    Its cost is the API server's too: each stream resumes from the last resourceVersion (a new stream without one
    would list every pod again, every 5 s) and events stay plain dicts (decoding thousands of pods into the
    client's models cost seconds)."""

    def __init__(self, api: client.ApiClient, kind: str) -> None:
        super().__init__(daemon=True)
        self.kind = kind
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.first_seen: dict[str, float] = {}
        self.finished: dict[str, tuple[float, str]] = {}
        self.reasons: collections.Counter[str] = collections.Counter()  # of the jobs that Failed
        self.stop = False
        self.w = watch.Watch()

    def run(self) -> None:
        version: str | None = None
        while not self.stop:
            resume = {"resource_version": version} if version else {}
            try:
                if self.kind == "pods":
                    stream = self.w.stream(self.core.list_namespaced_pod, "default", timeout_seconds=5,
                                           deserialize=False, **resume)
                else:
                    stream = self.w.stream(self.custom.list_namespaced_custom_object, "tfjob.dev", "v1", "default",
                                           "tfjobs", timeout_seconds=5, deserialize=False, **resume)
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    self.observe(obj)
            except Exception:
                version = None
                time.sleep(0.1)

    def observe(self, obj: Any) -> None:
        now = time.monotonic()
        if self.kind == "pods":
            self.first_seen.setdefault(obj["metadata"]["name"], now)
            return
        status = obj.get("status") or {}
        state = status.get("state")
        if state in ("Succeeded", "Failed") and obj["metadata"]["name"] not in self.finished:
            self.finished[obj["metadata"]["name"]] = (now, state)
            if state == "Failed":
                conditions = status.get("conditions") or [{}]
                why = next((c for c in conditions if c.get("type") == "Failed"), conditions[-1])
                self.reasons[f"{why.get('reason')}: {why.get('message')}"] += 1


def plain_controller_floor(api: client.ApiClient, jobs: int, workers: int) -> float:
    """The same burst with a plain controller in this client doing the operator's creates: `jobs` parent ConfigMaps
    submitted one after another, a watch creating `workers` child ConfigMaps for each parent it sees; p99 of parent
    submitted -> all its children seen. No operator logic and nothing scheduled: what any client of this control
    plane reaches on this machine, the floor of submit -> all pods created."""
    core = client.CoreV1Api(api)
    run = f"floor-{os.getpid()}"
    submitted: dict[str, float] = {}
    seen: dict[str, list[float]] = collections.defaultdict(list)
    ready, done = threading.Event(), threading.Event()

    def body(name: str, role: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {"bench-floor": run, "role": role}}, "data": {"a": "b"}}

    children: set[str] = set()  # created or seen

    def added(obj: dict[str, Any]) -> None:
        name, role = obj["metadata"]["name"], obj["metadata"]["labels"]["role"]
        if role == "parent":
            for i in range(workers):
                if f"{name}-{i}" not in children:
                    children.add(f"{name}-{i}")
                    core.create_namespaced_config_map("default", body(f"{name}-{i}", "child"),
                                                      _preload_content=False).read()
        elif name not in seen[name.rsplit("-", 1)[0]]:
            seen[name.rsplit("-", 1)[0]].append(time.monotonic())
            children.add(name)
            if len(seen) == jobs and all(len(v) == workers for v in seen.values()):
                done.set()

    def relist() -> str:
        """What an informer does when its watch is refused: list, act on what it had not seen, watch from there."""
        listed = core.list_namespaced_config_map("default", label_selector=f"bench-floor={run}",
                                                 _preload_content=False)
        doc = json.loads(listed.data)
        for obj in doc["items"]:
            added(obj)
        return str(doc["metadata"]["resourceVersion"])

    def controller() -> None:
        rv = core.list_namespaced_config_map("default", limit=1).metadata.resource_version
        ready.set()
        while not done.is_set():
            try:
                for event in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=rv,
                                                  label_selector=f"bench-floor={run}", timeout_seconds=2,
                                                  deserialize=False):
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] == "ADDED":
                        added(obj)
            except KeyError as exc:
                # An ERROR event (the watch expired: 410, or a slow watcher dropped): the client reads its
                # `raw_object`, which only a deserialized event has, so it fails here. List again.
                if exc.args != ("raw_object",):
                    raise
                rv = relist()

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    ready.wait(30)
    for i in range(jobs):
        name = f"{run}-{i:04d}"
        submitted[name] = time.monotonic()
        core.create_namespaced_config_map("default", body(name, "parent"), _preload_content=False).read()
    done.wait(120)
    return percentile([max(seen[n]) - t for n, t in submitted.items() if len(seen[n]) == workers], 99)


def peak_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        try:
            out.append(proc.memory_info().rss)
        except psutil.Error:
            return
        stop.wait(0.2)


@dataclass
class Measured:
    """What the measuring client saw (monotonic seconds, comparable across processes)."""

    submitted: dict[str, float]
    first_seen: dict[str, float]
    finished: dict[str, tuple[float, str]]
    reasons: collections.Counter[str]
    submit_seconds: float
    total_seconds: float
    peak_rss: int
    #: p99 of the same burst through a plain controller in the same client (plain_controller_floor).
    created_floor: float


def measure(kubeconfig: str, jobs: int, workers: int, timeout: float, operator_pid: int, conn: Connection,
            simulated: bool = False) -> None:
    """The measuring client, in its own process: opens the watches and says so, submits the jobs when told, waits
    for them to finish (or `timeout`), sends back what it saw, and samples the operator's RSS until told to stop."""
    api = config.new_client_from_config(kubeconfig)
    api.user_agent = BENCH_UA
    pods_w, jobs_w = Watcher(api, "pods"), Watcher(api, "tfjobs")
    pods_w.start()
    jobs_w.start()
    rss: list[int] = []
    stop_rss = threading.Event()
    threading.Thread(target=peak_rss, args=(operator_pid, stop_rss, rss), daemon=True).start()
    custom = client.CustomObjectsApi(api)
    conn.send("ready")
    conn.recv()
    floor = plain_controller_floor(api, jobs, workers)
    submitted: dict[str, float] = {}
    template: dict[str, Any] = {"spec": {"containers": [{"name": "tensorflow", "image": "local", "command": ["true"]}]}}
    if simulated:  # a simulated node's pod runs until deleted unless told its duration
        template["metadata"] = {"annotations": {"kubelocal.dev/sim-duration": "0"}}
    started = time.monotonic()
    for i in range(jobs):
        name = f"bench-{i:03d}"
        body = {
            "apiVersion": "tfjob.dev/v1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "tfReplicaSpecs": {"Worker": {"replicas": workers, "restartPolicy": "ExitCode", "template": template}}
            },
        }
        submitted[name] = time.monotonic()
        custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", body)
    submit_seconds = time.monotonic() - started
    deadline = started + timeout
    while len(jobs_w.finished) < jobs and time.monotonic() < deadline:
        time.sleep(0.2)
    total_seconds = time.monotonic() - started
    pods_w.stop = jobs_w.stop = True
    conn.send("done")
    conn.recv()  # the operator's clean-up after the jobs counts towards its peak RSS too
    stop_rss.set()
    conn.send(Measured(submitted, dict(pods_w.first_seen), dict(jobs_w.finished), jobs_w.reasons, submit_seconds,
                       total_seconds, max(rss, default=0), floor))


@dataclass
class Result:
    """One run's figures (seconds, requests per job, MiB)."""

    jobs: int
    workers: int
    created_p50: float
    created_p99: float
    created_floor: float
    succeeded_p50: float
    succeeded_p99: float
    requests_per_job: float
    requests_floor: int
    #: Requests per job without the deletes cleanPodPolicy asks for (pods racing their own exit), and those deletes.
    requests_rest: float
    cleanup_deletes: float
    peak_rss_mib: float
    succeeded: int
    seconds: float

    def summary(self, prefix: str = "") -> str:
        return (
            f"{prefix}created_p50={self.created_p50:.2f}s {prefix}created_p99={self.created_p99:.2f}s "
            f"{prefix}created_floor={self.created_floor:.2f}s "
            f"{prefix}succeeded_p50={self.succeeded_p50:.2f}s {prefix}succeeded_p99={self.succeeded_p99:.2f}s "
            f"{prefix}requests_per_job={self.requests_per_job:.2f} {prefix}requests_floor={self.requests_floor} "
            f"{prefix}requests_rest={self.requests_rest:.2f} {prefix}cleanup_deletes={self.cleanup_deletes:.2f} "
            f"{prefix}peak_rss_mib={self.peak_rss_mib:.0f} {prefix}succeeded={self.succeeded}/{self.jobs}"
        )


def run_once(jobs: int, workers: int, timeout: float, gang: str, profile: Path | None = None,
             trace: bool = False, simulated: bool = False, control_plane: str = "kubelocal") -> Result:
    """N jobs x W workers on a fresh control plane and operator; prints the figures, returns them. `simulated`:
    the nodes are kwok-style simulated nodes, whose pods run no process (they exit 0 at once all the same)."""
    nodes = "4x{cpu:64,memory:256Gi,pods:1000" + (",sim:true}" if simulated else "}")
    with (
        tempfile.TemporaryDirectory(prefix="tfjob-bench-", ignore_cleanup_errors=True) as tmp,
        planes.cluster_thread(control_plane, workdir=Path(tmp), nodes=nodes, max_grace_seconds=1.0,
                              crds=(CRD_PATH,), start_timeout=300) as cluster,
        for_cluster(cluster) as wire,
    ):
        workdir = Path(tmp)
        kubeconfig = workdir / "kubeconfig"
        cluster.write_kubeconfig(kubeconfig)
        # The operator talks to the plane through the counting proxy; the measuring client directly.
        operator_kubeconfig = workdir / "operator-kubeconfig"
        write_kubeconfig(operator_kubeconfig, wire.url)
        env = {
            **os.environ,
            "KUBECONFIG": str(operator_kubeconfig),
            "TFJOB_METRICS_PORT": "0",
            "TFJOB_LIVENESS_PORT": "0",
            "TFJOB_LOG_LEVEL": "WARNING",
            "TFJOB_GANG_BACKEND": gang,
        }
        log = (workdir / "operator.log").open("wb")
        operator_started = time.monotonic()
        operator = subprocess.Popen(
            [sys.executable, "-m", "tfjob_operator", "operator"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # The operator has its own session, so a bench stopped by Ctrl-C (or bench/run_all.py) must end it here.
        try:
            # The measuring client (submitter, watchers, RSS sampler) is its own process, as a user's kubectl is:
            # in this one it would take the GIL from the API server it measures.
            ctx = multiprocessing.get_context("spawn")
            ours, theirs = ctx.Pipe()
            measurer = ctx.Process(target=measure, args=(str(kubeconfig), jobs, workers, timeout, operator.pid, theirs,
                                                         simulated),
                                   daemon=True)
            measurer.start()
            ours.recv()  # its watches are open
            time.sleep(max(0.0, 3.0 - (time.monotonic() - operator_started)))  # the operator's start is not measured
            spy = None
            if profile:
                spy = subprocess.Popen(
                    [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(operator.pid),
                     "--format", "raw", "--rate", "50", "-o", str(profile)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wire.reset()
            # kubelocal's own request log (for --trace); kube-apiserver's is not read
            request_log = cluster.apiserver.requests if control_plane == "kubelocal" else []
            first_request = len(request_log)
            ours.send("go")
            ours.recv()  # every job finished, or the timeout
            time.sleep(2)  # requests that follow success (clean-up) belong to the job too
            records = list(request_log)[first_request:]
            on_wire, wire_writes = wire.read()
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            ours.send("stop")
            seen: Measured = ours.recv()
            measurer.join(10)
        finally:
            stop_process(operator, 20)  # a loaded machine: do not let it outlive the bench
        teardown_started = time.monotonic()
    teardown = time.monotonic() - teardown_started

    created, done = [], []
    states = collections.Counter(state for _, state in seen.finished.values())
    for name, t0 in seen.submitted.items():
        pod_times = [t for pod, t in seen.first_seen.items() if pod.startswith(f"{name}-")]
        if len(pod_times) >= workers:
            created.append(max(pod_times) - t0)
        if seen.finished.get(name, (0.0, ""))[1] == "Succeeded":
            done.append(seen.finished[name][0] - t0)
    # Watches are per operator, not per job (each resumes every few minutes): left out.
    by_verb = collections.Counter({k: v for k, v in on_wire.items() if not k.startswith("watch ")})
    n = jobs
    if trace:
        print("  requests of bench-000 in order:")
        for r in records:
            if r.user_agent.startswith(("tfjob-operator", "kopf")) and (r.name or "").startswith("bench-000"):
                print(f"    {r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''} {r.name}")
    print(
        f"operator_scale: {n} TFJobs x {workers} workers (pods exit 0 at once), {control_plane} plane"
        f"{', simulated nodes' if simulated else ''}, "
        f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"  submitted in {seen.submit_seconds:.1f}s; all finished after {seen.total_seconds:.1f}s; "
          f"states {dict(states)}")
    for reason, count in seen.reasons.most_common(3):
        print(f"  Failed: {count} x {reason}")
    print(
        f"  submit -> all pods created: p50 {percentile(created, 50):.2f}s  p99 {percentile(created, 99):.2f}s  "
        f"({len(created)} jobs); floor p99 {seen.created_floor:.2f}s (the same burst through a plain controller in "
        f"the same client: ConfigMaps, {workers} children each)"
    )
    print(
        f"  submit -> Succeeded:        p50 {percentile(done, 50):.2f}s  p99 {percentile(done, 99):.2f}s  "
        f"({len(done)} jobs)"
    )
    w = workers
    builtin = gang == "builtin"
    # The floor of issue 16: N creates, N releases (builtin), 1 Service, ≤ 3 status writes, ≤ 2 Events.
    floor = {"create pods": w, "patch pods": w if builtin else 0, "create services": 1, "patch tfjobs/status": 3,
             "create events": 2, "patch tfjobs": 0}
    print(f"  operator API requests per job on the wire (verb resource)  floor  (gang {gang})")
    for key in sorted(set(by_verb) | set(floor), key=lambda k: -by_verb.get(k, 0)):
        mark = f"{floor[key]:6d}" if key in floor else "     -"
        print(f"    {key:<40} {by_verb.get(key, 0) / n:6.2f}   {mark}")
    reasons = collections.Counter(w[6] for w in wire_writes if w[:2] == ["create", "events"])
    print("      events by reason: " + ", ".join(f"{r} {c / n:.2f}" for r, c in reasons.most_common()))
    cleanup = by_verb.get("delete pods", 0) / n
    total = sum(by_verb.values()) / n
    goal = 2 * w + 6 if builtin else w + 6
    print(f"    {'total':<40} {total:6.2f}   {goal:6d}  (without clean-up deletes of cleanPodPolicy Running, "
          f"racing pods that exit at once: {total - cleanup:.2f})")
    peak = seen.peak_rss / 2**20 if seen.peak_rss else float("nan")
    print(f"  operator peak RSS: {peak:.0f} MiB; control plane and pods torn down in {teardown:.1f} s", flush=True)
    return Result(n, w, percentile(created, 50), percentile(created, 99), seen.created_floor,
                  percentile(done, 50),
                  percentile(done, 99), total, goal, total - cleanup, cleanup, peak, states.get("Succeeded", 0),
                  seen.total_seconds)


def plot(results: list[Result], path: Path) -> None:
    """Latency (created p50/p99, Succeeded p99) and operator peak RSS against the number of jobs."""
    xs = [r.jobs for r in results]
    fig, (lat, mem) = figures.subplots(1, 2, figsize=(11, 4.2))
    lat.plot(xs, [r.created_p50 for r in results], "o-", label="submit → all pods created, p50")
    lat.plot(xs, [r.created_p99 for r in results], "o-", label="submit → all pods created, p99")
    lat.plot(xs, [r.succeeded_p99 for r in results], "s--", label="submit → Succeeded, p99")
    for r in results:
        if r.succeeded < r.jobs:  # cut short by --timeout/--budget: the Succeeded p99 covers only those done
            lat.annotate(f"{r.succeeded}/{r.jobs} done", (r.jobs, r.succeeded_p99), textcoords="offset points",
                         xytext=(-30, 8), fontsize=8)
    lat.set_xlabel("TFJobs submitted at once")
    lat.set_ylabel("seconds")
    lat.set_title("latency")
    lat.legend(fontsize=8)
    lat.grid(alpha=0.3)
    mem.plot(xs, [r.peak_rss_mib for r in results], "o-", color="tab:red")
    mem.set_xlabel("TFJobs submitted at once")
    mem.set_ylabel("MiB")
    mem.set_title("operator peak RSS")
    mem.grid(alpha=0.3)
    for ax in (lat, mem):
        ax.set_xticks(xs)
        ax.set_ylim(bottom=0)
    w = results[0].workers
    figures.save(fig, path, f"operator_scale: N TFJobs x {w} workers, pods exit at once; {os.cpu_count()} CPUs, "
                            f"load average {os.getloadavg()[0]:.1f} at the end")


def sizes(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sweep takes job counts separated by commas (e.g. 100,250), not {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--sweep needs at least one job count >= 1, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds from the first submit (per size)")
    parser.add_argument("--sweep", type=sizes, metavar="N,N,...",
                        help="run each number of jobs on a fresh control plane (e.g. 100,250,500,1000) and plot")
    parser.add_argument("--budget", type=float, default=0.0, metavar="SECONDS",
                        help="--sweep: wall time for the whole sweep; each size waits at most what is left, sizes "
                        "reached with nothing left are skipped (0: no limit)")
    parser.add_argument("--plot", type=Path, default=RESULTS / "operator_scale.png", help="where --sweep's plot goes")
    parser.add_argument("--profile", type=Path, help="record the operator with py-spy (collapsed stacks) to this file")
    parser.add_argument("--trace", action="store_true", help="print the first job's requests in order")
    parser.add_argument("--gang", default="builtin", choices=["builtin", "none"], help="the operator's gang backend")
    parser.add_argument("--simulated", action="store_true",
                        help="simulated nodes (kwok-style): the pods run no process, and still exit 0 at once")
    parser.add_argument("--control-plane", choices=[*planes.CONTROL_PLANES, "both"], default="kubelocal",
                        help="the plane to run on; both: each size on kubelocal, then upstream, and their ratios")
    args = parser.parse_args(argv)
    chosen = list(planes.CONTROL_PLANES) if args.control_plane == "both" else [args.control_plane]
    if not args.sweep:
        single = {p: run_once(args.jobs, args.workers, args.timeout, args.gang, args.profile, args.trace,
                              args.simulated, p) for p in chosen}
        r = single[chosen[0]]
        print(f"SUMMARY jobs={r.jobs} workers={r.workers} control_plane={args.control_plane} "
              + summaries({r.jobs: single}, ""))
        return 0 if all(x.succeeded == x.jobs for x in single.values()) else 1
    results: dict[int, dict[str, Result]] = {}
    sweep_started = time.monotonic()
    per_job: float | None = None  # wall seconds per job of the last size, floor and set-up included
    for n in args.sweep:
        timeout = args.timeout
        if args.budget:
            left = args.budget - (time.monotonic() - sweep_started)
            # What is left, less the fixed costs around the wait (start-up, the 2 s tail, tear-down).
            overhead = (SIZE_OVERHEAD_SECONDS + SIZE_OVERHEAD_PER_JOB * n) * len(chosen)
            timeout = min(timeout, left - overhead)
            needs = per_job * n * SIZE_MARGIN if per_job is not None else 0.0
            if timeout < 10 or needs > left:
                print(f"operator_scale: {n} TFJobs skipped: {left:.0f} s of the sweep's {args.budget:.0f} s budget "
                      f"left" + (f", and the last size's pace says it needs about {needs:.0f} s" if needs else "")
                      + f" (run it alone: bench/operator_scale.py --sweep {n})\n")
                continue
        started = time.monotonic()
        for p in chosen:
            results.setdefault(n, {})[p] = run_once(n, args.workers, timeout, args.gang, simulated=args.simulated,
                                                     control_plane=p)
        per_job = (time.monotonic() - started) / n
        # The figures so far: if the sweep is stopped (make bench's share), its last SUMMARY line keeps them.
        print(f"SUMMARY (so far) workers={args.workers} " + summaries(results))
        print(flush=True)
    print(f"sweep: N TFJobs x {args.workers} workers   created p50/p99 s   Succeeded p50/p99 s   "
          "requests/job   peak RSS MiB   Succeeded   wall s   plane")
    for _, by_plane in sorted(results.items()):
        for p, r in by_plane.items():
            print(f"  {r.jobs:>5}   {r.created_p50:>16.2f} {r.created_p99:>5.2f}   {r.succeeded_p50:>14.2f} "
                  f"{r.succeeded_p99:>6.2f}   {r.requests_per_job:>12.1f}   {r.peak_rss_mib:>12.0f}   "
                  f"{r.succeeded:>5}/{r.jobs:<5} {r.seconds:>6.0f}   {p}")
    if results:
        plot([by_plane[chosen[0]] for _, by_plane in sorted(results.items()) if chosen[0] in by_plane], args.plot)
        print(f"plot: {args.plot} ({chosen[0]} plane)")
    print(f"SUMMARY workers={args.workers} control_plane={args.control_plane} " + summaries(results))
    # Jobs that did not succeed in time are a figure (jobsN_succeeded), judged by the table, not a crash.
    return 0


#: The figures compared across planes as upstream / kubelocal.
RATIOS = ("created_p99", "created_floor", "succeeded_p99", "requests_per_job", "requests_rest", "peak_rss_mib")


def summaries(results: dict[int, dict[str, Result]], size_prefix: str = "jobs{n}_") -> str:
    """Each size's figures: kubelocal's as `jobsN_...`, upstream's as `up_jobsN_...` when both ran (else as the
    one plane's), and `ratio_jobsN_<figure>=<upstream / kubelocal>` when both ran."""
    parts = []
    for n, by_plane in results.items():
        prefix = size_prefix.format(n=n)
        both = len(by_plane) > 1
        for p, r in by_plane.items():
            parts.append(r.summary(("up_" if both and p == "upstream" else "") + prefix))
        if both:
            local, up = by_plane["kubelocal"], by_plane["upstream"]
            parts += [f"ratio_{prefix}{k}={getattr(up, k) / getattr(local, k):.2f}" for k in RATIOS
                      if getattr(local, k) > 0]
    return " ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
