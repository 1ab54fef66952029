"""Ports for the tests' own servers (an operator's /metrics, a worker's gRPC, a port-forward): kubelocal's picker,
below the kernel's ephemeral range (kubelocal/ports.py says why)."""

from __future__ import annotations

from pathlib import Path

from kubelocal.ports import free_ports

__all__ = ["free_port", "free_ports", "unreachable_kubeconfig"]


def free_port() -> int:
    """A loopback port free now (:func:`free_ports`)."""
    return free_ports(1)[0]


def unreachable_kubeconfig(path: Path, server: str) -> Path:
    """Write a kubeconfig whose one cluster is `server`, where nothing listens (a loopback port below 1024)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\n"
        f"clusters: [{{name: gone, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: gone, context: {cluster: gone, user: u}}]\nusers: [{name: u, user: {token: x}}]\n")
    return path
