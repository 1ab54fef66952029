"""Lease-based leader election (coordination.k8s.io/v1), so `replicas > 1` is safe: one replica acts.

The runner awaits `run_as_leader(api, config, main)` before starting kopf: a standby waits until the Lease is
free or expired, takes it with an optimistic-concurrency update (a 409 means someone else won), then runs
`main` while renewing. If a renewal cannot succeed within `renew_deadline`, `main` is cancelled and
`LeadershipLost` is raised: the process should exit so that it never acts beside a new leader.
Expiry is judged by when *this* replica last saw the Lease change, never by comparing clocks (as client-go).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import ssl
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

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


class LeaseApi:
    """The three Lease calls and the pod label, over HTTP (in-cluster credentials or a plain URL)."""

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None,
                 ssl_context: ssl.SSLContext | None = None, user_agent: str = USER_AGENT,
                 token_file: Path | None = None):
        self.base_url = base_url.rstrip("/")
        self.headers = {"User-Agent": user_agent, **(headers or {})}
        self.ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        #: Re-read before each session: the kubelet rotates projected service-account tokens.
        self.token_file = token_file
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def in_cluster(cls) -> LeaseApi:
        """From the pod's service account (token re-read as the kubelet rotates it)."""
        import os

        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
        return cls(f"https://{host}:{port}", ssl_context=context, token_file=SERVICE_ACCOUNT_DIR / "token")

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> LeaseApi:
        """From a kubeconfig (KUBECONFIG or ~/.kube/config): server, bearer token, CA and client certificate."""
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        headers = {}
        token = configuration.get_api_key_with_prefix("authorization")
        if token:
            headers["Authorization"] = token
        ssl_context: ssl.SSLContext | None = None
        if configuration.host.startswith("https"):
            ssl_context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
            if not configuration.verify_ssl:
                ssl_context.check_hostname = False
                ssl_context.verify_mode = ssl.CERT_NONE
            if configuration.cert_file:
                ssl_context.load_cert_chain(configuration.cert_file, configuration.key_file)
        return cls(configuration.host, headers=headers, ssl_context=ssl_context)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> LeaseApi:
        """In-cluster credentials inside a pod, else the kubeconfig (as `kube.load_api_client` chooses)."""
        import os

        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster()
        return cls.from_kubeconfig(kubeconfig)

    def _s(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self.headers, timeout=aiohttp.ClientTimeout(total=10))
        return self._session

    def _auth(self) -> dict[str, str]:
        """Per-request credentials: the token file is read each time (rotated tokens stay valid)."""
        if self.token_file is None:
            return {}
        return {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _url(self, namespace: str, name: str | None = None) -> str:
        base = f"{self.base_url}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return f"{base}/{name}" if name else base

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        async with self._s().get(self._url(namespace, name), headers=self._auth(), ssl=self.ssl) as resp:
            if resp.status == 404:
                return None
            resp.raise_for_status()
            return dict(await resp.json())

    async def write(self, lease: dict[str, Any], *, create: bool) -> bool:
        """Create or replace (with its resourceVersion); False when another replica got there first."""
        ns, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
        auth = self._auth()
        call = self._s().post(self._url(ns), json=lease, headers=auth, ssl=self.ssl) if create else (
            self._s().put(self._url(ns, name), json=lease, headers=auth, ssl=self.ssl))
        async with call as resp:
            if resp.status == 409:
                return False
            resp.raise_for_status()
            return True

    async def label_pod(self, namespace: str, name: str, value: str | None) -> None:
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}"
        patch = {"metadata": {"labels": {LEADER_LABEL: value}}}
        headers = {"Content-Type": "application/merge-patch+json", **self._auth()}
        async with self._s().patch(url, json=patch, headers=headers, ssl=self.ssl) as resp:
            resp.raise_for_status()


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

    async def try_acquire_or_renew(self) -> bool:
        lease = await self.api.get(self.config.namespace, self.config.lease_name)
        action = decide(lease, self.config.identity, seen_for=self._observe(lease),
                        duration=self.config.lease_duration)
        if action == "wait":
            return False
        return await self.api.write(claimed(lease, self.config, action), create=(action == "create"))

    async def acquire(self) -> None:
        """Return once this replica holds the Lease."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    log.info("leader election: %s leads (Lease %s/%s)", self.config.identity,
                             self.config.namespace, self.config.lease_name)
                    return
            except aiohttp.ClientError as exc:
                log.warning("leader election: %s", exc)
            await asyncio.sleep(self.config.retry_period)

    async def hold(self) -> None:
        """Renew every retry period; raise LeadershipLost when renewals fail for renew_deadline."""
        last_ok = self.clock()
        while True:
            await asyncio.sleep(self.config.retry_period)
            try:
                ok = await self.try_acquire_or_renew()
            except aiohttp.ClientError as exc:
                log.warning("leader election: renewal failed: %s", exc)
                ok = False
            if ok:
                last_ok = self.clock()
            elif self.clock() - last_ok >= self.config.renew_deadline:
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
        if holder in done:
            lost = True
            holder.result()  # raises LeadershipLost
        worker.result()
    finally:
        for task in (holder, worker):
            task.cancel()
        # After a loss, wait only so long for `main` to wind down: a new leader may be acting already.
        await asyncio.wait({holder, worker}, timeout=config.renew_deadline if lost else None)
        if not lost:
            with contextlib.suppress(aiohttp.ClientError):
                await asyncio.shield(elector.release())
