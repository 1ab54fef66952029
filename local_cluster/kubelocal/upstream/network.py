"""The pod network beside the upstream plane: the cluster DNS reads the real API's Services and EndpointSlices (what
kube-controller-manager's endpointslice controller wrote, as CoreDNS reads them), and the API server is reached
from inside the pod network through relays.

kube-apiserver listens on the host's loopback. Inside the plane's namespace the relays listen where a pod or a
plane process looks for it, and pass the bytes (TLS end to end) to the host's listener: the `kubernetes`
Service's ClusterIP:443 (in-cluster config), the advertised address at the secure port (the `kubernetes`
EndpointSlice) and the namespace's own loopback at that port (the plane's processes run in there, such as
`tfjob local`'s operator, with the host's kubeconfig unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Mapping
from typing import Any

from kubelocal.kubeclient import Informer, KubeClient

from .egress import splice

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class ApiRecords:
    """The DNS server's records (`kubelocal.network.dns.ClusterRecords`) from informers of Services and
    EndpointSlices over HTTP. The DNS answers on threads of its own: each read hops to the informers' loop."""

    def __init__(self, timeout: float = 2.0) -> None:
        self.timeout = timeout
        self.client: KubeClient | None = None
        self._services: Informer | None = None
        self._slices: Informer | None = None
        #: (namespace, service) → the names of its slices
        self._by_service: dict[tuple[str, str], set[str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, client: KubeClient) -> None:
        """Start reading through `client` (the API server is up by now); until then every name is unknown."""
        self.client = client
        self._services = Informer(client, "/api/v1/services", lambda kind, obj: None)
        self._slices = Informer(client, "/apis/discovery.k8s.io/v1/endpointslices", self._on_slice)
        self._tasks = [asyncio.create_task(self._services.run(), name="dns-services"),
                       asyncio.create_task(self._slices.run(), name="dns-endpointslices")]
        await asyncio.gather(self._services.synced.wait(), self._slices.synced.wait())
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        self._loop = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.client is not None:
            await self.client.close()

    def _on_slice(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not service:
            return
        names = self._by_service.setdefault((meta.get("namespace") or "", service), set())
        if kind == "DELETED":
            names.discard(meta.get("name") or "")
        else:
            names.add(meta.get("name") or "")

    def _read(self, fn: Any) -> Any:
        if self._loop is None:
            raise OSError("cluster DNS: the API informers are not running")

        async def read() -> Any:
            return fn()

        try:
            return asyncio.run_coroutine_threadsafe(read(), self._loop).result(self.timeout)
        except RuntimeError as exc:  # the loop is closed: the plane is stopping
            raise OSError(f"cluster DNS: the API informers are gone ({exc})") from exc

    def service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        services = self._services
        result: Mapping[str, Any] | None = self._read(
            lambda: None if services is None else services.cache.get((namespace, name)))
        return result

    def pods(self, namespace: str) -> list[Mapping[str, Any]]:
        return []  # endpoints come from the EndpointSlices (`endpoints`)

    def endpoints(self, namespace: str, service: str) -> list[tuple[str, str | None]]:
        """(IP, hostname) of each ready endpoint in the Service's EndpointSlices."""
        def collect() -> list[tuple[str, str | None]]:
            found: list[tuple[str, str | None]] = []
            for name in self._by_service.get((namespace, service), ()):
                obj = (self._slices.cache if self._slices is not None else {}).get((namespace, name)) or {}
                if obj.get("addressType") != "IPv4":
                    continue
                for endpoint in obj.get("endpoints") or []:
                    if (endpoint.get("conditions") or {}).get("ready") is False:
                        continue
                    for address in endpoint.get("addresses") or []:
                        found.append((str(address), endpoint.get("hostname")))
            return found

        result: list[tuple[str, str | None]] = self._read(collect)
        return result


class ApiRelays:
    """TCP relays from sockets (bound inside the plane's namespace) to the API server's host listener."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task[None]] = set()

    async def serve(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._servers.append(await asyncio.start_server(self._relay, sock=sock))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            try:
                upstream = await asyncio.open_connection(*self.target)
            except OSError:
                writer.close()
                return
            await splice((reader, writer), upstream)
        finally:
            if task is not None:
                self._connections.discard(task)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers = []
