"""Reaching peers over TCP, before TensorFlow does.

TensorFlow's gRPC channels retry a refused connection after a backoff of up to 1 s (grpc_channel.cc sets
GRPC_ARG_MAX_RECONNECT_BACKOFF_MS to 1000). In a gang restart every worker starts at once, and one that builds
MultiWorkerMirroredStrategy before the leader's server listens loses up to that second waiting on the
backoff. Probing the leader's port first, every POLL seconds, lets the strategy connect at its first try.
"""

from __future__ import annotations

import socket
import time

POLL = 0.05  # seconds between probes: a refused loopback or LAN connect costs well under a millisecond


def reachable(address: str, timeout: float = 1.0) -> bool:
    """A TCP connection to `host:port` opens (a name that does not resolve yet is not reachable)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def wait_reachable(address: str, poll: float = POLL) -> None:
    """Return once `address` accepts connections. No deadline here: the supervisor's --startup-timeout
    bounds the trainer's whole start-up."""
    while not reachable(address):
        time.sleep(poll)
