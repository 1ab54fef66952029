"""Reaching peers over TCP, before TensorFlow does.

TensorFlow's gRPC channels retry a refused connection after a backoff of up to 1 s (grpc_channel.cc sets
GRPC_ARG_MAX_RECONNECT_BACKOFF_MS to 1000). In a gang restart every worker starts at once, and one that builds
MultiWorkerMirroredStrategy before the leader's server listens loses up to that second waiting on the
backoff. Probing the leader's port first, every POLL seconds, lets the strategy connect at its first try.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .cluster import TRAINER_ROLES, ClusterView

POLL = 0.05  # seconds between probes: a refused loopback or LAN connect costs well under a millisecond
#: On SIGTERM, a peer whose port refuses a connection (its process is gone) or does not answer within this many
#: seconds (its node or its network is gone) counts as lost (`preemption.LostPeerStop`).
PEER_PROBE_TIMEOUT = 0.25


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


@dataclass(frozen=True)
class Peer:
    """Another worker of the collective: its TF_CONFIG address and the socket address it resolved to."""

    name: str  # "worker-1"
    address: str  # "job-worker-1.job.ns.svc:2222"
    sockaddr: tuple[Any, ...]
    family: int


def collective_peers(view: ClusterView) -> list[Peer]:
    """The other chief and worker tasks, resolved now, while every one of them is up. A name that does not
    resolve is left out (a later SIGTERM then waits for the agreement, as without this check)."""
    peers = []
    for role in TRAINER_ROLES:
        for index, address in enumerate(view.cluster.get(role, [])):
            if (role, index) == (view.role, view.index):
                continue
            host, _, port = address.rpartition(":")
            try:
                family, _, _, _, sockaddr = socket.getaddrinfo(host.strip("[]"), int(port),
                                                               type=socket.SOCK_STREAM)[0]
            except (OSError, ValueError):
                continue
            peers.append(Peer(f"{role}-{index}", address, sockaddr, family))
    return peers


def probe(peer: Peer, timeout: float = PEER_PROBE_TIMEOUT) -> str | None:
    """Why `peer` is lost ("connection refused", "no answer in 0.25s"), or None when its port accepts."""
    with socket.socket(peer.family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(peer.sockaddr)
        except TimeoutError:
            return f"no answer in {timeout:g}s"
        except OSError as exc:
            return exc.strerror.lower() if exc.strerror else type(exc).__name__
    return None


def lost_peers(peers: Sequence[Peer], timeout: float = PEER_PROBE_TIMEOUT) -> list[tuple[Peer, str]]:
    """The peers that are gone, each with why; all are probed at once, so this takes at most `timeout`."""
    if not peers:
        return []
    with ThreadPoolExecutor(max_workers=min(len(peers), 32)) as pool:
        reasons = list(pool.map(lambda peer: probe(peer, timeout), peers))
    return [(peer, reason) for peer, reason in zip(peers, reasons, strict=True) if reason is not None]
