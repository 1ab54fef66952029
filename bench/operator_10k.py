"""The operator at 10,000 TFJobs on 1,000 simulated 8-GPU nodes: idle cost, restart, a watch expiring, failover.

The plane runs simulated nodes (`sim:true`: pods run no process). The cluster holds `--jobs` TFJobs: `--running`
of them × `--workers` pods that run until deleted (2 CPUs each), the rest finished (their status copied from
a job the operator itself ran to Succeeded, cleanPodPolicy All: no pods left). The operator runs as
`tfjob operator` with leader election, through a counting proxy (`wire_proxy`): every figure about requests is
what the API server was asked. Phases, in order:

- requests: `--burst` more jobs run to the end, the operator's requests per job on the wire, the deletes
  cleanPodPolicy asks for apart;
- idle: the operator's and the plane's CPU over `--idle` seconds with the running jobs, and the status writes per
  second the progress poller makes (simulated pods serve no /metrics: each read fails at once, nothing is written);
- restart: the operator stopped (SIGTERM) and started again: seconds until every job was reconciled once, the
  new process's peak RSS, and its writes on the wire (goal: none, no job changed);
- expire: every watch expired (410, as after etcd compaction) while `--burst` jobs are created: the paged relist's
  requests, jobs missed, pods created twice, writes to jobs that did not change. On kubelocal its fault injector
  expires every watch mid-burst; on the upstream plane the operator's watches end and are held (by the proxy)
  while half the burst is submitted and a second kube-apiserver starts, etcd is compacted, and they resume on the
  new kube-apiserver, whose watch cache starts after their resourceVersion: 410 Gone. Then the other half;
- failover: a standby replica started, a burst of `--burst` jobs submitted, the leader SIGKILLed half-way: seconds
  until the standby's first write, until every burst job has its pods, jobs lost, pods created twice.

    .venv/bin/python bench/operator_10k.py                         (10,000 jobs, 2,000 running x 4: full size)
    .venv/bin/python bench/operator_10k.py --jobs 1000 --running 200 --nodes 100 --idle 30   (make bench's share)
    .venv/bin/python bench/operator_10k.py ... --control-plane both    (kubelocal, then upstream: the same phases)

`--control-plane upstream` runs it on the real control plane (`make upstream`); `both` runs kubelocal then upstream
in one process and adds their ratios (upstream / kubelocal) to the SUMMARY, the upstream figures with an `up_` prefix.

Ends with one `SUMMARY key=value ...` line.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config

from kubelocal import planes
from kubelocal.apiserver import write_kubeconfig
from tfjob_operator.api.crd import CRD_PATH
from tfjob_operator.client.local.processes import stop_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wire_proxy import for_cluster

GROUP, VERSION, NS = "tfjob.dev", "v1", "default"
#: CPUs a running job's pod asks for (no GPU: a cluster packed to its last GPU measures the scheduler's packing,
#: not the operator).
RUNNING_CPU = "2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def job_body(name: str, workers: int, *, cpu: str = "100m", duration: str | None = None,
             clean: str = "Running") -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu}}
    annotations = {"kubelocal.dev/sim-duration": duration} if duration else {}
    template = {"metadata": {"annotations": annotations},
                "spec": {"containers": [{"name": "tensorflow", "image": "local", "command": ["true"],
                                         "resources": resources}]}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"cleanPodPolicy": clean},
                     "tfReplicaSpecs": {"Worker": {"replicas": workers, "restartPolicy": "ExitCode",
                                                   "template": template}}}}


# ------------------------------------------------------------ the client process (kubectl's place, not the plane's)

_custom: client.CustomObjectsApi | None = None
_core: client.CoreV1Api | None = None


def _client_init(kubeconfig: str) -> None:
    global _custom, _core
    api = config.new_client_from_config(kubeconfig)
    api.user_agent = "tfjob-bench"
    api.configuration.connection_pool_maxsize = 16
    _custom, _core = client.CustomObjectsApi(api), client.CoreV1Api(api)


def submit(bodies: list[dict[str, Any]], status: dict[str, Any] | None = None, pace: float = 0.0,
           threads: int = 8) -> float:
    """Create the TFJobs (and write `status` to each, if given), `pace` seconds apart; seconds taken."""
    assert _custom is not None
    started = time.monotonic()

    def one(body: dict[str, Any]) -> None:
        _custom.create_namespaced_custom_object(GROUP, VERSION, NS, "tfjobs", body)  # type: ignore[union-attr]
        if status is not None:
            _custom.patch_namespaced_custom_object_status(  # type: ignore[union-attr]
                GROUP, VERSION, NS, "tfjobs", body["metadata"]["name"], {"status": status})

    if pace:
        for body in bodies:
            one(body)
            time.sleep(pace)
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, bodies))
    return time.monotonic() - started


def census() -> tuple[dict[str, str], dict[str, int]]:
    """Every TFJob's state and every job's count of pods (paged lists)."""
    assert _custom is not None and _core is not None
    states: dict[str, str] = {}
    token = None
    while True:
        page: Any = _custom.list_namespaced_custom_object(GROUP, VERSION, NS, "tfjobs", limit=2000,
                                                     **({"_continue": token} if token else {}))
        for job in page["items"]:
            states[job["metadata"]["name"]] = (job.get("status") or {}).get("state") or ""
        token = page["metadata"].get("continue")
        if not token:
            break
    pods: dict[str, int] = collections.Counter()
    token = None
    while True:
        resp: Any = _core.list_namespaced_pod(NS, limit=2000, _preload_content=False,
                                         **({"_continue": token} if token else {}))
        body = json.loads(resp.data)
        for pod in body["items"]:
            pods[pod["metadata"]["labels"].get("tfjob.dev/job-name", "")] += 1
        token = body["metadata"].get("continue")
        if not token:
            break
    return states, dict(pods)


def status_of(name: str) -> dict[str, Any]:
    assert _custom is not None
    job: Any = _custom.get_namespaced_custom_object(GROUP, VERSION, NS, "tfjobs", name)
    return dict(job.get("status") or {})


# ------------------------------------------------------------ the operator

class Operator:
    """`tfjob operator` with leader election, its /metrics on a port of its own."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.port = free_port()
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig),
                    "TFJOB_METRICS_PORT": str(self.port), "TFJOB_METRICS_HOST": "127.0.0.1",
                    "TFJOB_LIVENESS_PORT": "0", "TFJOB_LOG_LEVEL": os.environ.get("TFJOB_LOG_LEVEL", "WARNING"),
                    "TFJOB_LEADER_ELECTION": "true"}
        self.log = log
        self.started = 0.0
        with log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "operator"], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.monotonic()
        self.ps = psutil.Process(self.proc.pid)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples named `name` (0 while /metrics does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
                text = response.read().decode()
        except OSError:
            return 0.0
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"))

    def cpu(self) -> float:
        times = self.ps.cpu_times()
        return float(times.user + times.system)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, 30, sig)


def until(check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except client.ApiException as exc:  # a busy plane's 504 (or 429) to a poll: the next poll asks again
            if exc.status != 429 and (exc.status or 0) < 500:
                raise
            print(f"  (a poll got {exc.status} {exc.reason}; polling on)", flush=True)
            value = None
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def not_lease(counts: collections.Counter[str]) -> collections.Counter[str]:
    return collections.Counter({k: v for k, v in counts.items() if "leases" not in k})


def all_of(names: list[str], found: dict[str, Any], test: Any) -> bool:
    """`test` holds for every name's entry in one census (None for a name it lacks); one census per check, not
    one per name (at 10,000 jobs a census lists them all)."""
    return all(test(found.get(n)) for n in names)


def job_writes(writes: list[list[Any]], prefixes: tuple[str, ...]) -> int:
    """Writes (not Events, not Leases) to objects whose name starts with one of `prefixes`."""
    return sum(1 for verb, resource, _, name, *_ in writes
               if "leases" not in resource and resource != "events" and name.startswith(prefixes))


def timeline(writes: list[list[Any]]) -> dict[str, tuple[float, float]]:
    """Median and p90 seconds from each job's first pod create to its last pod create, to its first gang release
    (patch pods) and to its first status write of each state: what a status write held back (status_cache)
    waits for."""
    first: dict[tuple[str, str], float] = {}
    for verb, resource, _, name, _, at, reason, *_ in writes:
        if resource == "pods" and verb in ("create", "patch"):
            what, job = f"{verb} pods", name.rsplit("-", 2)[0]
            if verb == "create":
                first[("last create pods", job)] = at
        elif resource == "tfjobs/status":
            what, job = f"status {reason}", name
        else:
            continue
        first.setdefault((what, job), at)
    gaps: dict[str, list[float]] = collections.defaultdict(list)
    for (what, job), at in first.items():
        if ("create pods", job) in first and what != "create pods":
            gaps[what].append(at - first[("create pods", job)])
    return {what: (statistics.median(v), statistics.quantiles(v, n=10)[-1] if len(v) > 1 else v[0])
            for what, v in sorted(gaps.items(), key=lambda kv: statistics.median(kv[1]))}


def old_write_list(writes: list[list[Any]]) -> str:
    """The first writes (not Events, not Leases) to the jobs there before the burst, if any."""
    old = [w[:5] for w in writes if w[1] not in ("events", "leases") and w[3].startswith(("run-", "done-"))]
    return f"{old[:10]}" if old else ""


def created_twice(writes: list[list[Any]]) -> int:
    """Pods the server was asked to create more than once (a second 201 or a 409 for the same name)."""
    names = collections.Counter(name for verb, resource, _, name, *_ in writes
                                if verb == "create" and resource == "pods")
    return sum(n - 1 for n in names.values() if n > 1)


# ------------------------------------------------------------ the run

def plane_processes(cluster: Any) -> list[psutil.Process]:
    """The plane's processes: this one (kubelocal's API server, controllers and scheduler, or the upstream plane's
    node agents), and on the upstream plane etcd, kube-apiserver, kube-controller-manager and kube-scheduler."""
    upstream = getattr(cluster.cluster, "plane", None)
    pids = [p.pid for p in upstream.processes.values()] if upstream is not None else []
    return [psutil.Process(), *(psutil.Process(pid) for pid in pids)]


def cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in processes))


def run(args: argparse.Namespace, figures: dict[str, str], control_plane: str) -> None:
    """The phases in order, each adding its figures to `figures` (kept if the run is stopped part-way)."""
    finished = args.jobs - args.running
    nodes = f"{args.nodes}xsim{{gpu:8,cpu:96,memory:1Ti,pods:250,sim:true}}"
    upstream = control_plane == "upstream"
    with (contextlib.nullcontext(str(args.workdir / control_plane)) if args.workdir else
          tempfile.TemporaryDirectory(prefix="tfjob-10k-", ignore_cleanup_errors=True) as tmp,
          planes.cluster_thread(control_plane, workdir=Path(tmp), nodes=nodes, max_grace_seconds=1.0,
                                crds=(CRD_PATH,), start_timeout=300) as cluster,
          for_cluster(cluster) as wire):
        work = Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        direct, proxied = work / "kubeconfig", work / "operator-kubeconfig"
        cluster.write_kubeconfig(direct)
        write_kubeconfig(proxied, wire.url)
        ctx = multiprocessing.get_context("spawn")
        pool = ctx.Pool(2, initializer=_client_init, initargs=(str(direct),))
        operators: list[Operator] = []
        try:
            t0 = time.monotonic()
            # A finished job as the operator leaves it: one run through it, its status copied to the rest.
            op = Operator(proxied, work / "operator-0.log")
            operators.append(op)
            pool.apply(submit, ([job_body("done-sample", args.workers, duration="0", clean="All")],))
            until(lambda: pool.apply(status_of, ("done-sample",)).get("state") == "Succeeded", 120)
            sample = pool.apply(status_of, ("done-sample",))
            op.stop()
            pool.apply(submit, ([job_body(f"done-{i:05d}", args.workers, duration="0", clean="All")
                                 for i in range(finished - 1)], sample))
            op = Operator(proxied, work / "operator-1.log")
            operators.append(op)
            pool.apply(submit, ([job_body(f"run-{i:05d}", args.workers, cpu=RUNNING_CPU)
                                 for i in range(args.running)],))
            running = until(lambda: sum(s == "Running" for s in pool.apply(census)[0].values()) >= args.running,
                            args.timeout, every=3.0)
            figures["setup_s"] = f"{time.monotonic() - t0:.0f}s"
            print(f"operator_10k: {args.jobs} TFJobs ({args.running} running x {args.workers} pods, {finished} "
                  f"finished) on {args.nodes} simulated 8-GPU nodes, {control_plane} plane; load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; set up in {figures['setup_s']}"
                  f"{'' if running else ' (NOT all running)'}", flush=True)

            # ---- requests per job on the wire, with the cluster at full size
            wire.reset()
            names = [f"life-{i:04d}" for i in range(args.burst)]
            pool.apply(submit, ([job_body(n, args.workers, duration=args.duration) for n in names],))
            until(lambda: all_of(names, pool.apply(census)[0], lambda state: state in ("Succeeded", "Failed")),
                  args.timeout)
            time.sleep(5)  # the last pod counts and Events follow the state
            counts, life_writes = wire.read()
            per_job = {k: v / args.burst for k, v in not_lease(counts).items() if not k.startswith("watch ")}
            deletes = per_job.get("delete pods", 0.0)
            rest = sum(per_job.values()) - deletes
            figures.update(requests_rest=f"{rest:.2f}", cleanup_deletes=f"{deletes:.2f}")
            print(f"  {args.burst} more jobs run to the end ({args.duration} simulated): requests per job on the wire "
                  f"{rest:.2f} besides {deletes:.2f} cleanPodPolicy deletes: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(per_job.items(), key=lambda kv: -kv[1])), flush=True)
            reasons = collections.Counter(w[6] for w in life_writes if w[:2] == ["create", "events"])
            status_writes = collections.Counter(collections.Counter(
                w[3] for w in life_writes if w[:2] == ["patch", "tfjobs/status"]).values())
            states = collections.Counter(w[6] for w in life_writes if w[:2] == ["patch", "tfjobs/status"])
            print("      events by reason: " + ", ".join(f"{r} {c / args.burst:.2f}" for r, c in reasons.most_common())
                  + "; status writes by state: " + ", ".join(f"{r} {c / args.burst:.2f}" for r, c in
                                                             states.most_common())
                  + "; jobs by status writes: " + ", ".join(f"{k}: {v}" for k, v in sorted(status_writes.items())),
                  flush=True)
            print("      after a job's first pod create, median (p90) s: "
                  + ", ".join(f"{what} {m:.2f} ({p90:.2f})" for what, (m, p90) in timeline(life_writes).items()),
                  flush=True)

            # ---- idle
            time.sleep(5)  # the last transitions' writes settle
            wire.reset()
            plane = plane_processes(cluster)
            reads0, op_cpu0, plane_cpu0 = op.metric("tfjob_progress_reads_total"), op.cpu(), cpu_seconds(plane)
            t = time.monotonic()
            time.sleep(args.idle)
            span = time.monotonic() - t
            counts, _ = wire.read()
            op_cpu = (op.cpu() - op_cpu0) / span
            plane_cpu = (cpu_seconds(plane) - plane_cpu0) / span
            status_writes = counts.get("patch tfjobs/status", 0) / span
            reads = (op.metric("tfjob_progress_reads_total") - reads0) / span
            writes = sum(v for k, v in not_lease(counts).items() if not k.startswith(("get ", "list ", "watch ")))
            figures.update(idle_operator_cpu=f"{100 * op_cpu:.1f}%", idle_plane_cpu=f"{100 * plane_cpu:.1f}%",
                           idle_status_writes_per_s=f"{status_writes:.2f}", idle_writes=str(writes),
                           idle_progress_reads_per_s=f"{reads:.1f}")
            print(f"  idle {span:.0f} s: operator CPU {100 * op_cpu:.1f}% of a core, plane {100 * plane_cpu:.1f}%; "
                  f"status writes {status_writes:.2f}/s, writes of any kind {writes}; progress reads "
                  f"{reads:.1f}/s (simulated chiefs serve no /metrics); on the wire: {dict(not_lease(counts))}",
                  flush=True)

            # ---- restart
            op.stop()
            wire.reset()
            op = Operator(proxied, work / "operator-2.log")
            operators.append(op)
            peak = [0]

            states, pods_now = pool.apply(census)  # the jobs counted on the wire are in the cluster too
            # Settled jobs (finished, no pod left, no TTL here) are not reconciled at start.
            total = sum(1 for n, s in states.items() if s not in ("Succeeded", "Failed") or pods_now.get(n, 0))

            def reconciled() -> bool:
                with_rss(op, peak)
                return op.metric("tfjob_reconcile_duration_seconds_count") >= total

            done = until(reconciled, args.timeout, every=0.5)
            restart = time.monotonic() - op.started
            quiet = until(lambda: with_rss(op, peak) and False, 3.0, every=0.5)  # late writes still count
            del quiet
            counts, writes_list = wire.read()
            reconciles = op.metric("tfjob_reconcile_duration_seconds_count")
            restart_writes = sum(1 for w in writes_list if "leases" not in w[1])
            figures.update(restart_s=f"{restart:.1f}s", restart_rss_mib=f"{peak[0] / 2**20:.0f}",
                           restart_writes=str(restart_writes), restart_reconciles=f"{reconciles:.0f}")
            print(f"  restart: {reconciles:.0f} reconciles of {total} jobs {restart:.1f} s after the start"
                  f"{'' if done else ' (NOT all)'}; peak RSS {peak[0] / 2**20:.0f} MiB; writes {restart_writes} "
                  f"({collections.Counter(w[0] + ' ' + w[1] for w in writes_list if 'leases' not in w[1])}); "
                  f"reads {dict((k, v) for k, v in counts.items() if k.startswith(('list', 'get')))}", flush=True)

            # ---- a watch expiring while jobs are created
            wire.reset()
            reconciles0 = op.metric("tfjob_reconcile_duration_seconds_count")
            names = [f"exp-{i:04d}" for i in range(args.burst)]
            bodies = [job_body(n, args.workers) for n in names]
            if upstream:
                # The operator's watches end and wait in the proxy (a partition, or a load balancer moving it) while
                # half the burst is submitted and a second kube-apiserver starts (its watch cache from etcd's
                # revision then); etcd is compacted; the watches go on to the new kube-apiserver, where resuming
                # from the resourceVersion they had is 410 Gone. Then the other half.
                plane_obj = cluster.cluster.plane
                ended = wire.hold()
                expired_at = time.monotonic()
                half = pool.apply_async(submit, (bodies[:args.burst // 2],), {"pace": args.pace})
                second = cluster.on_plane(plane_obj.start_apiserver())
                revision = cluster.on_plane(plane_obj.compact())
                half.get(args.timeout)
                held = time.monotonic() - expired_at
                wire.release(second)
                dropped = (f"{ended} watch streams (held {held:.1f} s; moved to a kube-apiserver started meanwhile, "
                           f"etcd compacted at revision {revision})")
                figures["expire_held_s"] = f"{held:.1f}s"
                pool.apply(submit, (bodies[args.burst // 2:],), {"pace": args.pace})
            else:
                half = pool.apply_async(submit, (bodies,), {"pace": args.pace})
                time.sleep(args.pace * args.burst / 2)
                expired_at = time.monotonic()
                dropped = f"{cluster.apiserver.faults.expire_watches()} watches"
                half.get(args.timeout)
            submitted = time.monotonic()
            complete = until(lambda: all_of(names, pool.apply(census)[1], lambda pods: pods == args.workers),
                             args.timeout)
            settle = time.monotonic() - submitted
            time.sleep(3)
            counts, writes_list = wire.read()
            _, pods = pool.apply(census)
            missed = sum(1 for n in names if pods.get(n, 0) < args.workers)
            twice = created_twice(writes_list)
            old_writes = job_writes(writes_list, ("run-", "done-"))
            lists = {k: v for k, v in counts.items() if k.startswith("list ")}
            reconciles = op.metric("tfjob_reconcile_duration_seconds_count") - reconciles0
            figures.update(expire_missed=str(missed), expire_created_twice=str(twice),
                           expire_old_writes=str(old_writes), expire_lists=str(sum(lists.values())),
                           expire_settle_s=f"{settle:.1f}s", expire_reconciles=f"{reconciles:.0f}")
            print(f"  expire: {dropped} expired {submitted - expired_at:.1f} s before the last of {args.burst} "
                  f"jobs was submitted; relist {lists}; every burst job's pods {settle:.1f} s after the last submit"
                  f"{'' if complete else ' (NOT all)'}; {reconciles:.0f} reconciles; missed {missed}, pods created "
                  f"twice {twice}, writes to unchanged jobs {old_writes} {old_write_list(writes_list)}", flush=True)

            # ---- failover mid-burst
            standby = Operator(proxied, work / "operator-3.log")
            operators.append(standby)
            # The standby is warm once every job it would reconcile on taking over waits in its queue (a standby
            # in a cluster has been running for days).
            until(lambda: standby.metric("tfjob_workqueue_depth") >= args.running, args.timeout)
            time.sleep(3)
            wire.reset()
            names = [f"fo-{i:04d}" for i in range(args.burst)]
            burst = pool.apply_async(submit, ([job_body(n, args.workers) for n in names],),
                                     {"pace": args.pace})
            time.sleep(args.pace * args.burst / 2)
            killed = time.monotonic()
            op.stop(signal.SIGKILL)
            # After the leader is reaped: a write it sent just before it died may reach the proxy a moment later
            # (in make bench 2026-11-26 22:49 one did, and the standby's first write read 0.0 s).
            killed_wall = time.time()
            burst.get(args.timeout)
            complete = until(lambda: all_of(names, pool.apply(census)[1], lambda pods: pods == args.workers),
                             args.timeout)
            all_pods = time.monotonic() - killed
            time.sleep(3)
            counts, writes_list = wire.read()
            _, pods = pool.apply(census)
            after = [w[5] for w in writes_list if w[5] > killed_wall and "leases" not in w[1]]
            first = (min(after) - killed_wall) if after else float("nan")
            lost = sum(1 for n in names if pods.get(n, 0) < args.workers)
            extra = sum(max(0, pods.get(n, 0) - args.workers) for n in names)
            twice = created_twice(writes_list)
            figures.update(failover_first_write_s=f"{first:.1f}s", failover_all_pods_s=f"{all_pods:.1f}s",
                           failover_lost=str(lost), failover_created_twice=str(twice + extra))
            print(f"  failover: leader SIGKILLed mid-burst of {args.burst} jobs; the standby's first write "
                  f"{first:.1f} s after, every burst job's pods {all_pods:.1f} s after"
                  f"{'' if complete else ' (NOT all)'}; lost {lost}, pods created twice {twice}, extra pods {extra}",
                  flush=True)
        finally:
            for o in operators:
                o.stop(signal.SIGKILL)
            pool.terminate()


def with_rss(op: Operator, peak: list[int]) -> bool:
    try:
        peak[0] = max(peak[0], op.ps.memory_info().rss)
    except psutil.Error:
        pass
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="TFJobs in the cluster (running + finished)")
    parser.add_argument("--running", type=int, default=2_000, help="of them running, each with --workers pods")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=1_000, help="simulated 8-GPU nodes")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of the idle measurement")
    parser.add_argument("--burst", type=int, default=100, help="jobs submitted during the expiry and the failover")
    parser.add_argument("--duration", default="3s", help="simulated run of the jobs counted on the wire")
    parser.add_argument("--pace", type=float, default=0.05, help="seconds between the burst's submits")
    parser.add_argument("--workdir", type=Path, help="keep the plane's and operators' files (logs) here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds any one wait may take")
    parser.add_argument("--control-plane", choices=[*planes.CONTROL_PLANES, "both"], default="kubelocal",
                        help="the plane to run on; both: kubelocal, then upstream, and their ratios")
    args = parser.parse_args(argv)
    if not 0 < args.running < args.jobs:
        parser.error(f"--running must be between 1 and --jobs - 1 ({args.jobs - 1}), got {args.running}")
    if args.running * args.workers * int(RUNNING_CPU) > args.nodes * 90:
        parser.error(f"--running x --workers pods of {RUNNING_CPU} CPUs do not fit on --nodes of 96 CPUs")
    started = time.monotonic()
    chosen = list(planes.CONTROL_PLANES) if args.control_plane == "both" else [args.control_plane]
    by_plane: dict[str, dict[str, str]] = {p: {} for p in chosen}
    stopped = False
    try:
        for control_plane in chosen:
            run(args, by_plane[control_plane], control_plane)
    except KeyboardInterrupt:  # make bench's share ran out: the phases done so far still count
        stopped = True
    print(f"  wall time {time.monotonic() - started:.0f} s{' (stopped)' if stopped else ''}")
    figures = dict(by_plane.get("kubelocal", {}))
    if "upstream" in by_plane:
        prefix = "up_" if len(chosen) > 1 else ""
        figures.update({f"{prefix}{k}": v for k, v in by_plane["upstream"].items()})
    if len(chosen) > 1:
        figures.update(ratios(by_plane["kubelocal"], by_plane["upstream"]))
        print("  upstream / kubelocal: " + ", ".join(f"{k.removeprefix('ratio_')} {v}" for k, v in figures.items()
                                                      if k.startswith("ratio_")))
    print("SUMMARY " + f"jobs={args.jobs} running={args.running} control_plane={args.control_plane} "
          + " ".join(f"{k}={v}" for k, v in figures.items()))
    return 1 if stopped else 0


#: The figures compared across planes as upstream / kubelocal (times and requests; counts that should be 0 are
#: shown as they are).
RATIOS = ("requests_rest", "restart_s", "expire_settle_s", "failover_first_write_s", "failover_all_pods_s",
          "restart_rss_mib", "idle_plane_cpu")


def ratios(local: dict[str, str], upstream: dict[str, str]) -> dict[str, str]:
    """`ratio_<key>=<upstream / kubelocal>` for each RATIOS figure both planes have."""
    out = {}
    for key in RATIOS:
        try:
            a, b = (float(d[key].rstrip("s%")) for d in (local, upstream))
        except (KeyError, ValueError):
            continue
        if a > 0:
            out[f"ratio_{key}"] = f"{b / a:.2f}"
    return out


if __name__ == "__main__":
    sys.exit(main())
