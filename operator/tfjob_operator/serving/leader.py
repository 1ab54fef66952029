"""Lease-based leader election (coordination.k8s.io/v1), so `replicas > 1` is safe: one replica acts.

The runner awaits `run_as_leader(api, config, main)` before starting kopf: a standby waits until the Lease is
free or expired, takes it with an optimistic-concurrency update (a 409 means someone else won), then runs
`main` while renewing. If a renewal cannot succeed within `renew_deadline`, `main` is cancelled and
`LeadershipLost` is raised: the process should exit so that it never acts beside a new leader. A renewal's Lease
call may wait for all that is left of `renew_deadline`, as client-go's run under the deadline's context: a busy
API server's late answer still counts, where a shorter request timeout sent the same request again, to the back
of the server's queue (the local plane at 10,000 jobs answered in 6 s, and the leader gave up).
Expiry is judged by when *this* replica last saw the Lease change, never by comparing clocks (as client-go).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tfjob_operator.kube import (
    MERGE_PATCH,
    Kube,
    KubeError,
    RetryPolicy,
    api_client,
    load_api_client,
    pods_path,
)

log = logging.getLogger(__name__)

#: Label the leader puts on its own pod; the chart's webhook Service selects it.
LEADER_LABEL = "tfjob.dev/operator-leader"
#: User agent of every leader-election request (the RBAC evidence test attributes requests by it).
USER_AGENT = "tfjob-operator/leader-election"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class LeadershipLost(RuntimeError):
    """The Lease could not be renewed in time; another replica may lead now."""


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str
    lease_name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    #: When set, the leader labels this pod (in `namespace`) with LEADER_LABEL=true.
    pod_name: str | None = None


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decide(lease: Mapping[str, Any] | None, identity: str, *, seen_for: float, duration: float) -> str:
    """What to do with the Lease as read: "create", "renew" (ours), "take" (free or expired) or "wait"."""
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if holder == identity:
        return "renew"
    if not holder or seen_for >= float(spec.get("leaseDurationSeconds") or duration):
        return "take"
    return "wait"


def claimed(lease: Mapping[str, Any] | None, config: LeaderElectionConfig, action: str) -> dict[str, Any]:
    """The Lease body to write for `action` (create/renew/take)."""
    now = _now()
    body: dict[str, Any] = dict(lease) if lease else {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": config.lease_name, "namespace": config.namespace},
    }
    spec: dict[str, Any] = dict(body.get("spec") or {})
    if action in ("create", "take"):
        spec["acquireTime"] = now
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if action == "take" else 0)
    spec.update({"holderIdentity": config.identity, "leaseDurationSeconds": int(config.lease_duration),
                 "renewTime": now})
    body["spec"] = spec
    return body


#: A Lease call gets at least this long, however little of the renew deadline is left.
MIN_CALL_SECONDS = 0.1
#: Leader election's calls under the one retry policy: a second attempt only after a quick failure (a refused
#: connection, a 5xx); how long a call may wait is the renewal's deadline (`LeaderElector`), else `timeout`.
LEASE_RETRY = RetryPolicy(attempts=2, backoff=0.2, max_backoff=1.0, timeout=10.0)


class LeaseApi:
    """The three Lease calls and the pod label, through the one API layer (`tfjob_operator.kube`): the official
    client's credentials (in-cluster, with the token the kubelet rotates, or a kubeconfig), `KubeError`, and
    the one retry policy with leader election's own budget."""

    def __init__(self, target: str | k8s.ApiClient, *, retry: RetryPolicy = LEASE_RETRY) -> None:
        api = target if isinstance(target, k8s.ApiClient) else api_client(target, user_agent=USER_AGENT)
        self.kube = Kube(api, retry)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> LeaseApi:
        """In-cluster credentials inside a pod, else the kubeconfig (as `kube.load_api_client` chooses)."""
        return cls(load_api_client(kubeconfig, user_agent=USER_AGENT))

    @property
    def base_url(self) -> str:
        return str(self.kube.api.configuration.host)

    @base_url.setter
    def base_url(self, url: str) -> None:
        self.kube.api.configuration.host = url

    async def close(self) -> None:
        await asyncio.to_thread(self.kube.api.close)

    @staticmethod
    def _path(namespace: str, name: str | None = None) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return f"{base}/{name}" if name else base

    async def get(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        return await self.kube.get(self._path(namespace, name), timeout=timeout)

    async def write(self, lease: dict[str, Any], *, create: bool, timeout: float | None = None) -> bool:
        """Create or replace (with its resourceVersion); False when another replica got there first (409)."""
        ns, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
        done = await (self.kube.request("POST", self._path(ns), lease, ok=frozenset({409}), timeout=timeout)
                      if create else
                      self.kube.request("PUT", self._path(ns, name), lease, ok=frozenset({409}), timeout=timeout))
        return done is not None

    async def label_pod(self, namespace: str, name: str, value: str | None) -> None:
        await self.kube.request("PATCH", pods_path(namespace, name), {"metadata": {"labels": {LEADER_LABEL: value}}},
                                content_type=MERGE_PATCH)


class LeaderElector:
    """Acquire, hold and release one Lease."""

    def __init__(self, api: LeaseApi, config: LeaderElectionConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.config, self.clock = api, config, clock
        self._seen: tuple[str | None, float] = (None, clock())  # (resourceVersion, when we first saw it)

    def _observe(self, lease: Mapping[str, Any] | None) -> float:
        version = (lease or {}).get("metadata", {}).get("resourceVersion")
        if version != self._seen[0]:
            self._seen = (version, self.clock())
        return self.clock() - self._seen[1]

    async def try_acquire_or_renew(self, deadline: float | None = None) -> bool:
        """One try; each call may wait until `deadline` (the clock's time), else the policy's timeout."""
        lease = await self.api.get(self.config.namespace, self.config.lease_name, timeout=self._left(deadline))
        action = decide(lease, self.config.identity, seen_for=self._observe(lease),
                        duration=self.config.lease_duration)
        if action == "wait":
            return False
        return await self.api.write(claimed(lease, self.config, action), create=(action == "create"),
                                    timeout=self._left(deadline))

    def _left(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(deadline - self.clock(), MIN_CALL_SECONDS)

    async def acquire(self) -> None:
        """Return once this replica holds the Lease."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    log.info("leader election: %s leads (Lease %s/%s)", self.config.identity,
                             self.config.namespace, self.config.lease_name)
                    return
            except KubeError as exc:
                log.warning("leader election: %s", exc)
            await asyncio.sleep(self.config.retry_period)

    async def hold(self) -> None:
        """Renew every retry period; raise LeadershipLost when no renewal succeeded for renew_deadline. Each Lease
        call may wait for what is left of it."""
        last_ok = self.clock()
        while True:
            await asyncio.sleep(self.config.retry_period)
            deadline = last_ok + self.config.renew_deadline
            try:
                async with asyncio.timeout(max(deadline - self.clock(), 0.0)):
                    ok = await self.try_acquire_or_renew(deadline)
            except TimeoutError:
                log.warning("leader election: renewal not answered within the renew deadline")
                ok = False
            except KubeError as exc:
                log.warning("leader election: renewal failed: %s", exc)
                ok = False
            if ok:
                last_ok = self.clock()
            elif self.clock() >= deadline:
                raise LeadershipLost(f"could not renew Lease {self.config.lease_name} for "
                                     f"{self.config.renew_deadline:.0f}s")

    async def release(self) -> None:
        """Give the Lease up at a clean shutdown so a standby takes over at once."""
        lease = await self.api.get(self.config.namespace, self.config.lease_name)
        if lease and (lease.get("spec") or {}).get("holderIdentity") == self.config.identity:
            lease["spec"]["holderIdentity"] = None
            await self.api.write(lease, create=False)


async def run_as_leader(api: LeaseApi, config: LeaderElectionConfig,
                        main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Wait for leadership, then run `main` while holding it; release on exit, LeadershipLost if taken away."""
    elector = LeaderElector(api, config)
    await elector.acquire()
    if config.pod_name:
        await api.label_pod(config.namespace, config.pod_name, "true")
    holder = asyncio.create_task(elector.hold())
    worker = asyncio.create_task(main())
    lost = False
    try:
        done, _ = await asyncio.wait({holder, worker}, return_when=asyncio.FIRST_COMPLETED)
        if holder in done and not holder.cancelled():  # cancelled from outside (a stop): released below
            lost = True
            holder.result()  # raises LeadershipLost
        if worker in done and not worker.cancelled():
            worker.result()
    finally:
        for task in (holder, worker):
            task.cancel()
        # After a loss, wait only so long for `main` to wind down: a new leader may be acting already.
        await asyncio.wait({holder, worker}, timeout=config.renew_deadline if lost else None)
        if not lost:
            with contextlib.suppress(KubeError):
                await asyncio.shield(elector.release())
