"""Operator at scale: N TFJobs × W workers on the local control plane, pods that exit 0 at once.

Prints p50/p99 of submit → all pods created and submit → Succeeded, the operator's API requests per job by
verb and resource (from the API server's request log), and the operator's peak RSS. The operator runs as
`tfjob operator` in its own process, as in production; the pods are real (trivial) processes.

    .venv/bin/python bench/operator_scale.py [--jobs 100] [--workers 4]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config, watch

from kubelocal.apiserver import write_kubeconfig
from kubelocal.cluster import LocalClusterThread
from tfjob_operator.crd import CRD_PATH

BENCH_UA = "tfjob-bench"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


class Watcher(threading.Thread):
    """Records when each pod is first seen and when each job is first Succeeded/Failed (official client watch)."""

    def __init__(self, api: client.ApiClient, kind: str) -> None:
        super().__init__(daemon=True)
        self.kind = kind
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.first_seen: dict[str, float] = {}
        self.finished: dict[str, tuple[float, str]] = {}
        self.stop = False
        self.w = watch.Watch()

    def run(self) -> None:
        while not self.stop:
            try:
                if self.kind == "pods":
                    stream = self.w.stream(self.core.list_namespaced_pod, "default", timeout_seconds=5)
                else:
                    stream = self.w.stream(
                        self.custom.list_namespaced_custom_object,
                        "tfjob.dev",
                        "v1",
                        "default",
                        "tfjobs",
                        timeout_seconds=5,
                    )
                for event in stream:
                    self.observe(event["object"])
            except Exception:
                time.sleep(0.1)

    def observe(self, obj: Any) -> None:
        now = time.monotonic()
        if self.kind == "pods":
            self.first_seen.setdefault(obj.metadata.name, now)
            return
        state = (obj.get("status") or {}).get("state")
        if state in ("Succeeded", "Failed"):
            self.finished.setdefault(obj["metadata"]["name"], (now, state))


def peak_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        try:
            out.append(proc.memory_info().rss)
        except psutil.Error:
            return
        stop.wait(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--profile", type=Path, help="record the operator with py-spy (collapsed stacks) to this file")
    parser.add_argument("--trace", action="store_true", help="print the first job's requests in order")
    parser.add_argument("--gang", default="builtin", choices=["builtin", "none"], help="the operator's gang backend")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tfjob-bench-"))
    nodes = "4x{cpu:64,memory:256Gi,pods:1000}"
    with LocalClusterThread(workdir=workdir, nodes=nodes, max_grace_seconds=1.0, crds=(CRD_PATH,)) as cluster:
        kubeconfig = workdir / "kubeconfig"
        write_kubeconfig(kubeconfig, cluster.url)
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "TFJOB_ADDRESSING": "loopback",
            "TFJOB_METRICS_PORT": "0",
            "TFJOB_LIVENESS_PORT": "0",
            "TFJOB_LOG_LEVEL": "WARNING",
            "TFJOB_GANG_BACKEND": args.gang,
        }
        log = (workdir / "operator.log").open("wb")
        operator = subprocess.Popen(
            [sys.executable, "-m", "tfjob_operator.cli", "operator"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        rss: list[int] = []
        stop_rss = threading.Event()
        threading.Thread(target=peak_rss, args=(operator.pid, stop_rss, rss), daemon=True).start()
        api = config.new_client_from_config(str(kubeconfig))
        api.user_agent = BENCH_UA
        pods_w, jobs_w = Watcher(api, "pods"), Watcher(api, "tfjobs")
        pods_w.start()
        jobs_w.start()
        custom = client.CustomObjectsApi(api)
        time.sleep(3)  # let the operator start its watches (its start-up is not what is measured)
        spy = None
        if args.profile:
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(operator.pid),
                                    "--format", "raw", "--rate", "50", "-o", str(args.profile)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        first_request = len(cluster.apiserver.requests)
        submitted: dict[str, float] = {}
        template = {"spec": {"containers": [{"name": "tensorflow", "image": "local", "command": ["true"]}]}}
        started = time.monotonic()
        for i in range(args.jobs):
            name = f"bench-{i:03d}"
            body = {
                "apiVersion": "tfjob.dev/v1",
                "kind": "TFJob",
                "metadata": {"name": name},
                "spec": {
                    "tfReplicaSpecs": {
                        "Worker": {"replicas": args.workers, "restartPolicy": "ExitCode", "template": template}
                    }
                },
            }
            submitted[name] = time.monotonic()
            custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", body)
        submit_seconds = time.monotonic() - started
        deadline = time.monotonic() + args.timeout
        while len(jobs_w.finished) < args.jobs and time.monotonic() < deadline:
            time.sleep(0.2)
        total_seconds = time.monotonic() - started
        time.sleep(2)  # requests that follow success (clean-up) belong to the job too
        records = list(cluster.apiserver.requests)[first_request:]
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        stop_rss.set()
        pods_w.stop = jobs_w.stop = True
        os.killpg(operator.pid, signal.SIGTERM)
        operator.wait(20)

    created, done = [], []
    states = collections.Counter(state for _, state in jobs_w.finished.values())
    for name, t0 in submitted.items():
        pod_times = [t for pod, t in pods_w.first_seen.items() if pod.startswith(f"{name}-")]
        if len(pod_times) >= args.workers:
            created.append(max(pod_times) - t0)
        if name in jobs_w.finished:
            done.append(jobs_w.finished[name][0] - t0)
    by_verb: collections.Counter[str] = collections.Counter()
    for r in records:
        if r.user_agent.startswith(("tfjob-operator", "kopf")):
            resource = r.resource + (f"/{r.subresource}" if r.subresource else "") if r.resource else r.path
            by_verb[f"{r.verb} {resource}"] += 1
    n = args.jobs
    if args.trace:
        print("  requests of bench-000 in order:")
        for r in records:
            if r.user_agent.startswith(("tfjob-operator", "kopf")) and (r.name or "").startswith("bench-000"):
                print(f"    {r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''} {r.name}")
    print(
        f"operator_scale: {n} TFJobs x {args.workers} workers (pods exit 0 at once), local control plane, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"  submitted in {submit_seconds:.1f}s; all finished after {total_seconds:.1f}s; states {dict(states)}")
    print(
        f"  submit -> all pods created: p50 {percentile(created, 50):.2f}s  p99 {percentile(created, 99):.2f}s  "
        f"({len(created)} jobs)"
    )
    print(
        f"  submit -> Succeeded:        p50 {percentile(done, 50):.2f}s  p99 {percentile(done, 99):.2f}s  "
        f"({len(done)} jobs)"
    )
    w = args.workers
    builtin = args.gang == "builtin"
    # The floor of issue 16: N creates, N releases (builtin), 1 Service, ≤ 3 status writes, ≤ 2 Events.
    floor = {"create pods": w, "patch pods": w if builtin else 0, "create services": 1, "patch tfjobs/status": 3,
             "create events": 2, "patch tfjobs": 0}
    print(f"  operator API requests per job (verb resource)              floor  (gang {args.gang})")
    for key in sorted(set(by_verb) | set(floor), key=lambda k: -by_verb.get(k, 0)):
        mark = f"{floor[key]:6d}" if key in floor else "     -"
        print(f"    {key:<40} {by_verb.get(key, 0) / n:6.2f}   {mark}")
    cleanup = by_verb.get("delete pods", 0) / n
    total = sum(by_verb.values()) / n
    goal = 2 * w + 6 if builtin else w + 6
    print(f"    {'total':<40} {total:6.2f}   {goal:6d}  (without clean-up deletes of cleanPodPolicy Running, "
          f"racing pods that exit at once: {total - cleanup:.2f})")
    peak = max(rss) / 2**20 if rss else float("nan")
    print(f"  operator peak RSS: {peak:.0f} MiB")
    print(
        f"SUMMARY jobs={n} workers={args.workers} created_p50={percentile(created, 50):.2f}s "
        f"created_p99={percentile(created, 99):.2f}s succeeded_p50={percentile(done, 50):.2f}s "
        f"succeeded_p99={percentile(done, 99):.2f}s requests_per_job={sum(by_verb.values()) / n:.1f} "
        f"requests_floor={2 * args.workers + 6 if args.gang == 'builtin' else args.workers + 6} "
        f"peak_rss_mib={peak:.0f} succeeded={states.get('Succeeded', 0)}/{n}"
    )
    return 0 if states.get("Succeeded", 0) == n else 1


if __name__ == "__main__":
    sys.exit(main())
