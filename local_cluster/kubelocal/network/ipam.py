"""Pod IP allocation from the pod CIDR, as CNI's host-local IPAM does it.

The first host address is the bridge's gateway; the rest go to pods. Allocation moves a cursor forward and
wraps, so an address just freed is the last to be handed out again (a late packet for a deleted pod does not
reach its successor). Keyed by pod UID: asking twice for the same pod returns the same address.
"""

from __future__ import annotations

import ipaddress
import threading


class IpamExhausted(RuntimeError):
    """Every address in the pod CIDR is taken."""


class Ipam:
    """Allocates and frees addresses of `cidr` for pods; thread-safe."""

    def __init__(self, cidr: str) -> None:
        try:
            self.network = ipaddress.IPv4Network(cidr)
        except ValueError as exc:
            raise ValueError(f"pod CIDR {cidr!r}: {exc} (give an IPv4 network such as 10.244.0.0/16)") from exc
        if self.network.num_addresses < 8:
            raise ValueError(f"pod CIDR {cidr!r}: too small (give at least a /29)")
        self.gateway = self.network.network_address + 1
        self._first = int(self.gateway) + 1
        self._last = int(self.network.broadcast_address) - 1
        self._next = self._first
        self._by_owner: dict[str, ipaddress.IPv4Address] = {}
        self._owners: dict[int, str] = {}
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """How many pod addresses the CIDR holds."""
        return self._last - self._first + 1

    def allocate(self, owner: str) -> ipaddress.IPv4Address:
        """The address of `owner` (a pod UID), allocating the next free one if it has none."""
        with self._lock:
            if owner in self._by_owner:
                return self._by_owner[owner]
            for _ in range(self.capacity):
                candidate = self._next
                self._next = self._first if candidate >= self._last else candidate + 1
                if candidate not in self._owners:
                    self._owners[candidate] = owner
                    self._by_owner[owner] = address = ipaddress.IPv4Address(candidate)
                    return address
            raise IpamExhausted(f"pod CIDR {self.network}: all {self.capacity} addresses are in use")

    def release(self, owner: str) -> ipaddress.IPv4Address | None:
        """Free the address of `owner`; returns it, or None if it had none."""
        with self._lock:
            address = self._by_owner.pop(owner, None)
            if address is not None:
                self._owners.pop(int(address), None)
            return address

    def in_use(self) -> dict[str, ipaddress.IPv4Address]:
        """Owner → address, a copy."""
        with self._lock:
            return dict(self._by_owner)
