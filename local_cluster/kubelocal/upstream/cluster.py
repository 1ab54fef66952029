"""UpstreamCluster: the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, built
from their Go modules) with kubelocal's node agents and pod network, behind `LocalCluster`'s interface.

What differs from `LocalCluster` is only what the real components do themselves: there is no Python API server,
controller or scheduler. The kubelets join as nodes do (`kubelets.py`), the cluster DNS reads the real API's
Services and EndpointSlices, and pods reach the API server through relays inside the pod network
(`network.py`). `UpstreamClusterThread` runs one on a background thread, as `LocalClusterThread` does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubelocal.cluster import (
    ClusterSettings,
    ComponentLoop,
    LocalClusterThread,
    install_crds,
    wait_for_default_service_accounts,
)
from kubelocal.kubeclient import ApiError, KubeClient
from kubelocal.kubelet import PodNetworking, ProcessKubelet
from kubelocal.kubelet.server import DECLARED_FEATURES, KubeletServer
from kubelocal.network import Listen, plane
from kubelocal.nodes import SIM_LABEL, is_simulated
from kubelocal.published import publish

from . import binaries as bins
from .egress import Streams
from .kubelets import Kubelets
from .network import ApiRecords, ApiRelays
from .pki import issue, kubeconfig, write_kubeconfig
from .plane import UpstreamPlane, tls_context
from .storage import LocalPathProvisioner

#: The simulated nodes' agent: its user, and what it may do (kwok's controller runs with such a role).
SIM_AGENT = "kubelocal:sim-kubelet"
SIM_AGENT_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SIM_AGENT},
    "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "create", "patch", "update"]},
        {"apiGroups": [""], "resources": ["nodes/status", "pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "serviceaccounts"], "verbs": ["get"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update", "patch"]},
    ],
}
SIM_AGENT_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SIM_AGENT},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SIM_AGENT},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SIM_AGENT}],
}
#: The cluster DNS's Service, as kubeadm's CoreDNS add-on makes it (no selector: the plane answers at its IP), so
#: `kubectl get svc -n kube-system` shows it and no other Service is given its address.
KUBE_DNS: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
    "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                  {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]},
}
#: Where a process node's kubelet API listens when there is no pod network (the egress proxy dials it directly).
HOST_NODE_IP = "127.0.0.1"

T = TypeVar("T")


class UpstreamCluster(ClusterSettings):
    """The upstream control plane with kubelocal's nodes; `async with UpstreamCluster(workdir=...) as c:`.

    Takes `LocalCluster`'s arguments. `port` (when not 0) is kube-apiserver's secure port. Of `controllers`,
    `node_monitor_grace` and `toleration_cap` become kube-controller-manager's and kube-apiserver's flags;
    `gc_delay` (kubelocal's lagging garbage collector) has no kube-controller-manager setting and is not applied.
    `apiserver_flags` are added to kube-apiserver's (e.g. a bench's `--audit-policy-file`)."""

    def __init__(self, *, binaries: dict[str, Path] | None = None, apiserver_flags: Sequence[str] = (),
                 **settings: Any) -> None:
        super().__init__(**settings)
        self.apiserver_flags = tuple(apiserver_flags)
        self.binaries = binaries if binaries is not None else bins.find()  # BinariesMissing before anything starts
        self.records: ApiRecords | None = None
        self.relays: ApiRelays | None = None
        self.plane: UpstreamPlane | None = None
        self.admin: KubeClient | None = None
        self.provisioner: LocalPathProvisioner | None = None
        self._kubelets: Kubelets | None = None
        self._components: ComponentLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the plane's processes are awaited on it

    # -- what callers read ------------------------------------------------------------------------------------

    def _plane(self) -> UpstreamPlane:
        return self._running(self.plane)

    @property
    def url(self) -> str:
        return self._plane().url

    @property
    def kubelet(self) -> Kubelets:
        return self._running(self._kubelets)

    @property
    def components(self) -> ComponentLoop:
        return self._running(self._components)

    def write_kubeconfig(self, path: Path) -> None:
        """The admin's kubeconfig (a `system:masters` client certificate), laid out as kubelocal's."""
        p = self._plane()
        assert p.pki is not None
        write_kubeconfig(Path(path), kubeconfig(self.url, p.ca_pem(), p.pki.load("admin")))

    # -- start and stop ---------------------------------------------------------------------------------------

    def _node_ip(self) -> str:
        """The nodes' InternalIP: where their kubelet API listens and kube-apiserver (through the egress proxy)
        dials it: the pod network's gateway, inside the plane's namespace, or the host's loopback."""
        return self.network.net.gateway if self.network is not None else HOST_NODE_IP

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.pod_network:
            self.records = ApiRecords()  # reads the API once it is up (`_start_components`)
            self.network = plane.PlaneNetwork(self.records, self.ca)
        advertise = self.network.net.gateway if self.network is not None else host_address()
        s = self.controller_settings
        self.plane = UpstreamPlane(self.workdir / "upstream", advertise_address=advertise, dial=self._dial,
                                   binaries=self.binaries, node_monitor_grace=s.node_monitor_grace,
                                   default_toleration_seconds=300 if s.toleration_cap is None
                                   else int(s.toleration_cap), ca=self.ca, port=self.port,
                                   apiserver_flags=self.apiserver_flags)
        try:
            if self.network is not None:
                await self._start_network(self.plane.layout.ports.apiserver)
            await self.plane.start()
            self._components = ComponentLoop("kubelocal-upstream")
            self._components.start()
            await self._components.run(self._start_components())
        except BaseException:
            await self.stop()
            raise

    async def _start_network(self, api_port: int) -> None:
        assert self.network is not None
        sockets = await asyncio.to_thread(self.network.start, api_port)
        self.relays = ApiRelays(api_port)
        await self.relays.serve(sockets.api_tls)
        await self.relays.serve(sockets.api_local)
        (advertised,) = await asyncio.to_thread(self.network.net.open_sockets,
                                                [Listen("tcp", self.network.net.gateway, api_port)])
        await self.relays.serve(advertised)

    async def _dial(self, host: str, port: int) -> Streams:
        """The egress proxy's way to an address: pod network addresses from inside its namespace."""
        if self.network is not None and _in_network(host, self.network):
            return await self.network.net.open_connection(host, port)
        return await asyncio.open_connection(host, port)

    async def _start_components(self) -> None:
        """On the components' loop: the DNS's informers, default ServiceAccounts, the CRDs, the node agents."""
        p = self._plane()
        self.admin = p.client()
        if self.records is not None:
            await self.records.start(p.client(user_agent="kubelocal-dns"))
            await self._create("/api/v1/namespaces/kube-system/services", KUBE_DNS)
        # How its pods reach each other, as kubelocal publishes it (kube-apiserver keeps default/kubernetes itself).
        await publish(self.url, self.network is not None, self.pod_network_reason, tls=p.tls())
        await wait_for_default_service_accounts(self.url, ("default", "kube-system"), timeout=60.0, tls=p.tls())
        if self.crds:
            await install_crds(self.url, self.crds, tls=p.tls())
        self.provisioner = LocalPathProvisioner(self.admin, self.workdir)
        await self.provisioner.start()
        self._kubelets = Kubelets(await self._agents())
        await self._kubelets.start()

    async def stop_scheduler(self) -> None:
        """kube-scheduler down (SIGTERM): pods stay unbound; from any loop, as `LocalCluster.stop_scheduler`."""
        await self._on_plane_loop(self._plane().end("kube-scheduler"))

    async def start_scheduler(self) -> None:
        """kube-scheduler back, with the same flags, once healthy."""
        await self._on_plane_loop(self._plane().restart("kube-scheduler"))

    async def _on_plane_loop(self, coro: Coroutine[Any, Any, None]) -> None:
        """The plane's processes are awaited on the loop that started them (their exit is a reader there)."""
        assert self._loop is not None
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _create(self, path: str, obj: Mapping[str, Any]) -> None:
        assert self.admin is not None
        try:
            await self.admin.post(path, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise

    async def _agents(self) -> list[ProcessKubelet]:
        """A kubelet per process node with that node's identity; one with the simulated nodes' agent identity."""
        p = self._plane()
        assert p.pki is not None and self.admin is not None
        networking = None if self.network is None else PodNetworking(self.network.net)
        cluster_env = {} if networking else {"KUBECONFIG": str(self._pod_kubeconfig())}
        common: dict[str, Any] = dict(
            workdir=self.workdir, max_grace_seconds=self.max_grace_seconds, backoff=self.restart_backoff,
            image=self.image, images=self.images, cluster_env=cluster_env, network=networking,
            sim_speed=self.sim_speed, sim_heartbeat_seconds=min(10.0, self.controller_settings.node_monitor_grace / 4),
            ca_pem=p.ca_pem(), admin=self.admin)
        agents = []
        for node in (n for n in self.nodes if not is_simulated(n)):
            name = node["metadata"]["name"]
            p.pki.node_identity(name)
            tls = tls_context(p.pki.path("ca.crt"), p.pki.path(f"node-{name}.crt"), p.pki.path(f"node-{name}.key"))
            p.pki.kubelet_serving(name, [self._node_ip()])
            serving = KubeletServer.context(str(p.pki.path(f"kubelet-{name}.crt")),
                                            str(p.pki.path(f"kubelet-{name}.key")), str(p.pki.path("ca.crt")))
            sock = await self._kubelet_socket()
            agents.append(ProcessKubelet(self.url, nodes=[self._addressed(node, sock.getsockname()[1])], tls=tls,
                                         node=name, api=(sock, serving), **common))
        simulated = [self._addressed(n) for n in self.nodes if is_simulated(n)]
        if simulated:
            for kind, obj in (("clusterroles", SIM_AGENT_ROLE), ("clusterrolebindings", SIM_AGENT_BINDING)):
                await self._create(f"/apis/rbac.authorization.k8s.io/v1/{kind}", obj)
            p.pki.save("sim-kubelet", issue(p.pki.ca, SIM_AGENT, client=True))
            agents.append(ProcessKubelet(self.url, nodes=simulated, tls=p.tls("sim-kubelet"),
                                         node_labels={SIM_LABEL: "true"}, **common))
        return agents

    async def _kubelet_socket(self) -> socket.socket:
        """A listening socket for a node's kubelet API at the node's address (any free port)."""
        if self.network is not None:
            (sock,) = await asyncio.to_thread(self.network.net.open_sockets, [Listen("tcp", self._node_ip(), 0)])
            return sock
        sock = socket.socket()
        sock.bind((HOST_NODE_IP, 0))
        sock.listen(128)
        return sock

    def _addressed(self, node: dict[str, Any], kubelet_port: int | None = None) -> dict[str, Any]:
        """The node with the address kube-apiserver reaches its kubelet at (and the port, where it serves one)."""
        name = node["metadata"]["name"]
        status = {**node["status"], "addresses": [{"type": "InternalIP", "address": self._node_ip()},
                                                  {"type": "Hostname", "address": name}]}
        if kubelet_port is not None:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
            status["declaredFeatures"] = DECLARED_FEATURES
        return {**node, "status": status}

    def _pod_kubeconfig(self) -> Path:
        """The kubeconfig pods without a ServiceAccount token use: the API server and its CA, no credentials."""
        path = self.workdir / "pod-kubeconfig"
        write_kubeconfig(path, kubeconfig(self.url, self._plane().ca_pem(), None))
        return path

    async def _stop_components(self) -> None:
        if self._kubelets is not None:
            await self._kubelets.stop()
        if self.provisioner is not None:
            await self.provisioner.stop()
        if self.records is not None:
            await self.records.stop()
        if self.admin is not None:
            await self.admin.close()

    async def stop(self) -> None:
        """End every pod process, then the plane's processes, then the pod network."""
        if self._components is not None:
            try:
                await self._components.run(self._stop_components())
            finally:
                self._components.stop()
                self._components = None
        if self.plane is not None:
            await self.plane.stop()
        if self.relays is not None:
            await self.relays.stop()
            self.relays = None
        if self.network is not None:
            await asyncio.to_thread(self.network.stop)
            self.network = None

    async def __aenter__(self) -> UpstreamCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _in_network(host: str, network: plane.PlaneNetwork) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip in network.net.ipam.network or str(ip) in (network.net.api_ip, network.net.dns_ip)


def host_address() -> str:
    """A non-loopback address of this machine for kube-apiserver to advertise (EndpointSlices refuse loopback):
    the source address of the default route, else the pod network's gateway address (unrouted without one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: connect only picks the route's source
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if address and not ipaddress.ip_address(address).is_loopback:
        return address
    return "10.244.0.1"


class UpstreamClusterThread(LocalClusterThread):
    """An UpstreamCluster on its own event loop in a daemon thread; `with UpstreamClusterThread(workdir=...) as c:`."""

    def __init__(self, *, start_timeout: float = 300.0, **cluster_kwargs: Any) -> None:
        super().__init__(start_timeout=start_timeout, **cluster_kwargs)

    @staticmethod
    def _make_cluster(**cluster_kwargs: Any) -> Any:
        return UpstreamCluster(**cluster_kwargs)

    @property
    def kubelet(self) -> Kubelets:  # type: ignore[override]
        kubelets: Kubelets = self.cluster.kubelet
        return kubelets

    def on_plane(self, coro: Coroutine[Any, Any, T], timeout: float | None = 300.0) -> T:
        """Run a coroutine of the plane's processes (`c.on_plane(c.cluster.plane.compact())`) on the loop they
        were started on, and return its result."""
        if self._loop is None:
            raise RuntimeError("the cluster thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
