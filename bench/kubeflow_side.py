"""tfjob-operator beside Kubeflow's training-operator v1.9.3, on the upstream plane, against the same
`kubeflow.org/v1` TFJobs (Kubeflow's published CRD), one operator after the other in the same run.

Both run on the host against the plane's kube-apiserver, each with its own client certificate (user
`bench:tfjob-operator` or `bench:training-operator`, group system:masters), so the API server's audit log says
which one sent each request: that log (level Metadata for those two users only) is the request count, the same
measure for both. The nodes are simulated (their pods run no process); every job uses our worker image's name,
whatever the operator. Only one operator runs at a time (both own `kubeflow.org/v1` TFJobs: ours with
TFJOB_KUBEFLOW_API=all); between them every job is deleted and its pods are gone, and Kubeflow's validating webhook
is installed only while its manager runs (failurePolicy Fail: left behind, it refuses every TFJob). The webhook is
routed as in the cluster, through a selector-less Service `training-operator` in `kubeflow` and an EndpointSlice at
this machine's address; the bench writes the Secret its cert rotator fills into the folder the rotator waits for, as
the Deployment's volume mount would. Our operator runs without its webhooks (its checks run in reconcile too).

Per operator: the burst (N jobs x W workers whose pods exit 0 at once: submit -> all pods created p50/p99,
submit -> Succeeded p99, API requests per job by verb and resource, without watches), then a lost worker (one
job of W running workers; worker-1's pod deleted: the time until a new worker-1 pod is created, and how many
pods were replaced), then an operator kill (SIGKILL while `--running` jobs run; a probe job submitted while it
is down; restarted: the time from its start until the probe's pods exist, and the requests of its first 20 s).

Needs the plane's binaries and Kubeflow's manager (Go; about 10 minutes cold on 2 cores):

    .venv/bin/python -m kubelocal.upstream.build k8s training-operator
    .venv/bin/python bench/kubeflow_side.py [--sizes 100,1000] [--workers 4] [--running 50] [--kubeflow-qps 20]

Ends with one `SUMMARY key=value ...` line (keys prefixed `ours_` and `kubeflow_`, sizes as `b100_`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from kubelocal.upstream.build import UpstreamError, binaries
from kubelocal.upstream.cluster import UpstreamClusterThread, host_address
from kubelocal.upstream.pki import MASTERS_GROUP, issue, kubeconfig, write_kubeconfig
from tfjob_operator.api.crd import CRD_PATH

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kubeflow_parts import (
    AUDIT_POLICY,
    CERT_DIR,
    GROUP,
    KUBEFLOW_CRD_IN_MODULE,
    NS,
    PLURAL,
    VERSION,
    WORKER_IMAGE,
    ObserverProcess,
    Operator,
    audit_events,
    by_verb,
    kubeflow_module,
    kubeflow_webhook,
    mount_webhook_secret,
    operators,
    percentile,
    refused,
    remove_kubeflow_webhook,
)

# -- the phases --------------------------------------------------------------------------------------------------

@dataclass
class Figures:
    values: dict[str, float] = field(default_factory=dict)

    def put(self, key: str, value: float) -> None:
        self.values[key] = value


def wait_until(predicate: Any, timeout: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def clear_jobs(admin: client.ApiClient) -> None:
    """Delete every TFJob and wait until no pod is left (the garbage collector deletes them with their job)."""
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)

    def deleted(delete: Any, remaining: Any) -> bool:
        if not remaining():
            return True
        try:
            delete()
        except client.ApiException as exc:  # a loaded API server's 504: what it did stays done, the rest next time
            if exc.status != 504:
                raise
        return False

    wait_until(lambda: deleted(lambda: custom.delete_collection_namespaced_custom_object(GROUP, VERSION, NS, PLURAL),
                               lambda: custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]),
               300, "TFJobs deleted", every=2.0)
    wait_until(lambda: deleted(lambda: core.delete_collection_namespaced_pod(NS, grace_period_seconds=0),
                               lambda: core.list_namespaced_pod(NS).items), 300, "pods gone", every=2.0)


def pods_of(snapshot: dict[str, Any], job: str) -> list[tuple[str, str, float]]:
    return [(uid, name, t) for uid, (name, t) in snapshot["pods"].items() if name.startswith(f"{job}-worker-")]


def burst(op: Operator, obs: ObserverProcess, audit: Path, jobs: int, workers: int, timeout: float,
          fig: Figures) -> None:
    names = [f"{op.key}-b{jobs}-{i:04d}" for i in range(jobs)]
    since = time.time()
    submitted = obs.call("submit", names, workers, "0")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = obs.call("snapshot")
        if all(n in snap["finished"] for n in names):
            break
        time.sleep(0.5)
    time.sleep(2)  # the requests that follow success belong to the job
    until = time.time()
    snap = obs.call("snapshot")
    created, done = [], []
    for name, t0 in submitted.items():
        times = [t for _, _, t in pods_of(snap, name)]
        if len(times) >= workers:
            created.append(max(times) - t0)
        end = snap["finished"].get(name)
        if end and end[1] == "Succeeded":
            done.append(end[0] - t0)
    events = audit_events(audit, op.user, since, until)
    counts, errors = by_verb(events), refused(events)
    rest = {k: v for k, v in counts.items() if not k.startswith("watch ")}
    total = sum(rest.values()) / jobs
    print(f"  {jobs} x {workers}: submit -> all pods created p50 {percentile(created, 50):.2f} s, "
          f"p99 {percentile(created, 99):.2f} s ({len(created)} jobs); submit -> Succeeded p99 "
          f"{percentile(done, 99):.2f} s ({len(done)}/{jobs}); API requests per job {total:.2f} (watches left out)",
          flush=True)
    for key, n in sorted(rest.items(), key=lambda kv: -kv[1]):
        print(f"      {key:<36} {n / jobs:7.2f}")
    if errors:
        print("    answered with an error (counted above): " + ", ".join(f"{k} x{n}" for k, n in errors.most_common()))
    p = f"{op.key}_b{jobs}_"
    fig.put(p + "created_p99", percentile(created, 99))
    fig.put(p + "created_p50", percentile(created, 50))
    fig.put(p + "succeeded_p99", percentile(done, 99))
    fig.put(p + "succeeded", len(done))
    fig.put(p + "requests_per_job", total)


def lost_worker(op: Operator, obs: ObserverProcess, workers: int, fig: Figures) -> None:
    """One job of running workers; worker-1's pod deleted (as a drain or preemption does): how long until the
    operator acts (a new worker-1 pod, or the job Failed), and what it did."""
    job = f"{op.key}-lost"
    obs.call("submit", [job], workers, None)

    def all_running() -> bool:
        snap = obs.call("snapshot")
        return sum(uid in snap["running"] for uid, _, _ in pods_of(snap, job)) >= workers

    wait_until(all_running, 120, f"{job}: {workers} workers Running")
    before = {uid for uid, _, _ in pods_of(obs.call("snapshot"), job)}
    deleted = obs.call("delete_pod", f"{job}-worker-1")

    def acted() -> bool:
        snap = obs.call("snapshot")
        return job in snap["finished"] or any(
            name == f"{job}-worker-1" and uid not in before for uid, name, _ in pods_of(snap, job))

    wait_until(acted, 120, f"{job}: a new worker-1 or the job ended")
    time.sleep(5)  # a gang restart replaces the others too
    snap = obs.call("snapshot")
    new = [(name, t) for uid, name, t in pods_of(snap, job) if uid not in before]
    replacements = [t for name, t in new if name == f"{job}-worker-1"]
    ended = snap["finished"].get(job)
    which = ", ".join(sorted(name.removeprefix(f"{job}-") for name, _ in new)) or "none"
    if replacements and not (ended and ended[0] < min(replacements)):
        reaction = min(replacements) - deleted
        said = f"a new worker-1 after {reaction:.2f} s"
    else:
        assert ended is not None
        reaction = ended[0] - deleted
        said = f"the job {ended[1]} after {reaction:.2f} s"
    print(f"  lost worker (worker-1's pod deleted while running): {said}; pods created in the 5 s after: "
          f"{len(new)} ({which}); job {'ended ' + ended[1] if ended else 'still running'}", flush=True)
    fig.put(f"{op.key}_lost_worker_s", reaction)
    fig.put(f"{op.key}_lost_worker_pods_replaced", len(new))
    fig.put(f"{op.key}_lost_worker_job_failed", int(bool(ended and ended[1] == "Failed")))


def operator_kill(op: Operator, obs: ObserverProcess, audit: Path, running: int, workers: int,
                  fig: Figures) -> None:
    names = [f"{op.key}-run-{i:03d}" for i in range(running)]
    obs.call("submit", names, workers, None)

    def all_created() -> bool:
        snap = obs.call("snapshot")
        return all(len(pods_of(snap, n)) >= workers for n in names)

    wait_until(all_created, 300, f"{running} running jobs' pods created", every=1.0)
    op.kill()
    probe = f"{op.key}-probe"

    def submit_probe() -> str:
        try:
            obs.call("submit", [probe], workers, None)
        except RuntimeError as exc:  # Kubeflow's webhook, down with its manager, refuses every TFJob create
            return str(exc)
        return ""

    refused = submit_probe()
    time.sleep(2)
    since = time.time()
    op.start()
    if refused:
        print(f"  while it was down the probe job was refused: {refused[:300]}", flush=True)
        wait_until(lambda: not submit_probe(), 120, f"{probe}: accepted after the restart")
        print(f"  the probe job was accepted {time.monotonic() - op.started:.2f} s after the restart", flush=True)
    wait_until(lambda: len(pods_of(obs.call("snapshot"), probe)) >= workers, 300, f"{probe}: pods after restart")
    snap = obs.call("snapshot")
    ready = max(t for _, _, t in pods_of(snap, probe)) - op.started
    time.sleep(max(0.0, 20 - (time.monotonic() - op.started)))
    counts = by_verb(audit_events(audit, op.user, since, since + 20))
    rest = sum(v for k, v in counts.items() if not k.startswith("watch "))
    print(f"  operator killed (SIGKILL) with {running} jobs x {workers} running; restarted: the probe job's pods "
          f"{ready:.2f} s after its start; {rest} requests in its first 20 s (watches left out): "
          + ", ".join(f"{k} {v}" for k, v in counts.most_common(6)), flush=True)
    fig.put(f"{op.key}_restart_probe_pods_s", ready)
    fig.put(f"{op.key}_restart_requests_20s", rest)


def wait_ready(op: Operator, obs: ObserverProcess) -> float:
    """Until the operator creates a warm-up job's pod (its start is not measured; the job is retried while a webhook
    refuses it): seconds since its start."""
    job = f"{op.key}-warmup"

    def accepted() -> bool:  # Kubeflow's webhook serves once its certificates are written
        try:
            obs.call("submit", [job], 1, "0")
        except RuntimeError:
            return False
        return True

    wait_until(accepted, 120, f"{op.key}: the warm-up job accepted", every=0.5)
    wait_until(lambda: len(pods_of(obs.call("snapshot"), job)) >= 1, 180, f"{op.key}: the warm-up job's pod")
    return time.monotonic() - op.started


# -- Kubeflow's own cases (the ones our tests port: tests/unit/test_render.py, test_reconcile.py) ------------------

def case_job(name: str, replicas: dict[str, int], **spec: Any) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"kubelocal.dev/sim-duration": "600"}},
                "spec": {"containers": [{"name": "tensorflow", "image": WORKER_IMAGE,
                                         "command": ["python", "-c", "pass"]}]}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TFJob", "metadata": {"name": name},
            "spec": {**spec, "tfReplicaSpecs": {
                t: {"replicas": n, "restartPolicy": "Never", "template": template} for t, n in replicas.items()}}}


#: name, what Kubeflow's test or our table says, the job.
CASES = (
    ("master", "Kubeflow's Master is the chief: TF_CONFIG of Master 1 + Worker 2 + PS 1 (its TestClusterSpec)",
     case_job("master", {"Master": 1, "Worker": 2, "PS": 1})),
    ("sparse", "enableDynamicWorker, 2 PS + 2 workers: a worker sees every PS and itself "
     "(TestConvertClusterSpecToSparseClusterSpec)",
     case_job("sparse", {"PS": 2, "Worker": 2}, enableDynamicWorker=True)),
    ("dynchief", "enableDynamicWorker with a Chief (Kubeflow issue #1763: its chief gets an empty cluster)",
     case_job("dynchief", {"Chief": 1, "PS": 1, "Worker": 1}, enableDynamicWorker=True)),
    ("managedby", "an unknown runPolicy.managedBy: refused naming the field (by a webhook or in the status)",
     case_job("managedby", {"Worker": 1}, runPolicy={"managedBy": "example.com/mine"})),
)


def kubeflow_cases(op: Operator, admin: client.ApiClient, settle: float = 10.0) -> dict[str, dict[str, Any]]:
    """Submits each case, waits `settle` seconds, and returns per case: each pod's TF_CONFIG and the job's
    conditions (type, reason, message)."""
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    refused = {}
    for name, _, body in CASES:
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
        except client.ApiException as exc:
            refused[name] = json.loads(exc.body).get("message", exc.body)[:300] if exc.body else str(exc)
    time.sleep(settle)
    seen: dict[str, dict[str, Any]] = {}
    pods = core.list_namespaced_pod(NS).items
    for name, what, _ in CASES:
        if name in refused:
            seen[name] = {"refused": refused[name]}
            print(f"  case {name}: {what}\n    refused at create: {refused[name]}", flush=True)
            continue
        job = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        conditions = [(c["type"], c.get("reason", ""), c.get("message", "")[:160])
                      for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
        configs = {}
        for pod in pods:
            if pod.metadata.name.startswith(f"{name}-"):
                env = {e.name: e.value for c in pod.spec.containers for e in c.env or []}
                configs[pod.metadata.name] = env.get("TF_CONFIG")
        seen[name] = {"conditions": conditions, "tf_config": configs}
        print(f"  case {name}: {what}\n    conditions: {conditions or 'none'}", flush=True)
        for pod_name, tf_config in sorted(configs.items()):
            print(f"    {pod_name}: TF_CONFIG={tf_config}", flush=True)
    return seen


def identities(c: Any, workdir: Path) -> dict[str, Path]:
    """A client certificate and kubeconfig for each operator (group system:masters) and the admin's."""
    pki = c.cluster.plane.pki
    paths = {}
    for name in ("tfjob-operator", "training-operator"):
        pair = pki.save(f"bench-{name}", issue(pki.ca, f"bench:{name}", organizations=[MASTERS_GROUP], client=True))
        paths[name] = write_kubeconfig(workdir / f"{name}.kubeconfig", kubeconfig(c.url, pki.ca.cert_pem, pair))
    paths["admin"] = workdir / "admin.kubeconfig"
    c.cluster.write_kubeconfig(paths["admin"])
    return paths


def run(args: argparse.Namespace) -> dict[str, float]:
    kubeflow_bin = binaries("training-operator")["training-operator.v1"] if args.only != "ours" else Path("absent")
    module = kubeflow_module()
    crd = module / KUBEFLOW_CRD_IN_MODULE
    fig = Figures()
    with tempfile.TemporaryDirectory(prefix="kubeflow-side-", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp)
        policy, audit = workdir / "audit-policy.yaml", workdir / "audit.log"
        policy.write_text(AUDIT_POLICY)
        nodes = "4x{cpu:1000,memory:4000Gi,pods:3000,sim:true}"
        flags = (f"--audit-policy-file={policy}", f"--audit-log-path={audit}", "--audit-log-format=json")
        started = time.monotonic()
        with UpstreamClusterThread(workdir=workdir / "plane", nodes=nodes, pod_network=args.pod_network,
                                   crds=(CRD_PATH, crd), max_grace_seconds=1.0, apiserver_flags=flags) as c:
            print(f"upstream plane up in {time.monotonic() - started:.1f} s: Kubernetes v1.37.2, 4 simulated nodes; "
                  f"Kubeflow's CRD from {crd}", flush=True)
            kubeconfigs = identities(c, workdir)
            admin = config.new_client_from_config(str(kubeconfigs["admin"]))
            # Kubeflow's manifests make the namespace and an empty Secret its cert rotator fills (it refuses to start
            # without one); no ValidatingWebhookConfiguration, so no request is sent to its webhook.
            client.CoreV1Api(admin).create_namespace({"metadata": {"name": "kubeflow"}})
            client.CoreV1Api(admin).create_namespaced_secret("kubeflow", {"metadata": {
                "name": "training-operator-webhook-cert"}})
            obs = ObserverProcess(kubeconfigs["admin"])
            logs = Path(args.logs) if args.logs else workdir
            logs.mkdir(parents=True, exist_ok=True)
            ops = operators(logs, kubeconfigs, kubeflow_bin, args.kubeflow_qps, args.gang,
                            args.kubeflow_threads)
            order = [op for op in (ops if args.order == "ours-first" else ops[::-1])
                     if args.only in ("both", op.key)]
            try:
                for op in order:
                    label = ("tfjob-operator (TFJOB_KUBEFLOW_API=all, gang " + args.gang + ")" if op.key == "ours"
                             else f"training-operator v1.9.3 (--kube-api-qps {args.kubeflow_qps}, "
                             f"--controller-threads {args.kubeflow_threads})")
                    print(f"{label}:", flush=True)
                    if op.key == "kubeflow":
                        kubeflow_webhook(admin, module, op.webhook_port, host_address())
                    op.start()
                    try:
                        if op.key == "kubeflow":
                            mount_webhook_secret(admin)
                        print(f"  ready (a warm-up job's pod created) {wait_ready(op, obs):.1f} s after its start",
                              flush=True)
                        clear_jobs(admin)
                        for size in args.sizes:
                            burst(op, obs, audit, size, args.workers, args.timeout, fig)
                            clear_jobs(admin)
                        lost_worker(op, obs, args.workers, fig)
                        clear_jobs(admin)
                        if args.cases:
                            kubeflow_cases(op, admin)
                            clear_jobs(admin)
                        if args.running:
                            operator_kill(op, obs, audit, args.running, args.workers, fig)
                    finally:
                        op.stop()
                        if op.key == "kubeflow":
                            remove_kubeflow_webhook(admin)
                            shutil.rmtree(CERT_DIR.parent, ignore_errors=True)
                    clear_jobs(admin)
            finally:
                for op in ops:
                    op.stop()
                obs.close()
                for op in ops:
                    tail = op.log.read_text(errors="replace").splitlines()[-5:] if op.log.exists() else []
                    if args.verbose and tail:
                        print(f"  {op.key} log tail:\n    " + "\n    ".join(tail))
    return fig.values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100", help="burst sizes in jobs, comma-separated (default 100)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--running", type=int, default=50, help="jobs running when the operator is killed (0: skip)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a burst may take to finish")
    parser.add_argument("--kubeflow-qps", type=int, default=20,
                        help="training-operator's --kube-api-qps (its default and its manifests': 20, burst 30)")
    parser.add_argument("--kubeflow-threads", type=int, default=1,
                        help="training-operator's --controller-threads (its default and its manifests': 1)")
    parser.add_argument("--gang", default="builtin", choices=["builtin", "none"], help="our operator's gang backend")
    parser.add_argument("--order", default="ours-first", choices=["ours-first", "kubeflow-first"])
    parser.add_argument("--no-cases", dest="cases", action="store_false", help="skip Kubeflow's own cases")
    parser.add_argument("--pod-network", default="auto", choices=["auto", "on", "off"],
                        help="the plane's pod network (TF_CONFIG names peers by DNS with it, loopback without)")
    parser.add_argument("--only", default="both", choices=["both", "ours", "kubeflow"])
    parser.add_argument("--logs", help="a folder to keep the operators' logs in (default: the run's temporary one)")
    parser.add_argument("--verbose", action="store_true", help="print each operator's last log lines")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    try:
        values = run(args)
    except UpstreamError as exc:
        print(f"kubeflow_side: {exc}", file=sys.stderr, flush=True)
        return 2
    print("SUMMARY " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
