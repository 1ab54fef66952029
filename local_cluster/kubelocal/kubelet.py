"""Process kubelet: runs the containers of pods bound to its nodes as local subprocesses.

It registers its nodes, watches pods over HTTP, and for each pod bound to a node it serves (every
Node in the cluster that it has not lost) runs init containers in order, then the app containers, each
in its own process group with stdout+stderr in `<pod dir>/logs/<container>/<restart>.log`. Pod status
goes through `pods/status` (strategic merge, so other writers' conditions survive): phase, container
states with exit codes and reasons, restartCount, conditions. It honours restartPolicy with a short
exponential back-off, stops processes on deletion (SIGTERM to the group, SIGKILL after the grace period,
capped for local use) then confirms the deletion, and serves logs to the API server as its LogSource.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kubelocal import containers as ct
from kubelocal import podtoken, times
from kubelocal.controllers.node_lifecycle import NODE_NAME, ready_status
from kubelocal.kubeclient import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Informer,
    KubeClient,
    now_rfc3339,
    post_event,
    wait_event,
)
from kubelocal.lifeline import ChildProcess, Lifeline, spawn
from kubelocal.resources import node_allocatable

log = logging.getLogger(__name__)

USER_AGENT = "tfjob-local-kubelet"
COMPONENT = "kubelet"
#: Exit code and reason a runtime reports for a container that could not be started.
START_ERROR_EXIT = 128
DEFAULT_EVICTION_MESSAGE = "The node was low on resource: memory. "
LEASE_NAMESPACE = "kube-node-lease"
_TRANSIENT = (ApiError, OSError, asyncio.TimeoutError)


# ---------------------------------------------------------------------------------------------------------
# Rules (pure)


def exit_code(returncode: int) -> int:
    """A runtime's exit code: a process killed by signal N reports 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def should_restart(restart_policy: str, code: int) -> bool:
    return restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0)


def backoff_delay(restarts: int, base: float, cap: float) -> float:
    """Delay before restart number `restarts + 1`: base, doubling, capped (kubelet: 10s doubling to 5m)."""
    return min(cap, base * (2 ** restarts))


def pod_phase(restart_policy: str, statuses: Sequence[Mapping[str, Any]], *, terminal: bool = False) -> str:
    """The pod phase from its app container statuses, as kubelet's getPhase computes it.

    terminal: the pod is being torn down, so no container will restart.
    """
    running = waiting = stopped = succeeded = 0
    for status in statuses:
        state = status.get("state") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif "terminated" in (status.get("lastState") or {}) and not terminal:
            stopped += 1  # waiting to restart after a crash
        else:
            waiting += 1
    if waiting and not (terminal and running == 0):
        return "Pending"
    if running:
        return "Running"
    if terminal:
        return "Succeeded" if stopped == succeeded and stopped else "Failed"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Running" if restart_policy == "OnFailure" else "Failed"


def termination_message(message_file: Path | None, log_path: Path, code: int, policy: str | None) -> str:
    """A finished container's termination message, as the kubelet reads it: what the container wrote to its
    terminationMessagePath (at most 4 KiB); failing that, under FallbackToLogsOnError and a non-zero exit,
    the log's tail."""
    if message_file is not None and message_file.is_file():
        with message_file.open("rb") as f:
            written = f.read(ct.TERMINATION_MESSAGE_LIMIT).decode(errors="replace")
        if written:
            return written
    if code and policy == "FallbackToLogsOnError":
        return fallback_message(log_path)
    return ""


def fallback_message(log_path: Path) -> str:
    """A failed container's termination message under FallbackToLogsOnError: its last 80 lines, at most 2 KiB."""
    if not log_path.exists():
        return ""
    with log_path.open("rb") as f:
        f.seek(tail_offset(log_path, 80))
        return f.read()[-2048:].decode(errors="replace")


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last `lines` lines of a file begin."""
    size = path.stat().st_size
    if lines <= 0:
        return size
    with path.open("rb") as f:
        pos, found, block = size, 0, 65536
        # A final newline ends the last line rather than starting an empty one.
        f.seek(max(0, size - 1))
        if size and f.read(1) == b"\n":
            found = -1
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            for i in range(len(chunk) - 1, -1, -1):
                if chunk[i] == 0x0A:
                    found += 1
                    if found == lines:
                        return pos + i + 1
    return 0


# ---------------------------------------------------------------------------------------------------------
# Runtime state


@dataclass
class Run:
    """One execution of a container (restart number `restart`)."""

    restart: int
    log_path: Path
    started_at: str
    pid: int = 0
    finished_at: str | None = None
    code: int | None = None
    reason: str | None = None
    message: str | None = None
    forced_reason: str | None = None
    termination_file: Path | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    proc: ChildProcess | None = field(default=None, repr=False)

    def terminated(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exitCode": self.code, "reason": self.reason, "startedAt": self.started_at,
                               "finishedAt": self.finished_at, "containerID": self.container_id}
        if self.message:
            out["message"] = self.message
        return out

    @property
    def container_id(self) -> str:
        return f"process://{self.pid}"


@dataclass
class Container:
    spec: dict[str, Any]
    init: bool = False
    runs: list[Run] = field(default_factory=list)
    waiting_reason: str = "ContainerCreating"
    waiting_message: str | None = None
    backing_off: bool = False
    probe_ready: bool | None = None  # None: no readiness probe, ready while running
    probe_task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def running(self) -> Run | None:
        run = self.runs[-1] if self.runs else None
        return run if run is not None and run.code is None else None

    def status(self) -> dict[str, Any]:
        """The containerStatus entry."""
        runs = self.runs
        last = runs[-1] if runs else None
        state: dict[str, Any]
        last_state: dict[str, Any] = {}
        if last is None or self.backing_off:
            waiting: dict[str, Any] = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
            if last is not None:
                last_state = {"terminated": last.terminated()}
        elif last.code is None:
            state = {"running": {"startedAt": last.started_at}}
        else:
            state = {"terminated": last.terminated()}
        if not last_state and len(runs) >= 2 and not self.backing_off:
            last_state = {"terminated": runs[-2].terminated()}
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.spec.get("image") or "local",
            "imageID": "",
            "ready": "running" in state and not self.init and self.probe_ready is not False,
            "restartCount": max(0, len(runs) - 1),
            "started": "running" in state,
            "state": state,
            "lastState": last_state,
        }
        if last is not None:
            status["containerID"] = last.container_id
        return status


# ---------------------------------------------------------------------------------------------------------
# Per-pod worker


class PodRuntime:
    """Everything the kubelet does for one pod (one uid)."""

    def __init__(self, kubelet: ProcessKubelet, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta, spec = pod["metadata"], pod["spec"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.node: str = spec["nodeName"]
        self.dir = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid}"
        self.init_containers = [Container(c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [Container(c) for c in spec.get("containers") or []]
        self.restart_policy: str = spec.get("restartPolicy") or "Always"
        self.start_time = now_rfc3339()
        self.initialized = not self.init_containers
        self.terminal = False  # torn down: deleted, evicted, or finished for good
        self.reason: str | None = None
        self.message: str | None = None
        self.extra_conditions: list[dict[str, Any]] = []
        self.stopping = asyncio.Event()
        self.abandoned = False
        self._dirty = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._last_sent: Any = None
        self._transitions: dict[str, tuple[str, str]] = {}
        self._deleting = False
        #: Each container's process spec once prepared: what pods/exec runs a command in.
        self.specs: dict[str, ct.ProcessSpec] = {}
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self._main(), name=f"pod-{self.namespace}/{self.name}")
        self.writer = asyncio.create_task(self._write_loop(), name=f"status-{self.namespace}/{self.name}")
        self.mark()

    def mark(self) -> None:
        self._dirty.set()

    @property
    def all_containers(self) -> list[Container]:
        return self.init_containers + self.containers

    def container(self, name: str | None) -> Container:
        if name is None:
            if len(self.containers) == 1:
                return self.containers[0]
            names = " ".join(c.name for c in self.all_containers)
            raise KeyError(f"a container name must be specified for pod {self.name}, choose one of: [{names}]")
        for c in self.all_containers:
            if c.name == name:
                return c
        raise KeyError(f"container {name} is not valid for pod {self.name}")

    async def _main(self) -> None:
        try:
            specs = await self._prepare()
            if specs is None:
                return
            self.specs = specs
            for c in self.init_containers:
                code = await self._run_container(c, specs[c.name])
                if self.stopping.is_set():
                    return
                if code != 0:  # only reached when the policy is Never: the pod fails
                    self.terminal = True
                    self.mark()
                    return
            self.initialized = True
            for c in self.containers:
                c.waiting_reason = "ContainerCreating"
            self.mark()
            await asyncio.gather(*(self._run_container(c, specs[c.name]) for c in self.containers))
            if not self.stopping.is_set():
                self.terminal = True
                self.mark()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s: worker failed", self.namespace, self.name)

    async def _prepare(self) -> dict[str, ct.ProcessSpec] | None:
        """Directories, volume contents and each container's process spec; retried while config is missing."""
        for c in self.containers:
            c.waiting_reason = "PodInitializing" if self.init_containers else "ContainerCreating"
        while not self.stopping.is_set():
            try:
                specs = await self._process_specs()
                for c in self.all_containers:
                    c.waiting_message = None
                return specs
            except ct.ContainerConfigError as exc:
                for c in self.all_containers:
                    c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
                self.mark()
                await self.kubelet.post_event(self.pod, "Warning", "Failed", f"Error: {exc}")
            except _TRANSIENT as exc:  # reading ConfigMaps/Secrets failed or a directory could not be made
                log.warning("pod %s/%s: preparing containers failed (%s); retrying", self.namespace, self.name, exc)
            await wait_event(self.stopping, self.kubelet.config_retry_seconds)
        return None

    async def _process_specs(self) -> dict[str, ct.ProcessSpec]:
        refs = await self.kubelet.fetch_refs(self.pod)
        workdir = self.kubelet.workdir
        volumes = ct.volume_host_paths(self.pod, self.dir, workdir)
        cwd = self.dir / "work"
        cwd.mkdir(parents=True, exist_ok=True)
        for volume in self.pod["spec"].get("volumes") or []:
            host = volumes[volume["name"]]
            host.mkdir(parents=True, exist_ok=True)
            files = ct.volume_files(self.pod, volume, refs)
            for rel, content in (files or {}).items():
                target = host / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
        allocatable = node_allocatable(self.kubelet.node_objects.get(self.node) or {})
        # The ServiceAccount's token, bound to the pod: its mount's files, and a KUBECONFIG presenting it.
        creds = await podtoken.pod_credentials(self.kubelet.client, self.pod)
        if creds is not None:
            sa_mount = podtoken.write_mount(self.dir / "serviceaccount", creds)
            kubeconfig = podtoken.write_token_kubeconfig(self.dir / "kubeconfig", self.kubelet.url, creds)
        specs = {}
        for c in self.all_containers:
            env = ct.container_env(self.pod, c.spec, refs, allocatable)
            mounts = ct.container_mounts(c.spec, volumes)
            if creds is not None:
                mounts.append((podtoken.MOUNT_PATH, sa_mount))
            specs[c.name] = ct.process_spec(self.pod, c.spec, env, mounts, cwd,
                                            ct.defaults_for(c.spec.get("image"), self.kubelet.images,
                                                            self.kubelet.image))
            for key, value in self.kubelet.cluster_env.items():  # host paths: never mapped into the pod's mounts
                if key not in env:
                    specs[c.name].env[key] = value
            if creds is not None and "KUBECONFIG" not in env:
                specs[c.name].env["KUBECONFIG"] = str(kubeconfig)
            (self.dir / "logs" / c.name).mkdir(parents=True, exist_ok=True)
        return specs

    async def _run_container(self, c: Container, spec: ct.ProcessSpec) -> int:
        """Run, wait, restart per policy; the last exit code."""
        policy = self.restart_policy
        if c.init and policy == "Always":
            policy = "OnFailure"  # init containers are retried until they succeed, never rerun after
        code = 0
        while not self.stopping.is_set():
            run = await self._spawn(c, spec)
            code = await self._wait(c, run)
            self.mark()
            if self.stopping.is_set() or not should_restart(policy, code):
                return code
            delay = backoff_delay(len(c.runs) - 1, *self.kubelet.backoff)
            c.backing_off, c.waiting_reason = True, "CrashLoopBackOff"
            c.waiting_message = (f"back-off {delay:g}s restarting failed container={c.name} "
                                 f"pod={self.name}_{self.namespace}({self.uid})")
            self.mark()
            await self.kubelet.post_event(self.pod, "Warning", "BackOff", "Back-off restarting failed container "
                                          f"{c.name} in pod {self.name}_{self.namespace}({self.uid})")
            await wait_event(self.stopping, delay)
            c.backing_off, c.waiting_message = False, None
        return code

    async def _spawn(self, c: Container, spec: ct.ProcessSpec) -> Run:
        restart = len(c.runs)
        run = Run(restart=restart, log_path=self.dir / "logs" / c.name / f"{restart}.log", started_at=now_rfc3339(),
                  termination_file=spec.termination_file)
        if spec.termination_file is not None:
            # Each run starts with no message, so a restart never reports its predecessor's.
            spec.termination_file.parent.mkdir(parents=True, exist_ok=True)
            spec.termination_file.unlink(missing_ok=True)
        with run.log_path.open("ab") as log_file:
            try:
                proc = spawn(spec.argv, cwd=spec.cwd, env=spec.env, stdout=log_file, lifeline=self.kubelet.lifeline)
            except OSError as exc:
                run.code, run.reason, run.finished_at = START_ERROR_EXIT, "StartError", now_rfc3339()
                run.message = f"failed to start container process: exec: {spec.argv[0]!r}: {exc.strerror}"
                c.runs.append(run)
                run.exited.set()
                return run
        run.pid, run.proc = proc.pid, proc
        c.runs.append(run)
        self.kubelet.processes[proc.pid] = proc
        if c.spec.get("readinessProbe") and not c.init:
            c.probe_ready = False
            c.probe_task = asyncio.create_task(self._probe_loop(c, run, spec), name=f"probe-{self.name}/{c.name}")
        self.mark()
        return run

    async def _probe_loop(self, c: Container, run: Run, spec: ct.ProcessSpec) -> None:
        """Readiness as kubelet's prober: unready until successThreshold passes, again after failureThreshold."""
        probe = c.spec["readinessProbe"]
        period = max(1, int(probe.get("periodSeconds") or 10))
        timeout = max(1, int(probe.get("timeoutSeconds") or 1))
        needed = max(1, int(probe.get("successThreshold") or 1))
        allowed = max(1, int(probe.get("failureThreshold") or 3))
        await asyncio.sleep(int(probe.get("initialDelaySeconds") or 0))
        successes = failures = 0
        while run.code is None:
            ok = await run_probe(probe, c.spec, spec, timeout, self.kubelet.lifeline)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            ready = True if successes >= needed else False if failures >= allowed else c.probe_ready
            if ready != c.probe_ready and run.code is None:
                c.probe_ready = ready
                self.mark()
            await asyncio.sleep(period)

    async def _wait(self, c: Container, run: Run) -> int:
        proc = run.proc
        if proc is None:
            return run.code or 0
        try:
            returncode = await proc.wait()
            run.code = exit_code(returncode)
            run.finished_at = now_rfc3339()
            if run.forced_reason and returncode < 0:
                run.reason = run.forced_reason
            else:
                run.reason = "Completed" if run.code == 0 else "Error"
            run.message = termination_message(run.termination_file, run.log_path, run.code,
                                              c.spec.get("terminationMessagePolicy")) or None
        finally:
            if c.probe_task is not None:
                c.probe_task.cancel()
            # Like a container's PID 1 exiting: whatever the process left in its group goes too.
            _killpg(proc.pid, signal.SIGKILL)
            self.kubelet.lifeline.forget(proc.pid)
            self.kubelet.processes.pop(proc.pid, None)
            run.exited.set()  # also when cancelled at shutdown, so no log follower waits forever
        return run.code

    async def terminate(self, grace: float) -> None:
        """Stop every container: SIGTERM to each process group, SIGKILL after `grace` seconds."""
        self.stopping.set()
        self.terminal = True
        running = [c.running for c in self.all_containers if c.running is not None]
        for run in running:
            _killpg(run.pid, signal.SIGTERM)
        waits = [asyncio.create_task(run.exited.wait()) for run in running]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=max(0.0, grace))
            for run in running:
                if not run.exited.is_set():
                    _killpg(run.pid, signal.SIGKILL)
            if pending:
                await asyncio.wait(pending)
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.mark()

    def abandon(self) -> None:
        """The node is gone: kill processes at once and never report again."""
        self.abandoned = True
        self.stopping.set()
        for c in self.all_containers:
            if c.running is not None:
                _killpg(c.running.pid, signal.SIGKILL)
        for task in (self.writer,):
            if task is not None:
                task.cancel()

    async def delete_confirmed(self) -> None:
        """Graceful deletion: stop containers, report the terminal status, then remove the pod for good."""
        if self._deleting:
            return
        self._deleting = True
        meta = self.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        grace = min(float(grace), self.kubelet.max_grace_seconds)
        if any(c.running for c in self.all_containers):
            await self.kubelet.post_event(self.pod, "Normal", "Killing", "Stopping container "
                                          + ", ".join(c.name for c in self.all_containers if c.running))
        await self.terminate(grace)
        if self.abandoned:
            return
        await self.push_status()
        await self.kubelet.confirm_deletion(self.namespace, self.name, self.uid)

    # -- status -----------------------------------------------------------------------------------------

    def phase(self) -> str:
        if self.reason == "Evicted":
            return "Failed"
        if not self.initialized:
            failed_init = any(c.runs and c.runs[-1].code not in (None, 0) and not c.backing_off
                              for c in self.init_containers)
            if self.terminal and (failed_init or self.stopping.is_set()):
                return "Failed"
            return "Pending"
        return pod_phase(self.restart_policy, [c.status() for c in self.containers], terminal=self.terminal)

    def _condition(self, ctype: str, ok: bool, reason: str | None = None, message: str | None = None
                   ) -> dict[str, Any]:
        status = "True" if ok else "False"
        previous = self._transitions.get(ctype)
        if previous is None or previous[0] != status:
            self._transitions[ctype] = (status, now_rfc3339())
        # reason/message always present (null clears them), because the patch merges conditions by type.
        return {"type": ctype, "status": status, "lastProbeTime": None,
                "lastTransitionTime": self._transitions[ctype][1], "reason": reason, "message": message}

    def status(self) -> dict[str, Any]:
        """The status this kubelet reports (conditions it does not own are left to the server's merge)."""
        phase = self.phase()
        statuses = [c.status() for c in self.containers]
        finished = phase in ("Succeeded", "Failed")
        unready = [s["name"] for s in statuses if not s["ready"]]
        if finished:
            ready_reason: tuple[str | None, str | None] = ("PodCompleted", None)
        elif unready:
            ready_reason = ("ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
        else:
            ready_reason = (None, None)
        ready = not finished and not unready
        init_pending = [c.name for c in self.init_containers if not (c.runs and c.runs[-1].code == 0)]
        conditions = [
            self._condition("PodReadyToStartContainers", not finished),
            self._condition("Initialized", self.initialized, *(
                (None, None) if self.initialized else
                ("ContainersNotInitialized", f"containers with incomplete status: [{' '.join(init_pending)}]"))),
            self._condition("Ready", ready, *ready_reason),
            self._condition("ContainersReady", ready, *ready_reason),
            *self.extra_conditions,
        ]
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": ct.LOCAL_IP,
            "hostIPs": [{"ip": ct.LOCAL_IP}],
            "podIP": ct.LOCAL_IP,
            "podIPs": [{"ip": ct.LOCAL_IP}],
            "startTime": self.start_time,
            "containerStatuses": statuses,
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        return status

    async def push_status(self) -> None:
        """Send the current status unless it is what we sent last."""
        async with self._write_lock:
            path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status"
            for attempt in range(5):
                async with self.kubelet.status_slots:
                    if self.abandoned:
                        return
                    body = {"status": self.status()}  # the state now, not when the write was asked for
                    if body == self._last_sent:
                        return
                    try:
                        await self.kubelet.client.patch(path, body, STRATEGIC_MERGE_PATCH)
                        self._last_sent = body
                        return
                    except ApiError as exc:
                        if exc.status in (404, 409, 410, 422):
                            if exc.status == 422:
                                log.warning("pod %s/%s: status rejected: %s", self.namespace, self.name, exc)
                            return
                    except (TimeoutError, OSError) as exc:
                        log.debug("pod %s/%s: status update failed (%s), retrying", self.namespace, self.name, exc)
                await asyncio.sleep(0.1 * (attempt + 1))

    async def _write_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.push_status()


async def run_probe(probe: Mapping[str, Any], container: Mapping[str, Any], spec: ct.ProcessSpec,
                    timeout: float, lifeline: Lifeline | None = None) -> bool:
    """One exec, tcpSocket or httpGet probe against the local process; grpc probes are not checked locally."""
    try:
        async with asyncio.timeout(timeout):
            if "exec" in probe:
                proc = spawn(spec.command(probe["exec"].get("command") or []), cwd=spec.cwd, env=spec.env,
                             stdout=subprocess.DEVNULL, lifeline=lifeline)
                try:
                    return await proc.wait() == 0
                finally:
                    if proc.returncode is None:
                        _killpg(proc.pid, signal.SIGKILL)
                        await proc.wait()
                    if lifeline is not None:
                        lifeline.forget(proc.pid)
            if "tcpSocket" in probe:
                port = ct.probe_port(container, probe["tcpSocket"].get("port"))
                _, writer = await asyncio.open_connection(ct.LOCAL_IP, port)
                writer.close()
                return True
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = ct.probe_port(container, get.get("port"))
                url = f"{(get.get('scheme') or 'HTTP').lower()}://{ct.LOCAL_IP}:{port}{get.get('path') or '/'}"
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
                async with aiohttp.ClientSession() as session, session.get(url, headers=headers, ssl=False) as resp:
                    return 200 <= resp.status < 400
    except (TimeoutError, OSError, aiohttp.ClientError, ct.ContainerConfigError):
        return False
    return True


def _killpg(pgid: int, sig: int) -> None:
    if pgid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# ---------------------------------------------------------------------------------------------------------
# The kubelet


class ProcessKubelet:
    """Runs pods bound to the cluster's nodes as local processes; the API server's LogSource."""

    def __init__(self, url: str, *, nodes: Sequence[Mapping[str, Any]], workdir: Path,
                 max_grace_seconds: float = 5.0, backoff: tuple[float, float] = (0.2, 5.0),
                 config_retry_seconds: float = 1.0, heartbeat_seconds: float = 1.0,
                 image: ct.ImageDefaults = ct.ImageDefaults(),
                 images: Mapping[str, ct.ImageDefaults] | None = None,
                 cluster_env: Mapping[str, str] | None = None, status_concurrency: int = 6) -> None:
        self.url = url
        #: What every container's image is taken to give it (there is no image locally): ENV and WORKDIR.
        self.image = image
        #: Image repository → what that image gives (ENTRYPOINT as a local command, ENV, WORKDIR).
        self.images = dict(images or {})
        #: Env every container gets (lowest priority): a real kubelet's KUBERNETES_SERVICE_HOST/PORT; here the
        #: KUBECONFIG of the local API server, for pods that mount no ServiceAccount token (a pod that does gets
        #: a KUBECONFIG presenting its token).
        self.cluster_env = dict(cluster_env or {})
        self.workdir = Path(workdir).resolve()
        self.declared_nodes = [dict(n) for n in nodes]
        self.max_grace_seconds = max_grace_seconds
        self.backoff = backoff
        self.config_retry_seconds = config_retry_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.client = KubeClient(url, USER_AGENT, max_connections=8)
        # Leases and node status on their own connections, as the kubelet's heartbeat client: a backlog of pod
        # status writes during a burst must not delay a renewal until the node looks unreachable.
        self.heartbeat_client = KubeClient(url, USER_AGENT, max_connections=2)
        #: Pod status writes in flight at once. A pod computes its status once it holds a slot, so under a
        #: backlog it sends its latest state and skips the ones it went through while waiting.
        self.status_slots = asyncio.Semaphore(status_concurrency)
        self.processes: dict[int, ChildProcess] = {}
        #: Kills every pod's process group if this process dies without stopping them (e.g. SIGKILLed).
        self.lifeline = Lifeline()
        self.lost_nodes: set[str] = set()
        self._runtimes: dict[str, PodRuntime] = {}
        self._retired: list[PodRuntime] = []  # forgotten runtimes whose tasks may still be winding down
        self._by_name: dict[tuple[str, str], str] = {}
        self._confirming: set[str] = set()
        self._pods = Informer(self.client, "/api/v1/pods", self._on_pod, index_fields=(NODE_NAME,))
        self._nodes = Informer(self.client, "/api/v1/nodes", self._on_node)
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def node_objects(self) -> dict[str, dict[str, Any]]:
        return {key[1]: obj for key, obj in self._nodes.cache.items()}

    # -- start / stop -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the declared nodes (Ready), then start serving pods."""
        self.lifeline.start()
        with contextlib.suppress(ApiError):  # kube-apiserver makes this system namespace; 409 if it exists
            await self.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": LEASE_NAMESPACE}})
        for node in self.declared_nodes:
            await self._register(node)
            await self._renew_lease(node["metadata"]["name"])
        self._tasks = [asyncio.create_task(self._nodes.run(), name="kubelet-nodes"),
                       asyncio.create_task(self._heartbeat(), name="kubelet-heartbeat")]
        await self._nodes.synced.wait()
        self._tasks.append(asyncio.create_task(self._pods.run(), name="kubelet-pods"))
        await self._pods.synced.wait()

    async def stop(self, grace: float = 2.0) -> None:
        """Stop watching and end every process this kubelet started (SIGTERM, SIGKILL after `grace`)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        runtimes = list(self._runtimes.values()) + self._retired
        for rt in runtimes:
            rt.abandoned = True  # the API server may be going away too: no more status writes
        await asyncio.gather(*(rt.terminate(min(grace, self.max_grace_seconds)) for rt in runtimes),
                             return_exceptions=True)
        leftovers = [t for rt in runtimes for t in (rt.task, rt.writer) if t is not None and not t.done()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        for pid in list(self.processes):
            _killpg(pid, signal.SIGKILL)
        self.lifeline.close()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.client.close()
        await self.heartbeat_client.close()

    async def _register(self, node: Mapping[str, Any]) -> None:
        name = node["metadata"]["name"]
        try:
            await self.client.post("/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
            await self.client.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": node["metadata"]["labels"]},
                                                              "spec": node.get("spec") or {}}, MERGE_PATCH)
        status = dict(node.get("status") or {})
        status["conditions"] = ready_conditions(True)
        await self.client.patch(f"/api/v1/nodes/{name}/status", {"status": status}, MERGE_PATCH)

    async def _heartbeat(self) -> None:
        """Renew each served node's Lease; the node lifecycle controller marks a node whose Lease goes
        stale unreachable (a lost node's kubelet simply stops renewing). A served node marked so meanwhile
        is posted Ready again, as the kubelet's node status update does."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            for node in self.declared_nodes:
                name = node["metadata"]["name"]
                if name not in self.lost_nodes:
                    with contextlib.suppress(*_TRANSIENT):
                        await self._renew_lease(name)
                        cached = self._nodes.cache.get(("", name))
                        if cached is not None and ready_status(cached) != "True":
                            await self.heartbeat_client.patch(f"/api/v1/nodes/{name}/status", {"status": {
                                "conditions": ready_conditions(True)}}, MERGE_PATCH)

    async def _renew_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        stamp = times.format_micro_time()
        spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": stamp}
        try:
            await self.heartbeat_client.patch(f"{path}/{node}", {"spec": spec}, MERGE_PATCH)
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.heartbeat_client.post(path, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                          "metadata": {"name": node}, "spec": {**spec, "acquireTime": stamp}})

    # -- events ---------------------------------------------------------------------------------------------

    def serves(self, node: str | None) -> bool:
        return bool(node) and node not in self.lost_nodes and ("", node) in self._nodes.cache

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "ADDED" and self._pods.synced.is_set():
            for pod in self._pods.by_field(NODE_NAME, node["metadata"]["name"]):
                self._on_pod("MODIFIED", pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        rt = self._runtimes.get(uid)
        if kind == "DELETED":
            if rt is not None:
                self._forget(rt)
                if not rt.abandoned:
                    self._spawn_background(rt.terminate(min(self.max_grace_seconds,
                                                            float(meta.get("deletionGracePeriodSeconds") or 2))))
                rt.abandoned = True
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not self.serves(node):
            return
        if rt is None:
            if meta.get("deletionTimestamp"):
                self._confirm_in_background(pod)  # never ran here (or ran before a restart): nothing to stop
                return
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return  # finished before this kubelet started; never rerun
            rt = PodRuntime(self, pod)
            self._runtimes[uid] = rt
            self._by_name[(rt.namespace, rt.name)] = uid
            rt.start()
            return
        rt.pod = pod
        if meta.get("deletionTimestamp") and not rt.abandoned:
            self._spawn_background(rt.delete_confirmed())

    def _forget(self, rt: PodRuntime) -> None:
        self._runtimes.pop(rt.uid, None)
        self._retired = [r for r in self._retired if r.task is not None and not r.task.done()]
        self._retired.append(rt)
        if self._by_name.get((rt.namespace, rt.name)) == rt.uid:
            del self._by_name[(rt.namespace, rt.name)]
        if rt.writer is not None:
            rt.writer.cancel()

    def _confirm_in_background(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        if meta["uid"] in self._confirming:
            return
        self._confirming.add(meta["uid"])
        self._spawn_background(self.confirm_deletion(meta.get("namespace", "default"), meta["name"], meta["uid"]))

    def _spawn_background(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def confirm_deletion(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final word on a terminating pod: delete it with grace 0, for this uid only."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}
        try:
            await self.client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("confirming deletion of %s/%s failed: %s", namespace, name, exc)
        except (TimeoutError, OSError) as exc:
            log.warning("confirming deletion of %s/%s failed: %s", namespace, name, exc)
        finally:
            self._confirming.discard(uid)

    async def fetch_refs(self, pod: Mapping[str, Any]) -> ct.Refs:
        """The ConfigMaps and Secrets a pod references (None for those that do not exist)."""
        configmaps, secrets = ct.referenced_names(pod)
        ns = pod["metadata"].get("namespace", "default")

        async def get(kind: str, name: str) -> Mapping[str, Any] | None:
            try:
                obj: Mapping[str, Any] = await self.client.get(f"/api/v1/namespaces/{ns}/{kind}/{name}")
                return obj
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise

        return ct.Refs(configmaps={n: await get("configmaps", n) for n in configmaps if n},
                       secrets={n: await get("secrets", n) for n in secrets if n})

    async def post_event(self, pod: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        await post_event(self.client, pod, kind, reason, message, component=COMPONENT,
                         host=(pod.get("spec") or {}).get("nodeName"))

    # -- simulations --------------------------------------------------------------------------------------

    def runtime(self, namespace: str, pod: str) -> PodRuntime:
        uid = self._by_name.get((namespace, pod))
        if uid is None or uid not in self._runtimes:
            raise KeyError(f'pod "{pod}" is not running on this kubelet (namespace {namespace})')
        return self._runtimes[uid]

    async def evict(self, namespace: str, pod: str, message: str = DEFAULT_EVICTION_MESSAGE, *,
                    grace_seconds: float = 0.0) -> None:
        """Node-pressure eviction: stop the pod (hard eviction: no grace by default), phase Failed, reason
        Evicted, a DisruptionTarget condition; the pod object stays, as with a real kubelet."""
        rt = self.runtime(namespace, pod)
        rt.reason, rt.message = "Evicted", message
        rt.extra_conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                "message": message, "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}]
        await self.post_event(rt.pod, "Warning", "Evicted", message)
        await rt.terminate(min(grace_seconds, self.max_grace_seconds))
        await rt.push_status()

    async def kill_container(self, namespace: str, pod: str, sig: int = signal.SIGKILL,
                             container: str | None = None) -> None:
        """Signal a running container's process group, as a crash or the OOM killer would (SIGKILL reads as
        OOMKilled, exit 137); the restartPolicy then applies."""
        rt = self.runtime(namespace, pod)
        candidates = [rt.container(container)] if container else rt.all_containers
        for c in candidates:
            run = c.running
            if run is not None:
                run.forced_reason = "OOMKilled" if sig == signal.SIGKILL else None
                _killpg(run.pid, sig)
                return
        raise KeyError(f"pod {namespace}/{pod} has no running container"
                       + (f" named {container}" if container else ""))

    async def lose_node(self, node: str) -> None:
        """Node loss: the node's processes die at once and its kubelet goes silent (no Lease renewals, no
        status writes). The node lifecycle controller then marks it unreachable and its taint manager
        deletes its pods, which stay Terminating: no kubelet is left to confirm."""
        self.lost_nodes.add(node)
        for rt in list(self._runtimes.values()):
            if rt.node == node:
                rt.abandon()
                self._forget(rt)

    async def restore_node(self, node: str) -> None:
        """The node comes back: its kubelet renews the Lease and posts Ready again (the node lifecycle
        controller then lifts the unreachable taints), confirms deletions that piled up and starts pods
        that are still meant to run."""
        self.lost_nodes.discard(node)
        await self._renew_lease(node)
        await self.client.patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": ready_conditions(True)}},
                                MERGE_PATCH)
        for pod in self._pods.by_field(NODE_NAME, node):
            self._on_pod("MODIFIED", pod)

    # -- LogSource --------------------------------------------------------------------------------------

    async def stream(self, namespace: str, pod: str, container: str | None, *, follow: bool,
                     tail_lines: int | None, previous: bool) -> AsyncIterator[bytes]:
        """A container's log, as the API server's pods/log serves it; KeyError (on first read) when none."""
        run = self._log_run(namespace, pod, container, previous)
        async for chunk in _read_log(run, follow=follow and not previous, tail_lines=tail_lines, poll=0.05):
            yield chunk

    def _log_run(self, namespace: str, pod: str, container: str | None, previous: bool) -> Run:
        rt = self.runtime(namespace, pod)
        c = rt.container(container)
        if previous:
            if len(c.runs) < 2 and not (c.backing_off and c.runs):
                raise KeyError(f'previous terminated container "{c.name}" in pod "{pod}" not found')
            return c.runs[-1] if c.backing_off else c.runs[-2]
        if not c.runs:
            raise KeyError(f'container "{c.name}" in pod "{pod}" is waiting to start: {c.waiting_reason}')
        return c.runs[-1]

    # -- ExecSource -------------------------------------------------------------------------------------

    def exec_spec(self, namespace: str, pod: str, container: str | None) -> ct.ProcessSpec:
        """The process environment (env, work dir, mounts) a command exec'd in a running container gets;
        KeyError naming what is missing otherwise."""
        rt = self.runtime(namespace, pod)
        c = rt.container(container)
        spec = rt.specs.get(c.name)
        if spec is None or c.running is None:
            raise KeyError(f'container not found ("{c.name}")')
        return spec

    def pods(self) -> Iterable[PodRuntime]:
        return list(self._runtimes.values())


async def _read_log(run: Run, *, follow: bool, tail_lines: int | None, poll: float) -> AsyncIterator[bytes]:
    """The log file from the start (or its last lines), then, when following, new bytes until the run ends."""
    path = run.log_path
    if not path.exists():
        return
    offset = tail_offset(path, tail_lines) if tail_lines is not None else 0
    with path.open("rb") as f:
        f.seek(offset)
        while True:
            chunk = f.read(65536)
            if chunk:
                yield chunk
                continue
            if not follow or run.exited.is_set():
                rest = f.read()
                if rest:
                    yield rest
                    continue
                return
            # Polled, not awaited: the API server serving this log runs on another loop than the kubelet.
            await asyncio.sleep(poll)


def ready_conditions(ready: bool | None) -> list[dict[str, Any]]:
    """Node conditions: Ready (True/False, or Unknown when None: lost) and the pressure conditions."""
    now = now_rfc3339()
    if ready is None:
        def unknown(ctype: str) -> dict[str, Any]:
            return {"type": ctype, "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now,
                    "lastTransitionTime": now}
        return [unknown(t) for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    return [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
         "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
         "message": "kubelet has no disk pressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
         "message": "kubelet has sufficient PID available", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "Ready", "status": "True" if ready else "False",
         "reason": "KubeletReady" if ready else "KubeletNotReady",
         "message": "kubelet is posting ready status" if ready else "kubelet is not ready",
         "lastHeartbeatTime": now, "lastTransitionTime": now},
    ]
