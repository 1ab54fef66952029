"""The plane's pod network, as the CNI bridge plugin makes it, kept inside namespaces the plane creates.

One network namespace of the plane's own holds a Linux bridge whose address is the pod CIDR's gateway, and
the service addresses the plane serves itself (the API server's and the cluster DNS's, as /32s on its
loopback). Each pod gets a namespace of its own and a veth pair: `eth0` with the pod's IP in the pod's
namespace, the other end on the bridge. Nothing links the plane's namespace to the host's: there is no
route, no NAT and forwarding is off, so pod traffic can reach other pods and the plane's own sockets and
nothing else (see `nssocket.open_sockets` for how the plane's servers get sockets in there).

Every name carries the plane's id, and a live plane holds a lock file for its id, so a plane that starts
after another crashed removes the namespaces the dead one left (`cleanup_stale`).
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import os
import secrets
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubelocal.network import iproute
from kubelocal.network.ipam import Ipam
from kubelocal.network.nssocket import Listen, SocketFactory, SocketKind, open_sockets

DEFAULT_POD_CIDR = "10.244.0.0/16"
#: kubeadm's defaults: the `kubernetes` Service's ClusterIP and the cluster DNS's (10.96.0.0/12).
DEFAULT_API_IP = "10.96.0.1"
DEFAULT_DNS_IP = "10.96.0.10"
NAME_PREFIX = "kubelocal-"
BRIDGE = "kl0"
LOCK_DIR = Path("/run/kubelocal-net")


@dataclass(frozen=True)
class PodAttachment:
    """One pod's place on the network: its namespace, its IP and the bridge end of its veth."""

    uid: str
    namespace: str
    name: str
    netns: str
    ip: str
    prefixlen: int
    gateway: str
    host_veth: str


class PodNetwork:
    """The plane-wide pod network: `start()`, then `add_pod`/`remove_pod` per pod, `teardown()` at the end."""

    def __init__(
        self,
        *,
        cidr: str = DEFAULT_POD_CIDR,
        api_ip: str = DEFAULT_API_IP,
        dns_ip: str = DEFAULT_DNS_IP,
        plane_id: str | None = None,
    ) -> None:
        self.ipam = Ipam(cidr)
        for field, value in (("api_ip", api_ip), ("dns_ip", dns_ip)):
            addr = ipaddress.IPv4Address(value)
            if addr in self.ipam.network:
                raise ValueError(f"{field} {value}: inside the pod CIDR {cidr} (pick an address outside it)")
        self.api_ip = api_ip
        self.dns_ip = dns_ip
        self.plane_id = plane_id or secrets.token_hex(3)
        if not self.plane_id.isalnum() or "-" in self.plane_id:
            raise ValueError(f"plane_id {self.plane_id!r}: letters and digits only")
        self.netns = f"{NAME_PREFIX}{self.plane_id}"
        self.gateway = str(self.ipam.gateway)
        self._pods: dict[str, PodAttachment] = {}
        self._veths = 0
        self._lock = threading.Lock()
        self._lockfile: int | None = None
        self._factory: SocketFactory | None = None
        self._undo: dict[tuple[str, str], Callable[[], None]] = {}

    # -- plane ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Remove what crashed planes left, then make the plane's namespace, bridge and service addresses."""
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        self._lockfile = os.open(LOCK_DIR / f"{self.plane_id}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._lockfile, fcntl.LOCK_EX)
        cleanup_stale()
        mac = "02:6b:6c:" + ":".join(self.plane_id.encode().hex()[i : i + 2] for i in range(0, 6, 2))
        try:
            iproute.netns_add(self.netns)
            iproute.ip_batch(
                [
                    "link set lo up",
                    f"link add {BRIDGE} address {mac} type bridge",
                    f"addr add {self.gateway}/{self.ipam.network.prefixlen} dev {BRIDGE}",
                    f"link set {BRIDGE} up",
                    f"addr add {self.api_ip}/32 dev lo",
                    f"addr add {self.dns_ip}/32 dev lo",
                ],
                netns=self.netns,
            )
            # No forwarding: a packet for an address the plane does not own is answered "unreachable".
            iproute.run(
                ["nsenter", f"--net={iproute.NETNS_DIR}/{self.netns}", "--", "sh", "-c",
                 "echo 0 > /proc/sys/net/ipv4/ip_forward && echo 0 > /proc/sys/net/ipv6/conf/all/forwarding"]
            )
            self._factory = SocketFactory(self.netns)
        except Exception:
            self.teardown()
            raise

    def plane_socket(self, kind: SocketKind = "tcp") -> socket.socket:
        """A new unconnected socket in the plane's namespace, from which every pod IP is reachable."""
        if self._factory is None:
            raise RuntimeError("PodNetwork.plane_socket: the network is not started (call start() first)")
        return self._factory.new_socket(kind)

    async def open_connection(
        self, ip: str, port: int, *, timeout: float = 5.0
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection from the plane to a pod's port (for probes and port-forward), as asyncio streams."""
        sock = self.plane_socket("tcp")
        sock.setblocking(False)
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (ip, port)), timeout)
            return await asyncio.open_connection(sock=sock)
        except BaseException:
            sock.close()
            raise

    def open_sockets(self, specs: Sequence[Listen]) -> list[socket.socket]:
        """Sockets bound inside the plane's namespace (for the API server and the DNS server)."""
        return open_sockets(self.netns, specs)

    def teardown(self) -> None:
        """Remove every namespace and link this plane made; safe to call twice.

        Call it after the pods' processes are gone: a namespace lives on while a process is in it.
        """
        for uid, what in list(self._undo):
            self.undo(uid, what)
        if self._factory is not None:
            self._factory.close()
            self._factory = None
        with self._lock:
            pods = list(self._pods.values())
            self._pods.clear()
        for pod in pods:
            iproute.netns_delete(pod.netns)
            self.ipam.release(pod.uid)
        for name in iproute.netns_names():
            if name == self.netns or name.startswith(self.netns + "-"):
                iproute.netns_delete(name)
        if self._lockfile is not None:
            (LOCK_DIR / f"{self.plane_id}.lock").unlink(missing_ok=True)
            os.close(self._lockfile)
            self._lockfile = None

    def __enter__(self) -> PodNetwork:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    # -- pods ----------------------------------------------------------------------------------------------

    def add_pod(self, uid: str, namespace: str, name: str) -> PodAttachment:
        """Give the pod a namespace, an IP and a veth on the bridge; idempotent per UID."""
        with self._lock:
            if uid in self._pods:
                return self._pods[uid]
            self._veths += 1
            veth = f"vp{self._veths}"
        address = self.ipam.allocate(uid)
        pod = PodAttachment(
            uid=uid,
            namespace=namespace,
            name=name,
            netns=f"{self.netns}-{namespace}.{name}"[:200] + f"-{uid[:8]}",
            ip=str(address),
            prefixlen=self.ipam.network.prefixlen,
            gateway=self.gateway,
            host_veth=veth,
        )
        try:
            iproute.netns_add(pod.netns)
            iproute.ip_batch(
                [
                    f"link add {veth} type veth peer name eth0 netns {pod.netns}",
                    f"link set {veth} master {BRIDGE}",
                    f"link set {veth} up",
                ],
                netns=self.netns,
            )
            iproute.ip_batch(
                [
                    "link set lo up",
                    f"addr add {pod.ip}/{pod.prefixlen} dev eth0",
                    "link set eth0 up",
                    f"route add default via {pod.gateway} dev eth0",
                ],
                netns=pod.netns,
            )
        except Exception:
            iproute.netns_delete(pod.netns)
            self.ipam.release(uid)
            raise
        with self._lock:
            self._pods[uid] = pod
        return pod

    def remove_pod(self, uid: str) -> None:
        """Delete the pod's namespace (its veth goes with it) and free its IP; unknown UIDs are ignored.

        Call it once the pod's processes have exited: until then the namespace, and its link, live on.
        """
        for key in [key for key in list(self._undo) if key[0] == uid]:
            self.undo(*key)
        with self._lock:
            pod = self._pods.pop(uid, None)
        if pod is not None:
            iproute.netns_delete(pod.netns)
            self.ipam.release(uid)

    def on_undo(self, uid: str, what: str, undo: Callable[[], None]) -> None:
        """Remember how to undo a change to a pod's link (a fault); `remove_pod` and `teardown` run it."""
        with self._lock:
            self._undo[(uid, what)] = undo

    def undo(self, uid: str, what: str) -> bool:
        """Run and forget the undo `on_undo` registered; False if there was none."""
        with self._lock:
            undo = self._undo.pop((uid, what), None)
        if undo is None:
            return False
        undo()
        return True

    def pod(self, uid: str) -> PodAttachment | None:
        """The attachment of a pod that has one."""
        with self._lock:
            return self._pods.get(uid)


def cleanup_stale() -> list[str]:
    """Delete the namespaces of planes that are no longer running (their lock is free); returns their names."""
    removed = []
    for name in iproute.netns_names():
        if not name.startswith(NAME_PREFIX):
            continue
        plane_id = name[len(NAME_PREFIX) :].split("-", 1)[0]
        if _plane_alive(plane_id):
            continue
        iproute.netns_delete(name)
        removed.append(name)
    for lock in LOCK_DIR.glob("*.lock") if LOCK_DIR.is_dir() else []:
        if not _plane_alive(lock.stem):
            lock.unlink(missing_ok=True)
    return removed


def _plane_alive(plane_id: str) -> bool:
    """Whether a process holds the lock of this plane id (a crashed plane's lock is released by the kernel)."""
    path = LOCK_DIR / f"{plane_id}.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
