"""Pod workers: everything the kubelet does for one pod (one uid), from its first sync to its teardown.

`PodWorker` is the part every kind of node shares: the pod's identity and containers, its status writer,
termination, abandonment (the node is lost) and the graceful deletion the kubelet confirms. `PodRuntime`
runs the containers as local processes: init containers in order, then the app containers, each restarted
per restartPolicy with exponential back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from kubelocal import containers as ct
from kubelocal import podtoken
from kubelocal.kubeclient import ApiError, KubeClient, now_rfc3339, wait_event
from kubelocal.lifeline import ChildProcess, Lifeline
from kubelocal.network import IpamExhausted, NetworkError
from kubelocal.resources import node_allocatable

from .cgroups import MemoryCgroups, memory_limit
from .container import Container, Run, killpg, start_process, wait_process
from .network import PodNetworking
from .pod_status import StatusManager
from .prober import ProbeTarget, readiness_loop
from .rules import backoff_delay, should_restart

log = logging.getLogger(__name__)

_TRANSIENT = (ApiError, OSError, asyncio.TimeoutError)


class KubeletHost(Protocol):
    """What a pod worker uses of its kubelet."""

    client: KubeClient
    shared_objects: podtoken.SharedObjects
    url: str
    status_slots: asyncio.Semaphore
    workdir: Path
    lifeline: Lifeline
    processes: dict[int, ChildProcess]
    backoff: tuple[float, float]
    config_retry_seconds: float
    max_grace_seconds: float
    image: ct.ImageDefaults
    images: dict[str, ct.ImageDefaults]
    cluster_env: dict[str, str]
    network: PodNetworking | None
    memory: MemoryCgroups
    #: The CA a pod's kubeconfig trusts when the API server speaks TLS to the host (None: plain HTTP).
    ca_pem: str | None

    @property
    def node_objects(self) -> dict[str, dict[str, Any]]: ...

    async def fetch_refs(self, pod: Mapping[str, Any]) -> ct.Refs: ...

    async def post_event(self, pod: Mapping[str, Any], kind: str, reason: str, message: str) -> None: ...

    async def confirm_deletion(self, namespace: str, name: str, uid: str) -> None: ...


class PodWorker:
    """One pod on one node: its containers, its reported status and its teardown; `_main` runs it."""

    def __init__(self, kubelet: KubeletHost, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta, spec = pod["metadata"], pod["spec"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.node: str = spec["nodeName"]
        self._init_containers = [Container(c, init=True) for c in spec.get("initContainers") or []]
        self._containers = [Container(c) for c in spec.get("containers") or []]
        self.restart_policy: str = spec.get("restartPolicy") or "Always"
        self.start_time = now_rfc3339()
        self.initialized = not self._init_containers
        self.terminal = False  # torn down: deleted, evicted, or finished for good
        self.reason: str | None = None
        self.message: str | None = None
        self.extra_conditions: list[dict[str, Any]] = []
        self.stopping = asyncio.Event()
        self.abandoned = False
        self._deleting = False
        #: Each container's process spec once prepared: what pods/exec runs a command in.
        self.specs: dict[str, ct.ProcessSpec] = {}
        #: `status.podIP`: the host's loopback where pods share its network; on the pod network, none until
        #: the pod has its namespace (as a real kubelet reports none before the sandbox is up).
        self.pod_ip: str | None = ct.LOCAL_IP
        self.status_manager = StatusManager(self, kubelet.client, kubelet.status_slots)
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.Task[None] | None = None

    @property
    def init_containers(self) -> list[Container]:
        return self._init_containers

    @property
    def containers(self) -> list[Container]:
        return self._containers

    @property
    def all_containers(self) -> list[Container]:
        return self._init_containers + self._containers

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

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self._main(), name=f"pod-{self.namespace}/{self.name}")
        self.writer = asyncio.create_task(self.status_manager.run(), name=f"status-{self.namespace}/{self.name}")
        self.mark()

    def mark(self) -> None:
        """Ask for a status write (coalesced with any already asked for)."""
        self.status_manager.mark()

    async def push_status(self) -> None:
        await self.status_manager.push()

    def status(self) -> dict[str, Any]:
        return self.status_manager.status()

    async def _main(self) -> None:
        """Prepare, run the init containers in order, then the app containers together."""
        try:
            if not await self._prepare():
                return
            for c in self.init_containers:
                code = await self._run_container(c)
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
            if len(self.containers) == 1:
                await self._run_container(self.containers[0])
            else:
                await asyncio.gather(*(self._run_container(c) for c in self.containers))
            if not self.stopping.is_set():
                self.terminal = True
                self.mark()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s: worker failed", self.namespace, self.name)

    async def _prepare(self) -> bool:
        """Get ready to start containers; False when the pod is stopped first."""
        raise NotImplementedError

    async def _run_container(self, c: Container) -> int:
        """Run, wait, restart per policy; the last exit code."""
        policy = self.restart_policy
        if c.init and policy == "Always":
            policy = "OnFailure"  # init containers are retried until they succeed, never rerun after
        code = 0
        while not self.stopping.is_set():
            run = self._start_run(c)
            code = await self._await_run(c, run)
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

    def _start_run(self, c: Container) -> Run:
        """Start the container's next run."""
        raise NotImplementedError

    async def _await_run(self, c: Container, run: Run) -> int:
        """Wait until the run ends; its exit code."""
        raise NotImplementedError

    def kill(self, run: Run, sig: int) -> None:
        """Deliver a signal to a running container (a crash, the OOM killer)."""
        killpg(run.pid, sig)

    async def _stop_containers(self, grace: float) -> None:
        """Stop what runs the containers, within `grace` seconds."""

    def _kill_containers(self) -> None:
        """Stop what runs the containers at once."""

    async def terminate(self, grace: float) -> None:
        """Stop every container (within `grace` seconds) and report the pod as torn down."""
        self.stopping.set()
        self.terminal = True
        await self._stop_containers(grace)
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.mark()

    def abandon(self) -> None:
        """The node is gone: stop the containers at once and never report again."""
        self.abandoned = True
        self.stopping.set()
        self._kill_containers()
        if self.writer is not None:
            self.writer.cancel()

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


class PodRuntime(PodWorker):
    """A pod whose containers run as local processes, with stdout+stderr in `<pod dir>/logs/<container>/`."""

    def __init__(self, kubelet: KubeletHost, pod: dict[str, Any]) -> None:
        super().__init__(kubelet, pod)
        self.dir = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid}"
        self.network = kubelet.network
        self.attached = False
        if self.network is not None:
            self.pod_ip = None

    @property
    def tmp(self) -> Path:
        """The pod's own temporary directory (TMPDIR; on the pod network also its /tmp), removed with the pod."""
        return self.dir / "tmp"

    async def _main(self) -> None:
        """The pod's containers, then (on the pod network) its namespace removed and its temporary directory:
        its processes are gone."""
        try:
            await super()._main()
        finally:
            await asyncio.to_thread(shutil.rmtree, self.tmp, ignore_errors=True)
            if self.attached and self.network is not None:
                self.attached = False
                try:
                    await self.network.detach(self.uid)
                except Exception:
                    log.exception("pod %s/%s: removing its network failed", self.namespace, self.name)

    async def _prepare(self) -> bool:
        """Directories, volume contents and each container's process spec; retried while config is missing."""
        for c in self.containers:
            c.waiting_reason = "PodInitializing" if self.init_containers else "ContainerCreating"
        while not self.stopping.is_set():
            try:
                self.specs = await self._process_specs()
                for c in self.all_containers:
                    c.waiting_message = None
                return True
            except ct.ContainerConfigError as exc:
                for c in self.all_containers:
                    c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
                self.mark()
                await self.kubelet.post_event(self.pod, "Warning", "Failed", f"Error: {exc}")
            except (NetworkError, IpamExhausted) as exc:  # the pod's namespace or IP could not be made: retried
                for c in self.all_containers:
                    c.waiting_reason, c.waiting_message = "ContainerCreating", None
                self.mark()
                await self.kubelet.post_event(self.pod, "Warning", "FailedCreatePodSandBox",
                                              f"Failed to create pod sandbox: {exc}")
            except _TRANSIENT as exc:  # reading ConfigMaps/Secrets failed or a directory could not be made
                log.warning("pod %s/%s: preparing containers failed (%s); retrying", self.namespace, self.name, exc)
            await wait_event(self.stopping, self.kubelet.config_retry_seconds)
        return False

    async def _process_specs(self) -> dict[str, ct.ProcessSpec]:
        refs = await self.kubelet.fetch_refs(self.pod)
        workdir = self.kubelet.workdir
        volumes = ct.volume_host_paths(self.pod, self.dir, workdir)
        cwd = self.dir / "work"
        cwd.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        for volume in self.pod["spec"].get("volumes") or []:
            host = volumes[volume["name"]]
            host.mkdir(parents=True, exist_ok=True)
            files = ct.volume_files(self.pod, volume, refs)
            for rel, content in (files or {}).items():
                target = host / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
        allocatable = node_allocatable(self.kubelet.node_objects.get(self.node) or {})
        # The ServiceAccount's token, bound to the pod. On the pod network it is mounted where in-cluster config
        # reads it (with KUBERNETES_SERVICE_HOST); otherwise its files are mapped and a KUBECONFIG presents it.
        creds = await podtoken.pod_credentials(self.kubelet.client, self.pod, self.kubelet.shared_objects)
        host_side = self.network is None
        # The projected volume kube-apiserver's admission adds (`kube-api-access-*`) holds the token too.
        token_volume = podtoken.token_volume(self.pod)
        if creds is not None and token_volume is not None:
            podtoken.write_mount(volumes[token_volume[0]], creds)
        if creds is not None and host_side:
            sa_mount = podtoken.write_mount(self.dir / "serviceaccount", creds)
            kubeconfig = podtoken.write_token_kubeconfig(self.dir / "kubeconfig", self.kubelet.url, creds,
                                                         self.kubelet.ca_pem)
        specs = {}
        for c in self.all_containers:
            env = ct.container_env(self.pod, c.spec, refs, allocatable)
            mounts = ct.container_mounts(c.spec, volumes)
            if creds is not None and host_side and not any(path == podtoken.MOUNT_PATH for path, _ in mounts):
                mounts.append((podtoken.MOUNT_PATH, sa_mount))
            specs[c.name] = ct.process_spec(self.pod, c.spec, env, mounts, cwd,
                                            ct.defaults_for(c.spec.get("image"), self.kubelet.images,
                                                            self.kubelet.image), tmpdir=self.tmp)
            for key, value in self.kubelet.cluster_env.items():  # host paths: never mapped into the pod's mounts
                if key not in env and (host_side or key != "KUBECONFIG"):  # a pod on the network is in-cluster
                    specs[c.name].env[key] = value
            if creds is not None and host_side and "KUBECONFIG" not in env:
                specs[c.name].env["KUBECONFIG"] = str(kubeconfig)
            (self.dir / "logs" / c.name).mkdir(parents=True, exist_ok=True)
        if self.network is not None:
            att, pod_files = await self.network.attach(self.pod, self.dir, creds)
            self.attached, self.pod_ip = True, att.ip
            for c in self.all_containers:
                specs[c.name] = self.network.pod_spec(specs[c.name], self.pod, c.spec, att, pod_files, self.tmp)
            self.mark()
        return specs

    def _start_run(self, c: Container) -> Run:
        spec = self.specs[c.name]
        limit = memory_limit(c.spec)
        cgroup = self.kubelet.memory.create(f"{self.uid}_{c.name}_{len(c.runs)}", limit) if limit else None
        run = start_process(c, spec, self.dir / "logs" / c.name, self.kubelet.lifeline, cgroup)
        if run.proc is None:
            return run  # StartError
        self.kubelet.processes[run.pid] = run.proc
        if c.spec.get("readinessProbe") and not c.init:
            c.probe_ready = False
            c.probe_task = asyncio.create_task(readiness_loop(c, run, spec, self.kubelet.lifeline, self.mark,
                                                              self._target()),
                                               name=f"probe-{self.name}/{c.name}")
        self.mark()
        return run

    def _target(self) -> ProbeTarget:
        """Where probes connect: the pod's IP through the plane's namespace, or the host's loopback."""
        if self.network is None or self.pod_ip is None:
            return ProbeTarget(ct.LOCAL_IP)
        return ProbeTarget(self.pod_ip, self.network.dial)

    async def _await_run(self, c: Container, run: Run) -> int:
        try:
            return await wait_process(c, run, self.kubelet.lifeline)
        finally:
            self.kubelet.processes.pop(run.pid, None)

    async def _stop_containers(self, grace: float) -> None:
        """SIGTERM to each process group, SIGKILL after `grace` seconds."""
        running = [c.running for c in self.all_containers if c.running is not None]
        for run in running:
            killpg(run.pid, signal.SIGTERM)
        waits = [asyncio.create_task(run.exited.wait()) for run in running]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=max(0.0, grace))
            for run in running:
                if not run.exited.is_set():
                    run.killed_by(signal.SIGKILL, f"the kubelet: still running when the {grace:g}s grace period "
                                                  "after SIGTERM ended")
                    killpg(run.pid, signal.SIGKILL)
            if pending:
                await asyncio.wait(pending)

    def _kill_containers(self) -> None:
        for c in self.all_containers:
            if c.running is not None:
                killpg(c.running.pid, signal.SIGKILL)
