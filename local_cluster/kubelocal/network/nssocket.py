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
