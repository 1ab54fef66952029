"""The upstream control plane's processes: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, started
in that order, each waited for on its health endpoint, stopped in the reverse order.

Every process is in a process group of its own that kubelocal's `Lifeline` guardian watches: if the Python
process holding the plane dies, however it dies, the guardian SIGKILLs them. Their files (certificates,
kubeconfigs, etcd's data, logs) live in the plane's directory alone, which a new start empties; the egress
proxy's socket is abstract (no file). So a SIGKILLed plane leaves nothing running and nothing outside it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import aiohttp

from kubelocal.kubeclient import ApiError, KubeClient
from kubelocal.lifeline import ChildProcess, Lifeline, spawn
from kubelocal.pki import CertificateAuthority
from kubelocal.ports import free_ports

from . import binaries as bins
from . import flags
from .egress import Dial, EgressProxy, abstract_address
from .pki import PlanePki, kubeconfig, write_kubeconfig

log = logging.getLogger(__name__)

USER_AGENT = "tfjob-local-upstream"
#: Seconds each process may take to report healthy (kube-apiserver's first start installs every API group).
START_TIMEOUT = 180.0
STOP_GRACE = 10.0
#: The user kube-apiserver proxies logs, exec and port-forward as, and the role kubeadm binds it to.
KUBELET_API_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "kubelocal:kube-apiserver-kubelet-client"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}],
}


class PlaneError(bins.UpstreamError):
    """A plane process failed to start; the message names it and ends with the tail of its log."""


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client TLS context trusting `ca`, presenting `cert`/`key` when given."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def log_tail(path: Path, lines: int = 15) -> str:
    """A log's last lines, for an error that says why a process did not come up."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


class UpstreamPlane:
    """`await plane.start()` brings the four processes up and healthy; `await plane.stop()` ends them."""

    def __init__(self, directory: Path, *, advertise_address: str, dial: Dial,
                 binaries: dict[str, Path] | None = None, node_monitor_grace: float = 50.0,
                 default_toleration_seconds: int = 300, api_ips: Sequence[str] = (),
                 ca: CertificateAuthority | None = None, port: int = 0,
                 apiserver_flags: Sequence[str] = ()) -> None:
        self.dir = Path(directory).resolve()
        self.binaries = binaries if binaries is not None else bins.find()
        self.ca = ca
        picked = free_ports(5)
        ports = flags.Ports(port or picked[0], *picked[1:])
        egress = f"kubelocal-egress-{os.getpid()}-{id(self):x}"
        self.layout = flags.Layout(self.dir, ports, advertise_address, abstract_address(egress),
                                   node_monitor_grace=node_monitor_grace,
                                   default_toleration_seconds=default_toleration_seconds,
                                   extra_apiserver_flags=tuple(apiserver_flags))
        self.api_ips = ["127.0.0.1", advertise_address, flags.KUBERNETES_SERVICE_IP, *api_ips]
        self.egress = EgressProxy(egress, dial)
        self.lifeline = Lifeline()
        self.processes: dict[str, ChildProcess] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self.pki: PlanePki | None = None
        #: Seconds from start() to each process reported healthy.
        self.timings: dict[str, float] = {}

    @property
    def url(self) -> str:
        return self.layout.apiserver_url

    @property
    def admin_kubeconfig(self) -> Path:
        return self.layout.kubeconfig("admin")

    def ca_pem(self) -> str:
        assert self.pki is not None
        return self.pki.ca.cert_pem

    def tls(self, identity: str | None = "admin") -> ssl.SSLContext:
        """A client context trusting the plane's CA, presenting `<identity>.crt` (None: no certificate)."""
        pki = self.layout.pki
        if identity is None:
            return tls_context(pki / "ca.crt")
        return tls_context(pki / "ca.crt", pki / f"{identity}.crt", pki / f"{identity}.key")

    def client(self, identity: str = "admin", user_agent: str = USER_AGENT, **kwargs: Any) -> KubeClient:
        return KubeClient(self.url, user_agent, tls=self.tls(identity), **kwargs)

    # -- start ------------------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """A fresh directory: certificates, kubeconfigs, the egress selector's configuration."""
        for stale in (self.layout.etcd_data, self.layout.pki, self.layout.logs):
            shutil.rmtree(stale, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.layout.logs.mkdir(exist_ok=True)
        self.pki = PlanePki.create(self.layout.pki, self.api_ips, self.ca)
        for component in ("admin", "kube-controller-manager", "kube-scheduler"):
            write_kubeconfig(self.layout.kubeconfig(component),
                             kubeconfig(self.url, self.pki.ca.cert_pem, self.pki.load(component)))
        self.layout.egress_config.write_text(flags.egress_selector_config(self.layout))

    async def start(self) -> None:
        started = time.monotonic()
        await asyncio.to_thread(self._prepare)
        self.lifeline.start()
        try:
            await self.egress.start()
            self._spawn("etcd", flags.etcd(self.layout))
            await self._wait_healthy("etcd", f"http://127.0.0.1:{self.layout.ports.etcd_client}/health", None)
            self.timings["etcd"] = time.monotonic() - started
            self._spawn("kube-apiserver", flags.apiserver(self.layout))
            await self._wait_healthy("kube-apiserver", f"{self.url}/readyz", self.tls())
            self.timings["kube-apiserver"] = time.monotonic() - started
            await self._bootstrap()
            self._spawn("kube-controller-manager", flags.controller_manager(self.layout))
            self._spawn("kube-scheduler", flags.scheduler(self.layout))
            insecure = ssl.create_default_context()
            insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # their self-signed serving certs
            await asyncio.gather(
                self._wait_healthy("kube-controller-manager",
                                   f"https://127.0.0.1:{self.layout.ports.controller_manager}/healthz", insecure),
                self._wait_healthy("kube-scheduler", f"https://127.0.0.1:{self.layout.ports.scheduler}/healthz",
                                   insecure))
            self.timings["ready"] = time.monotonic() - started
        except BaseException:
            await self.stop()
            raise

    def _spawn(self, name: str, args: list[str], binary: str = "") -> None:
        log_file = open(self.layout.logs / f"{name}.log", "ab")  # kept open while it runs
        self._logs[name] = log_file
        self.processes[name] = spawn([str(self.binaries[binary or name]), *args], cwd=self.dir, env=self._env(),
                                     stdout=log_file, lifeline=self.lifeline)

    @staticmethod
    def _env() -> dict[str, str]:
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
        return {k: os.environ[k] for k in keep if k in os.environ}

    async def _wait_healthy(self, name: str, url: str, tls: ssl.SSLContext | None,
                            timeout: float = START_TIMEOUT) -> None:
        """Poll `url` until it answers 200; PlaneError with the log's tail if the process exits or time runs out."""
        proc = self.processes[name]
        log_path = self.layout.logs / f"{name}.log"
        deadline = time.monotonic() + timeout
        last = ""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls or False)) as session:
            while True:
                if proc.returncode is not None:
                    raise PlaneError(f"{name} exited with code {proc.returncode} while starting; the end of "
                                     f"{log_path}:\n{log_tail(log_path)}")
                try:
                    async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        if resp.status == 200:
                            return
                        last = f"HTTP {resp.status}: {(await resp.text())[-300:]}"
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    last = str(exc) or type(exc).__name__
                if time.monotonic() > deadline:
                    raise PlaneError(f"{name} not healthy after {timeout:g}s ({url}: {last}); the end of "
                                     f"{log_path}:\n{log_tail(log_path)}")
                await asyncio.sleep(0.1)

    async def _bootstrap(self) -> None:
        """What kubeadm adds after the API server is up: the API server's own access to the kubelet API."""
        client = self.client()
        try:
            try:
                await client.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", KUBELET_API_BINDING)
            except ApiError as exc:
                if exc.status != 409:
                    raise
        finally:
            await client.close()

    # -- what an operator of a cluster does to it -------------------------------------------------------------

    async def compact(self) -> int:
        """Compact etcd's history up to its current revision, as `--auto-compaction` does every 5 minutes (and
        `etcdctl compact` at once): a list or watch from an older resourceVersion that reaches etcd is then
        410 Gone. Returns the revision compacted to."""
        base = f"http://127.0.0.1:{self.layout.ports.etcd_client}/v3/kv"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            async with session.post(f"{base}/range", json={"key": "AA==", "count_only": True}) as resp:
                resp.raise_for_status()
                revision = int((await resp.json())["header"]["revision"])
            async with session.post(f"{base}/compaction", json={"revision": revision, "physical": True}) as resp:
                resp.raise_for_status()
        return revision

    async def start_apiserver(self, name: str = "kube-apiserver-2") -> str:
        """Start another kube-apiserver on the same etcd, as a second member of an HA control plane (or the
        member a rolling restart brings back); its URL once its `/readyz` answers. Its watch cache starts at
        etcd's current revision: a client that moves to it and resumes a watch from an older resourceVersion
        gets 410 Gone and lists again. `stop` ends it with the rest."""
        ports = dataclasses.replace(self.layout.ports, apiserver=free_ports(1)[0])
        layout = dataclasses.replace(self.layout, ports=ports)
        self._spawn(name, flags.apiserver(layout), "kube-apiserver")
        await self._wait_healthy(name, f"{layout.apiserver_url}/readyz", self.tls())
        return layout.apiserver_url

    # -- stop -------------------------------------------------------------------------------------------------

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM each process in the reverse order of their start (SIGKILL after `grace`), then the proxy."""
        order = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
        for name in [*(n for n in self.processes if n not in order), *order]:  # start_apiserver's first
            await self.end(name, grace)
        self.processes.clear()
        self.lifeline.close()
        await self.egress.stop()
        for log_file in self._logs.values():
            log_file.close()
        self._logs.clear()

    async def end(self, name: str, grace: float = STOP_GRACE) -> None:
        """SIGTERM one process (SIGKILL after `grace`), as a component going down; `restart(name)` brings it back."""
        proc = self.processes.pop(name, None)
        if proc is None:
            return
        await proc.stop(grace)
        self.lifeline.forget(proc.pid)
        log_file = self._logs.pop(name, None)
        if log_file is not None:
            log_file.close()

    async def restart(self, name: str) -> None:
        """Start a process `end` stopped, with the same flags, and wait until it is healthy (kube-scheduler or
        kube-controller-manager: the components a cluster restarts without losing state)."""
        restartable = {"kube-scheduler": (flags.scheduler, self.layout.ports.scheduler),
                       "kube-controller-manager": (flags.controller_manager, self.layout.ports.controller_manager)}
        if name not in restartable:
            raise ValueError(f"{name}: only {' and '.join(restartable)} can be restarted")
        if name in self.processes:
            raise RuntimeError(f"{name} is running; end it first")
        command, port = restartable[name]
        self._spawn(name, command(self.layout))
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # its self-signed serving certificate
        await self._wait_healthy(name, f"https://127.0.0.1:{port}/healthz", insecure)

    def rss(self) -> dict[str, int]:
        """Each running process's resident memory, bytes (from /proc)."""
        sizes = {}
        for name, proc in self.processes.items():
            try:
                fields = Path(f"/proc/{proc.pid}/status").read_text().split("VmRSS:")[1].split()
                sizes[name] = int(fields[0]) * 1024
            except (OSError, IndexError, ValueError):
                continue
        return sizes
