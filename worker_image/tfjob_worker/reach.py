"""Peers this pod can never reach, said within seconds instead of after --startup-timeout.

TF_CONFIG names every task by address. A gang starts with races that are normal: a peer still starting, its DNS
record not published yet. The start-up timeout covers those, and nothing here touches them. Two cases are
"never", not "not yet", and this module tells them apart from the race without waiting it out:

- **A cluster DNS name where this pod has no cluster DNS.** For `<pod>.<service>.<namespace>.svc[.<domain>]`
  the check asks for the one name every cluster's DNS answers: `kubernetes.default.svc[.<domain>]` (the API
  server's Service, same suffix). A cluster DNS knows it whether or not any peer is up. "No such name" for
  DNS_GRACE seconds means this pod's resolver is not a cluster DNS for that domain (pods that share a machine's
  network, a wrong cluster domain): exit 1, not retried. No answer at all for DNS_SILENT seconds (no DNS server
  reachable) is reported too, but as retryable (exit 201): a DNS server may come back.
- **Another task at a loopback address, from a pod with a network namespace of its own.** 127.0.0.1 reaches only
  this namespace. When this process's network namespace is not its launcher's (the kubelet started it inside a
  pod network namespace), no other pod can ever be on its loopback: exit 1 at once. In a container the launcher
  is not visible (no parent in its PID namespace) and this check says nothing.

The supervisor (`lifecycle.supervise`) runs the check beside the trainer's start and ends the pod with the message,
which names the address and what to change.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import exit_codes
from .cluster import ClusterConfigError, ClusterView, from_tf_config

#: Seconds of "no such name" for the cluster's own API Service name before this pod is taken to have no cluster
#: DNS. A cluster DNS answers that name from its first second (a DNS still starting answers SERVFAIL, no answer).
DNS_GRACE = 5.0
#: Seconds with no DNS answer at all before saying so (retryable).
DNS_SILENT = 20.0
#: Seconds between two lookups while neither rule has decided.
POLL = 0.5
#: Roles whose addresses this task connects to (an evaluator only reads checkpoints).
CONNECTED_ROLES = ("chief", "worker", "ps")
#: What to change, said once for both kinds of mismatch: the operator follows the plane's addressing.
FOLLOW_THE_PLANE = "unset TFJOB_ADDRESSING so the operator follows the plane (kube-public/pod-addressing)"


@dataclass(frozen=True)
class Unreachable:
    """Why this pod can never reach a peer, and the exit code to end with."""

    message: str
    code: int


def peers(view: ClusterView) -> list[tuple[str, str]]:
    """(task, address) of every other task this one connects to; none for an evaluator."""
    if view.role == "evaluator":
        return []
    return [(f"{role}-{index}", address) for role in CONNECTED_ROLES
            for index, address in enumerate(view.cluster.get(role, [])) if (role, index) != (view.role, view.index)]


def host_of(address: str) -> str:
    host = address.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cluster_anchor(host: str) -> str | None:
    """`kubernetes.default.svc[.<domain>]` for a cluster Service name (`a.b.ns.svc[.<domain>]`), else None."""
    labels = host.rstrip(".").split(".")
    if "svc" not in labels[1:]:
        return None
    suffix = labels[labels.index("svc", 1) + 1:]
    return ".".join(["kubernetes", "default", "svc", *suffix])


def loopback_verdict(view: ClusterView, own_netns: int | None, launcher_netns: int | None) -> Unreachable | None:
    """A peer at a loopback address while this pod's network namespace is not its launcher's: never reachable."""
    if own_netns is None or launcher_netns is None or own_netns == launcher_netns:
        return None
    for task, address in peers(view):
        if is_loopback(host_of(address)):
            return Unreachable(
                f"cannot reach peers: TF_CONFIG names {task} at {address}, a loopback address, but this pod has a "
                "network namespace of its own, so no other pod is ever on its loopback; on a pod network (tfjob "
                f"local up with --pod-network on, or auto as root) peers are addressed by DNS: {FOLLOW_THE_PLANE}",
                exit_codes.USER_ERROR)
    return None


class DnsWatch:
    """The DNS rule over a sequence of lookups of the cluster's anchor name (pure: fed outcomes and times)."""

    def __init__(self, task: str, address: str, anchor: str, started: float) -> None:
        self.task, self.address, self.anchor = task, address, anchor
        self.started = started
        self.unknown_since: float | None = None  # first of an unbroken run of "no such name" answers
        self.detail = ""

    def observe(self, now: float, outcome: str, detail: str = "") -> Unreachable | None:
        """`outcome`: "ok" (the name resolves), "unknown" (no such name) or "silent" (no answer)."""
        self.detail = detail or self.detail
        if outcome == "unknown":
            self.unknown_since = now if self.unknown_since is None else self.unknown_since
            if now - self.unknown_since >= DNS_GRACE:
                return Unreachable(
                    f"cannot reach peers: TF_CONFIG names {self.task} at {self.address}, a cluster DNS name, but this "
                    f"pod has no cluster DNS: {self.anchor}, which every cluster's DNS answers, is not a known name "
                    f"here ({self.detail}) after {DNS_GRACE:g}s; pods that share this machine's network (tfjob local "
                    f"up --pod-network off) are addressed at 127.0.0.1 ports: {FOLLOW_THE_PLANE}; on a cluster, check "
                    "the pod's dnsPolicy and TFJOB_CLUSTER_DOMAIN", exit_codes.USER_ERROR)
            return None
        self.unknown_since = None
        if outcome == "silent" and now - self.started >= DNS_SILENT:
            return Unreachable(
                f"cannot reach peers: TF_CONFIG names {self.task} at {self.address}, and no DNS server has answered "
                f"for {self.anchor} in {DNS_SILENT:g}s ({self.detail}); check the pod's DNS (dnsPolicy, the cluster "
                "DNS pods); retryable", exit_codes.STARTUP_TIMEOUT)
        return None


def lookup(name: str) -> tuple[str, str]:
    """(outcome, detail) of resolving `name`: "ok", "unknown" (no such name) or "silent" (no answer)."""
    try:
        socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        unknown = exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))
        return ("unknown" if unknown else "silent"), exc.strerror or str(exc)
    except OSError as exc:
        return "silent", str(exc)
    return "ok", ""


def netns_inode(pid: int | str) -> int | None:
    """The inode of a process's network namespace; None where /proc does not say (not Linux, no such process)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class ReachCheck:
    """The checks for one pod, on a daemon thread; `verdict` is set once a peer is known to be unreachable."""

    def __init__(self, view: ClusterView, resolve: Callable[[str], tuple[str, str]] = lookup,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.view = view
        self.resolve = resolve
        self.clock = clock
        self.verdict: Unreachable | None = None
        self._stop = threading.Event()

    def run(self) -> None:
        self.verdict = loopback_verdict(self.view, netns_inode("self"), netns_inode(os.getppid()))
        if self.verdict is not None:
            return
        named = [(task, address, anchor) for task, address in peers(self.view)
                 if (anchor := cluster_anchor(host_of(address))) is not None]
        if not named:
            return
        task, address, anchor = named[0]
        watch = DnsWatch(task, address, anchor, self.clock())
        while not self._stop.is_set():
            outcome, detail = self.resolve(anchor)
            if outcome == "ok":
                return
            self.verdict = watch.observe(self.clock(), outcome, detail)
            if self.verdict is not None:
                return
            self._stop.wait(POLL)

    def start(self) -> ReachCheck:
        threading.Thread(target=self.run, name="tfjob-reach-check", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def start_check(env: Mapping[str, str] = os.environ) -> ReachCheck | None:
    """The check for this pod's TF_CONFIG, started; None without one (or one the trainer will refuse itself)."""
    if not env.get("TF_CONFIG"):
        return None
    try:
        view = from_tf_config(env["TF_CONFIG"])
    except (ClusterConfigError, ValueError):
        return None
    return ReachCheck(view).start()
