"""Ports for the tests' own servers (an operator's /metrics, a worker's gRPC, a port-forward): kubelocal's picker,
below the kernel's ephemeral range (kubelocal/ports.py says why)."""

from __future__ import annotations

from kubelocal.ports import free_ports

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    """A loopback port free now (:func:`free_ports`)."""
    return free_ports(1)[0]
