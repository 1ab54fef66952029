"""Loopback ports picked below the kernel's ephemeral range, for servers that bind them a moment later (the tests'
own servers, the upstream plane's processes).

A port asked of the kernel (`bind(("127.0.0.1", 0))`) and released is free only until the next such pick: the two
test workers run operators, planes and TensorFlow servers that all take ephemeral ports, and one of them took an
operator's metrics port in the second between its pick and the operator's bind (the test then read a gRPC
server's HTTP/2 frame). Below the ephemeral range only an explicit bind takes a port, and a random pick among
thousands makes two picks meet about never.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Where the ports come from when the kernel's ephemeral range starts above it (Linux: 32768).
LOW, HIGH = 20_000, 32_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports free now, outside the kernel's ephemeral range where it allows (else its picks)."""
    sockets: list[socket.socket] = []
    try:
        if _ephemeral_start() > HIGH:
            for port in random.sample(range(LOW, HIGH), min(HIGH - LOW, 50 * n)):
                sock = socket.socket()
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    sock.close()
                    continue
                sockets.append(sock)
                if len(sockets) == n:
                    break
        while len(sockets) < n:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
