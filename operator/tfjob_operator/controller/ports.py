"""Loopback ports for local mode (`TFJOB_ADDRESSING=loopback`): every pod is a process on one machine, so each
gets its own 127.0.0.1 port (and one for its `/metrics`), recorded on the job and its pods.

Ports already promised are read once from the jobs and pods listed at start (an earlier operator's promises);
afterwards the allocations keep the set, so a new job costs no scan of every other job.
"""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tfjob_operator.api import constants


class LoopbackPorts:
    """Allocates loopback ports. `stores()` yields the stores (lists of bodies) of every job and pod known."""

    def __init__(self, stores: Callable[[], Iterable[Any]]) -> None:
        self._stores = stores
        self._in_use: set[int] = set()
        self._indexed = False

    def for_job(self, obj: Mapping[str, Any], pod_names: list[str]) -> dict[str, int]:
        """Pod name → 127.0.0.1 port (and `<pod>/metrics` → its metrics port): those recorded on the job or its
        pods, new ones for pods without, never one promised to another pod."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        ports = parse_ports(annotations.get(constants.ANNOTATION_LOOPBACK_PORTS))
        wanted = {*pod_names, *(n + constants.LOOPBACK_METRICS_SUFFIX for n in pod_names)}
        missing = sorted(wanted - set(ports))
        if not missing:
            return ports
        in_use = self._promised()
        for name in missing:
            ports[name] = free_port(in_use)
            in_use.add(ports[name])
        return ports

    def note(self, body: Mapping[str, Any]) -> None:
        """A job or pod seen after the first allocation read every store: its recorded ports are taken too."""
        if self._indexed:
            raw = ((body.get("metadata") or {}).get("annotations") or {}).get(constants.ANNOTATION_LOOPBACK_PORTS)
            if raw:
                self._in_use |= set(parse_ports(raw).values())

    def _promised(self) -> set[int]:
        """Every loopback port promised so far (the live set, which callers add to)."""
        if not self._indexed:
            for store in self._stores():
                for body in list(store or []):
                    raw = ((body.get("metadata") or {}).get("annotations") or {}).get(
                        constants.ANNOTATION_LOOPBACK_PORTS)
                    self._in_use |= set(parse_ports(raw).values())
            self._indexed = True
        return self._in_use


def parse_ports(raw: str | None) -> dict[str, int]:
    """The ports annotation's value (JSON: name → port); anything unreadable reads as none."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}


#: Where `free_port` looks when the kernel's own pick is promised already (Linux's default ephemeral range).
PORT_RANGE = (32768, 60999)


def free_port(avoid: set[int]) -> int:
    """A TCP port free on 127.0.0.1 now and not promised to another pod: the kernel's pick, else the first free one
    in PORT_RANGE from a random start (the kernel's picks run in sequence, so with thousands of ports promised a
    hundred picks in a row can all be taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    if port not in avoid:
        return port
    low, high = PORT_RANGE
    start = random.randrange(low, high + 1)
    for offset in range(high - low + 1):
        port = low + (start - low + offset) % (high - low + 1)
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port: all of {low}-{high} are in use or promised")
