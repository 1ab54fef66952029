"""`tfjob local FILE`: a TFJob trained end to end on this machine, no cluster needed.

It starts the local control plane (API emulator, scheduler stand-in, process kubelet), the real operator
(as its own process), submits the job through the API like `kubectl apply`, and shows the job, its pods and
the chief's progress live until the job ends. With a pod network (`--pod-network`) the operator renders the
cluster's TF_CONFIG (DNS names, port 2222) and runs in the plane's network namespace, where pod IPs are
reachable as from an in-cluster operator; without one, loopback addressing (127.0.0.1, a port per pod).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from tfjob_operator.api import TFJob, constants
from tfjob_operator.api.observed import FINISHED_CONDITIONS
from tfjob_operator.client.jobs import (
    Clients,
    connect,
    create_object,
    get_job,
    job_events,
    job_pods,
    submit,
    true_conditions,
)
from tfjob_operator.client.local.chief_log import Progress, load_json, parse_log, plot_history
from tfjob_operator.client.local.claims import ensure_claims
from tfjob_operator.client.local.elastic import CapacityFaults, breakdown_text, width_text
from tfjob_operator.client.local.processes import stop_process
from tfjob_operator.client.local.view import JobSnapshot, make_view


@dataclass
class LocalRunOptions:
    workdir: Path
    nodes: str | None = None
    timeout: float = 1800.0
    #: Seconds after the job is first Running at which one worker is SIGKILLed (to watch a gang restart).
    kill_worker_after: float | None = None
    #: Likewise, but hang that worker's training loop (SIGUSR2 to its trainer; the process and TensorFlow's
    #: heartbeats stay alive): a stall only the stall watchdog notices.
    stall_worker_after: float | None = None
    #: Seconds after the job is first Running at which one worker's link is cut (needs the pod network).
    partition_worker_after: float | None = None
    #: Seconds after the cut at which the link is restored (None: never; the gang restart replaces the pod).
    heal_partition_after: float | None = None
    #: `auto` (a pod network where namespaces can be made), `on` or `off` (loopback ports).
    pod_network: str = "off"
    #: Seconds after the chief's first epoch at which the node of one worker is lost (local/elastic.py).
    lose_node_after: float | None = None
    #: Seconds after that loss at which the node comes back.
    restore_node_after: float | None = None
    #: Seconds after the chief's first epoch at which one worker's pod is deleted gracefully, as a drain does.
    preempt_worker_after: float | None = None
    port: int = 0
    live: bool | None = None  # None: a rich live view on a terminal, plain lines otherwise
    #: Objects of other kinds from the job's file (a ConfigMap with the script), created before the jobs.
    objects: list[dict[str, Any]] = field(default_factory=list)
    #: `kubelocal` (the Python control plane) or `upstream` (kube-apiserver and its peers, built with Go).
    control_plane: str = "kubelocal"


@dataclass
class JobResult:
    name: str
    state: str
    duration: float
    restarts: int
    progress: Progress
    output_dir: Path | None
    #: Message of the condition the job ended with (why it failed, or who succeeded).
    message: str = ""
    #: Gang restarts caused by failures (status.failureRestarts); disruptions and resizes are not among them.
    failure_restarts: int = 0
    #: The elastic width at the end (`workers 3/4 (min 2)`), the resizes seen and the node-loss recovery split.
    width: str | None = None
    resizes: list[str] = field(default_factory=list)
    recovery: dict[str, float] | None = None


def operator_env(kubeconfig: Path, node_monitor_grace: float | None = None) -> dict[str, str]:
    """The operator's settings for local mode. No TFJOB_ADDRESSING (one in this shell is dropped too): the
    operator follows the plane's (`kube-public/pod-addressing`: `dns` on a pod network, else `loopback`). The
    plane's node monitor grace (how long an elastic gang waits for a lost node to show), when given."""
    grace = {"TFJOB_NODE_MONITOR_GRACE": f"{node_monitor_grace:g}"} if node_monitor_grace is not None else {}
    return {
        **{k: v for k, v in os.environ.items() if k != "TFJOB_ADDRESSING"},
        **grace,
        "KUBECONFIG": str(kubeconfig),
        "TFJOB_METRICS_PORT": "0",
        "TFJOB_LIVENESS_PORT": "0",
        # A few local jobs: read the chief's progress often (a cluster's default is 30 s).
        "TFJOB_PROGRESS_INTERVAL": os.environ.get("TFJOB_PROGRESS_INTERVAL", "5"),
        "TFJOB_LOG_LEVEL": os.environ.get("TFJOB_LOG_LEVEL", "INFO"),
        "PYTHONUNBUFFERED": "1",
    }


def start_operator(kubeconfig: Path, workdir: Path, *, netns_path: str | None = None,
                   node_monitor_grace: float | None = None) -> subprocess.Popen[bytes]:
    """The operator as its own process, which dies with this one even when this one is SIGKILLed; given the
    plane's namespace, run in there (it reaches pods' IPs, and the API at the same 127.0.0.1 port)."""
    from kubelocal.lifeline import die_with_parent

    log = (workdir / "operator.log").open("ab")
    argv = [sys.executable, "-m", "tfjob_operator.client.cli", "operator"]
    if netns_path is not None:
        argv = ["nsenter", f"--net={netns_path}", "--", *argv]
    return subprocess.Popen(
        argv, env=operator_env(kubeconfig, node_monitor_grace), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=die_with_parent(),
    )


#: Signals that stop `tfjob local` the way Ctrl-C does (a CI timeout, `kill`, a closed terminal).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived: unwind, stopping the operator and every pod on the way."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _signal_name(signum: int) -> str:
    return "interrupted" if signum == signal.SIGINT else signal.Signals(signum).name


def _raise_stopped(signum: int, _frame: object) -> None:
    # The first stop signal unwinds (the clean-up may take a pod's grace period); a second one exits at once,
    # and the operator and pods still go: they die with this process.
    for sig in STOP_SIGNALS:
        signal.signal(sig, _exit_now)
    print(f"{_signal_name(signum)}: stopping the operator and every pod (again to stop at once)",
          file=sys.stderr, flush=True)
    raise Stopped(signum)


def _exit_now(signum: int, _frame: object) -> None:
    print(f"{_signal_name(signum)} again: exiting now; the operator and the pods exit with this process",
          file=sys.stderr, flush=True)
    os._exit(128 + signum)


def stop_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_stopped)


def chief_progress(clients: Clients, pods: list[dict[str, Any]]) -> Progress:
    """Parse the current chief pod's log (small; re-read each tick so a new attempt is picked up)."""
    chiefs = [p for p in pods if p["metadata"]["labels"].get(constants.LABEL_JOB_ROLE) == constants.ROLE_CHIEF]
    if not chiefs or not (chiefs[0].get("status") or {}).get("containerStatuses"):
        return Progress()
    try:
        text = clients.core.read_namespaced_pod_log(chiefs[0]["metadata"]["name"], clients.namespace)
    except ApiException:
        return Progress()
    return parse_log(str(text))


def _worker_to_kill(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    workers = [p for p in pods if p["metadata"]["labels"].get(constants.LABEL_REPLICA_TYPE) == "worker"
               and p["metadata"]["labels"].get(constants.LABEL_JOB_ROLE) != constants.ROLE_CHIEF
               and (p.get("status") or {}).get("phase") == "Running"]
    return max(workers, key=lambda p: int(p["metadata"]["labels"][constants.LABEL_REPLICA_INDEX]), default=None)


def _hang_trainer(cluster: Any, namespace: str, pod: str) -> bool:
    """SIGUSR2 to the trainer (the child of the worker runtime's supervisor, the pod's process): its training
    loop hangs on purpose (tfjob_worker.lifecycle.hang_on_sigusr2)."""
    import psutil

    try:
        pid = next(c.running.pid for c in cluster.kubelet.runtime(namespace, pod).all_containers if c.running)
        trainers = psutil.Process(pid).children()
        for trainer in trainers:
            trainer.send_signal(signal.SIGUSR2)
    except (KeyError, StopIteration, psutil.Error):
        return False
    return bool(trainers)


def stall_needs_a_timeout(jobs: list[TFJob]) -> list[str]:
    """--stall-worker-after on a job whose watchdog is off would hang it for good: name the field to set."""
    return [f"{job.name}: spec.runPolicy.stallTimeoutSeconds is not set, so nothing would notice the frozen "
            "worker (set it, e.g. 20, to watch the stall watchdog restart the gang)"
            for job in jobs if not job.spec.runPolicy.stallTimeoutSeconds]


def run_local(jobs: list[TFJob], options: LocalRunOptions) -> int:
    """Run the jobs on a local control plane; exit 0 only if every job Succeeded, 128+N after signal N."""
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    stop_on_signals()
    from kubelocal.upstream.binaries import UpstreamError

    try:
        return _run_local(jobs, options)
    except Stopped as stop:
        return 128 + stop.signum
    except UpstreamError as exc:  # not built, or a process of the plane failed to start: say which and why
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_local(jobs: list[TFJob], options: LocalRunOptions) -> int:
    from kubelocal.network.plane import choose
    from kubelocal.planes import cluster_thread
    from tfjob_operator.api.crd import CRD_PATH
    from tfjob_operator.client.local.image import local_images, worker_image_defaults

    workdir = options.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    networked, why_not = choose(options.pod_network)
    if options.partition_worker_after is not None and not networked:
        raise ValueError(f"--partition-worker-after: cutting a worker's link needs the pod network ({why_not})")
    view = make_view(options.live)
    view.note(addressing_line(networked, why_not))
    view.note(f"workdir {workdir}")
    started = time.monotonic()
    with cluster_thread(options.control_plane, nodes=options.nodes, workdir=workdir, port=options.port,
                        crds=(CRD_PATH,), image=worker_image_defaults(), images=local_images(),
                        pod_network="on" if networked else "off",
                        controllers=_controller_settings(options)) as cluster:
        if options.control_plane == "kubelocal":
            cluster.apiserver.manage_gc()  # full collections off the request path while the jobs run
        kubeconfig = workdir / "kubeconfig"
        cluster.write_kubeconfig(kubeconfig)
        network = cluster.network
        operator = start_operator(kubeconfig, workdir, netns_path=network.netns_path if network else None,
                                  node_monitor_grace=cluster.cluster.controller_settings.node_monitor_grace)
        view.note(f"control plane at {cluster.url} (kubectl --kubeconfig {kubeconfig}); operator pid {operator.pid}")
        view.note(f"memory limits {cluster.kubelet.memory.why}")
        try:
            clients = connect(str(kubeconfig))
            for obj in options.objects:
                stored = create_object(clients, obj)
                view.note(f"{str(obj['kind']).lower()}/{stored['metadata']['name']} created")
            if options.control_plane == "upstream":
                for made in ensure_claims(clients, jobs):
                    view.note(f"persistentvolumeclaim/{made} created (kube-scheduler waits for a bound claim)")
            for job in jobs:
                submit(clients, job)
                view.note(f"tfjob.{constants.GROUP}/{job.name} created")
            results = _follow(clients, cluster, jobs, options, view, started)
        finally:
            view.stop()
            stop_process(operator)
    for result in results:
        _summarise(result, workdir)
    return 0 if all(r.state == "Succeeded" for r in results) else 1


def addressing_line(networked: bool, why_not: str) -> str:
    """The first line of `tfjob local`: which addressing the pods' TF_CONFIG uses, and why."""
    if networked:
        return ("addressing: dns (pod network: each pod has its own IP and cluster DNS; TF_CONFIG names peers "
                "<job>-<type>-<i>.<job>.<ns>.svc:2222, as on a cluster)")
    return f"addressing: loopback (127.0.0.1, a port per pod; {why_not})"
#: Node monitor grace when --lose-node-after is given: a lost node is seen in seconds (kube's default is 50 s, which
#: local mode keeps otherwise so a node busy with TensorFlow is never taken for lost). The operator is told the same.
LOST_NODE_GRACE_SECONDS = 6.0


def _controller_settings(options: LocalRunOptions) -> Any:
    from kubelocal.controllers import ControllerSettings

    if options.lose_node_after is None:
        return None
    return ControllerSettings(node_monitor_grace=LOST_NODE_GRACE_SECONDS)


def _follow(clients: Clients, cluster: Any, jobs: list[TFJob], options: LocalRunOptions, view: Any,
            started: float) -> list[JobResult]:
    deadline = started + options.timeout
    running_since: dict[str, float] = {}
    killed: set[str] = set()
    cut: dict[str, tuple[str, float]] = {}  # job → (its partitioned pod, when)
    ended: dict[str, JobResult] = {}
    faults = {job.name: CapacityFaults(options.lose_node_after, options.restore_node_after,
                                       options.preempt_worker_after, view.note) for job in jobs}
    with view:
        while len(ended) < len(jobs):
            snapshots = []
            for job in jobs:
                obj = get_job(clients, job.name)
                pods = job_pods(clients, job.name)
                progress = chief_progress(clients, pods)
                snapshots.append(JobSnapshot(obj, pods, progress))
                conds = true_conditions(obj)
                if "Running" in conds and job.name not in running_since:
                    running_since[job.name] = time.monotonic()
                if (options.kill_worker_after is not None and job.name not in killed
                        and job.name in running_since and progress.epoch >= 1
                        and time.monotonic() - running_since[job.name] >= options.kill_worker_after):
                    victim = _worker_to_kill(pods)
                    if victim:
                        cluster.call(cluster.kubelet.kill_container(
                            clients.namespace, victim["metadata"]["name"], signal.SIGKILL,
                            why="a fault injection (tfjob local --kill-worker-after)"))
                        killed.add(job.name)
                        view.note(f"killed {victim['metadata']['name']} with SIGKILL (--kill-worker-after)")
                if (options.stall_worker_after is not None and job.name not in killed
                        and job.name in running_since and progress.epoch >= 1
                        and time.monotonic() - running_since[job.name] >= options.stall_worker_after):
                    victim = _worker_to_kill(pods)
                    if victim and _hang_trainer(cluster, clients.namespace, victim["metadata"]["name"]):
                        killed.add(job.name)
                        view.note(f"hung the training loop of {victim['metadata']['name']} (SIGUSR2 to its "
                                  "trainer, --stall-worker-after); it stays alive, only the stall watchdog can tell")
                if (options.partition_worker_after is not None and job.name not in killed
                        and job.name in running_since and progress.epoch >= 1
                        and time.monotonic() - running_since[job.name] >= options.partition_worker_after):
                    victim = _worker_to_kill(pods)
                    if victim:
                        name = victim["metadata"]["name"]
                        cluster.call(cluster.kubelet.partition(clients.namespace, name))
                        killed.add(job.name)
                        cut[job.name] = (name, time.monotonic())
                        at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                        view.note(f"cut {name}'s network link at {at} (--partition-worker-after): it keeps "
                                  "running, its peers hear nothing until their peer-loss timeout")
                if job.name in cut and options.heal_partition_after is not None:
                    _heal_when_due(cluster, clients.namespace, cut, job.name, options.heal_partition_after, view)
                faults[job.name].tick(cluster, clients, job_events(clients, job.name), pods, progress,
                                      (obj.get("status") or {}).get("state"))
                done = [c for c in conds if c in FINISHED_CONDITIONS]
                if done and job.name not in ended:
                    ended[job.name] = _result(obj, progress, time.monotonic() - started, faults=faults[job.name])
            view.update(snapshots)
            if time.monotonic() > deadline:
                view.note(f"timed out after {options.timeout:g}s")
                for job in jobs:
                    ended.setdefault(job.name, _result(get_job(clients, job.name), Progress(),
                                                       time.monotonic() - started, state="TimedOut"))
                break
            time.sleep(0.5)  # the view's refresh tick; every state it shows is re-read from the API
    return [ended[job.name] for job in jobs]


def _heal_when_due(cluster: Any, namespace: str, cut: dict[str, tuple[str, float]], job: str, after: float,
                   view: Any) -> None:
    """Restore the partitioned pod's link `after` seconds after the cut (a pod the gang restart replaced is gone)."""
    name, at = cut[job]
    if time.monotonic() - at < after:
        return
    del cut[job]
    try:
        cluster.call(cluster.kubelet.heal(namespace, name))
        view.note(f"healed {name}'s network link (--heal-partition-after)")
    except KeyError:
        view.note(f"{name} is gone (the gang restart replaced it): no link left to heal")


def _result(obj: dict[str, Any], progress: Progress, duration: float, state: str | None = None,
            faults: CapacityFaults | None = None) -> JobResult:
    status = obj.get("status") or {}
    saved_model = progress.done.get("saved_model")
    state = state or next((c for c in reversed(true_conditions(obj)) if c in FINISHED_CONDITIONS), "Unknown")
    message = next((c.get("message") or "" for c in status.get("conditions") or [] if c.get("type") == state), "")
    return JobResult(
        name=obj["metadata"]["name"],
        state=state,
        duration=duration,
        restarts=int(status.get("restartCount", 0)),
        failure_restarts=int(status.get("failureRestarts", 0)),
        progress=progress,
        output_dir=Path(saved_model).parent if saved_model else None,
        message=message,
        width=width_text(obj),
        resizes=list(faults.resizes) if faults else [],
        recovery=faults.recovery.breakdown() if faults and faults.recovery else None,
    )


def _summarise(result: JobResult, workdir: Path) -> None:
    print()
    print(f"TFJob {result.name}: {result.state} in {result.duration:.1f}s, "
          f"{result.restarts + 1} attempt{'s' if result.restarts else ''} ({result.restarts} gang restarts)")
    if result.restarts:
        print(f"  failure restarts   {result.failure_restarts} (counted towards backoffLimit; disruptions and "
              "resizes are not)")
    if result.state != "Succeeded" and result.message:
        print(f"  why                {result.message}")
    if result.width:
        print(f"  width              {result.width}")
    for resize in result.resizes:
        print(f"  resized            {resize}")
    if result.recovery:
        print(f"  node loss          training again {breakdown_text(result.recovery)}")
    if result.output_dir:
        data = load_json(result.output_dir / "result.json") or {}
        history = load_json(result.output_dir / "history.json") or []
        if data.get("test_accuracy") is not None:
            print(f"  test accuracy      {float(data['test_accuracy']):.4f}")
        if data.get("resumed_from_epoch"):
            print(f"  resumed at epoch   {data['resumed_from_epoch']} (from the backup)")
        for row in history:
            if row.get("resized_from") is not None:
                print(f"  resumed at width   epoch {row['epoch']}: "
                      f"{row['resized_from']} → {row.get('replicas')} replicas")
        print(f"  SavedModel         {result.output_dir / 'saved_model'}")
        print(f"  checkpoints        {result.output_dir / 'checkpoints'}")
        if history:
            plot = plot_history(history, workdir / f"{result.name}-training.png", f"TFJob {result.name}")
            print(f"  training plot      {plot}")
    elif result.progress.metrics:
        print("  last metrics       " + " ".join(f"{k}={v}" for k, v in result.progress.metrics.items()))
    print(f"  pod logs           {workdir / 'pods'}  (and the operator's: {workdir / 'operator.log'})")
