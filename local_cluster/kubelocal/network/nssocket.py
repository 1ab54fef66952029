"""Sockets that live in another network namespace, opened for this process.

A socket belongs to the namespace it was created in, whatever process later holds it. So a short child
enters the namespace (`nsenter --net`), creates and binds the sockets, and passes them back over a Unix
socket (SCM_RIGHTS). This process never changes namespace itself: its other threads (the API server's event
loop) keep the host's network, and Python 3.11 has no `os.setns` anyway.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kubelocal.network.iproute import CALL_TIMEOUT, NETNS_DIR, NetworkError

_CHILD = r"""
import json, socket, sys
channel = socket.socket(fileno=int(sys.argv[1]))
opened = []
for kind, host, port in json.loads(sys.argv[2]):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as exc:
        sys.exit(f"{kind} {host}:{port}: {exc}")
    if kind == "tcp":
        s.listen(512)
    opened.append(s)
socket.send_fds(channel, [b"ok"], [s.fileno() for s in opened])
"""


@dataclass(frozen=True)
class Listen:
    """A socket to open: TCP (listening) or UDP, bound to host:port inside the namespace."""

    kind: Literal["tcp", "udp"]
    host: str
    port: int


def open_sockets(netns: str, specs: Sequence[Listen]) -> list[socket.socket]:
    """Bound sockets inside the named network namespace, in the order of `specs`."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    payload = json.dumps([[s.kind, s.host, s.port] for s in specs])
    argv = ["nsenter", f"--net={NETNS_DIR}/{netns}", "--", sys.executable, "-I", "-S", "-c", _CHILD]
    try:
        with subprocess.Popen(
            [*argv, str(child.fileno()), payload], pass_fds=[child.fileno()], stderr=subprocess.PIPE, text=True
        ) as proc:
            child.close()
            parent.settimeout(CALL_TIMEOUT)
            try:
                _, fds, _, _ = socket.recv_fds(parent, 16, len(specs))
            except OSError:
                fds = []
            try:
                _, err = proc.communicate(timeout=CALL_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                err = "timed out"
    finally:
        parent.close()
        child.close()
    if len(fds) != len(specs):
        raise NetworkError(f"opening sockets in netns {netns}: {(err or '').strip() or 'no sockets came back'}")
    return [socket.socket(fileno=fd) for fd in fds]


SocketKind = Literal["tcp", "udp", "packet"]

_FACTORY = r"""
import socket, sys
channel = socket.socket(fileno=int(sys.argv[1]))
kinds = {
    b"tcp": (socket.AF_INET, socket.SOCK_STREAM, 0),
    b"udp": (socket.AF_INET, socket.SOCK_DGRAM, 0),
    b"packet": (socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)),  # ETH_P_ALL
}
while True:
    request = channel.recv(16)
    if request not in kinds:
        break  # the plane closed the channel (or died): leave the namespace, so it can go
    s = socket.socket(*kinds[request])
    socket.send_fds(channel, [b"ok"], [s.fileno()])
    s.close()
"""


class SocketFactory:
    """A child that stays in a namespace and hands out new unconnected sockets made there, one per request.

    For the plane's clients of pod addresses (probes, port-forward): each such connection needs a socket
    in the plane's namespace, and starting a child per connection would cost tens of milliseconds. The
    child exits when `close` is called or this process dies (its channel closes), so it never keeps the
    namespace alive on its own.
    """

    def __init__(self, netns: str) -> None:
        self.netns = netns
        self._channel, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = ["nsenter", f"--net={NETNS_DIR}/{netns}", "--", sys.executable, "-I", "-S", "-c", _FACTORY]
        try:
            self._proc = subprocess.Popen([*argv, str(child.fileno())], pass_fds=[child.fileno()])
        finally:
            child.close()
        self._channel.settimeout(CALL_TIMEOUT)
        self._lock = threading.Lock()

    def new_socket(self, kind: SocketKind = "tcp") -> socket.socket:
        """A new socket of the namespace, not bound: IPv4 TCP or UDP, or a raw packet socket (all protocols)."""
        with self._lock:
            try:
                self._channel.send(kind.encode())
                _, fds, _, _ = socket.recv_fds(self._channel, 16, 1)
            except OSError as exc:
                raise NetworkError(f"socket factory of netns {self.netns}: {exc}") from exc
        if len(fds) != 1:
            raise NetworkError(f"socket factory of netns {self.netns}: exited (code {self._proc.poll()})")
        return socket.socket(fileno=fds[0])

    def close(self) -> None:
        """Stop the child and wait for it, so the namespace holds no process of the plane's."""
        self._channel.close()
        try:
            self._proc.wait(timeout=CALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
