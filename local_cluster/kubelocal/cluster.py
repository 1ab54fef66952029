"""LocalCluster: the API emulator, the controllers beside it, the declared nodes, the scheduler stand-in
and the process kubelet.

The API server has the event loop it is started on to itself; the controller manager and the scheduler
(clients of it over HTTP) run on a second event loop in their own thread, so that their work (decisions,
watch decoding) never queues ahead of a request being served; the kubelet has a third, as every node's
kubelet is a process of its own: a scheduling burst over a thousand nodes never delays a Lease renewal. `LocalCluster`
is an async context manager; `LocalClusterThread` runs one on a background thread for synchronous callers
(tests, `tfjob local`, kubectl users).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kubelocal.apiserver import ApiServer, write_kubeconfig
from kubelocal.apiserver.plugins import ServiceAccountAdmission
from kubelocal.containers import ImageDefaults
from kubelocal.controllers import ControllerManager, ControllerSettings
from kubelocal.kubeclient import ApiError, KubeClient
from kubelocal.kubelet import PodNetworking, ProcessKubelet
from kubelocal.network import plane
from kubelocal.nodes import DEFAULT_NODES, parse_node_spec
from kubelocal.pki import CertificateAuthority, new_ca
from kubelocal.published import publish
from kubelocal.scheduler import Scheduler

T = TypeVar("T")
#: Seconds a thread may hold the GIL while another waits for it (Python's default is 0.005).
SWITCH_INTERVAL = 0.0005
CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def install_crds(url: str, paths: Sequence[Path], *, timeout: float = 30.0,
                       tls: ssl.SSLContext | None = None) -> list[str]:
    """Create the CRDs in these YAML files through the API (as kubectl would) and wait until they serve."""
    client = KubeClient(url, "tfjob-local-cluster", tls=tls)
    names = []
    try:
        for path in paths:
            for doc in yaml.safe_load_all(Path(path).read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                try:
                    await client.post(CRD_API, doc)
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = await client.get(f"{CRD_API}/{name}")
                conds = {c.get("type"): c.get("status") for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not Established after {timeout:g}s")
                await asyncio.sleep(0.05)
    finally:
        await client.close()
    return names


async def wait_for_default_service_accounts(url: str, namespaces: Sequence[str], *, timeout: float = 30.0,
                                            tls: ssl.SSLContext | None = None) -> None:
    """What kind waits for before calling a cluster ready: pods there can be admitted."""
    client = KubeClient(url, "tfjob-local-cluster", tls=tls)
    deadline = time.monotonic() + timeout
    try:
        for ns in namespaces:
            while True:
                try:
                    await client.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
                    break
                except ApiError as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.02)
    finally:
        await client.close()


class StoreRecords:
    """The cluster DNS's view of the API server's store: each read hops to the server's loop (the DNS answers on
    threads of its own, and the store is only ever touched from that loop)."""

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop, timeout: float = 2.0) -> None:
        self.store, self.loop, self.timeout = store, loop, timeout

    def _read(self, fn: Any) -> Any:
        async def read() -> Any:
            return fn()

        try:
            return asyncio.run_coroutine_threadsafe(read(), self.loop).result(self.timeout)
        except RuntimeError as exc:  # the server's loop is closed (the plane is stopping): no answer, as a timeout
            raise OSError(f"cluster DNS: the API server's store is gone ({exc})") from exc

    def service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        result: Mapping[str, Any] | None = self._read(lambda: self.store.get(("", "services"), namespace, name))
        return result

    def pods(self, namespace: str) -> list[Mapping[str, Any]]:
        result: list[Mapping[str, Any]] = self._read(
            lambda: [stored.obj for stored in self.store.items(("", "pods"), namespace)])
        return result


class ComponentLoop:
    """An event loop in a daemon thread for the cluster's components (controllers, scheduler, kubelet)."""

    def __init__(self, name: str = "kubelocal-components") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        # The API server's thread gives the GIL up on every socket write and must win it back from this
        # CPU-bound thread: with the default 5 ms switch interval, each response could wait that long.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self._thread.start()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the components' loop (from any thread)."""
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop)

    async def run(self, coro: Awaitable[T]) -> T:
        """Await a coroutine that runs on the components' loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


class ClusterSettings:
    """What both planes take (`LocalCluster`'s and `UpstreamCluster`'s arguments), checked before anything starts."""

    def __init__(self, *, nodes: str | None = None, workdir: Path, port: int = 0,
                 crds: Sequence[Path] = (), max_grace_seconds: float = 5.0,
                 restart_backoff: tuple[float, float] = (0.2, 5.0),
                 controllers: ControllerSettings | None = None, image: ImageDefaults = ImageDefaults(),
                 images: Mapping[str, ImageDefaults] | None = None, sim_speed: float = 1.0,
                 pod_network: str = "off") -> None:
        self.node_spec = nodes or DEFAULT_NODES
        self.nodes = parse_node_spec(self.node_spec)  # fail on a bad spec before anything starts
        self.workdir = Path(workdir).resolve()
        self.port = port
        self.crds = tuple(crds)
        self.max_grace_seconds = max_grace_seconds
        self.restart_backoff = restart_backoff
        self.image = image
        #: Image repository → what it gives a container (e.g. an installed command as its ENTRYPOINT).
        self.images = dict(images or {})
        if not sim_speed > 0:
            raise ValueError(f"sim_speed: {sim_speed!r} must be a positive number of simulated seconds per second")
        #: Simulated seconds per wall second for the pods of simulated nodes (`sim:true` in --nodes).
        self.sim_speed = sim_speed
        self.controller_settings = controllers or ControllerSettings()
        #: Whether pods get a network of their own (`auto`: where namespaces can be made) and why not.
        self.pod_network, self.pod_network_reason = plane.choose(pod_network)
        self.network: plane.PlaneNetwork | None = None
        self.ca: CertificateAuthority = new_ca()

    def _running(self, part: T | None) -> T:
        """A part that exists only while the cluster runs (its API server, kubelet, controllers...)."""
        if part is None:
            raise RuntimeError(f"the cluster is not running (use `async with {type(self).__name__}(...)`)")
        return part


class LocalCluster(ClusterSettings):
    """A whole local control plane; `async with LocalCluster(workdir=...) as c:` then use `c.url`.

    The controllers and the scheduler live on `components.loop`: await their coroutines through
    `await c.on_components(...)`. The kubelet lives on its own loop; its fault methods (`c.kubelet.evict(...)`)
    may be awaited from any loop.
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.apiserver = ApiServer(port=self.port)
        # pods naming a missing ServiceAccount are refused; the controllers create each namespace's `default`
        self.apiserver.admission.register(ServiceAccountAdmission(self.apiserver.store))
        self._controllers: ControllerManager | None = None
        self._kubelet: ProcessKubelet | None = None
        self._scheduler: Scheduler | None = None
        self._components: ComponentLoop | None = None
        self._kubelet_loop: ComponentLoop | None = None

    @property
    def url(self) -> str:
        return str(self.apiserver.url)

    def write_kubeconfig(self, path: Path) -> None:
        """The kubeconfig `tfjob local up --kubeconfig` hands out: the API server's URL, no credentials."""
        write_kubeconfig(path, self.url)

    @property
    def kubelet(self) -> ProcessKubelet:
        return self._running(self._kubelet)

    @property
    def controllers(self) -> ControllerManager:
        return self._running(self._controllers)

    @property
    def scheduler(self) -> Scheduler:
        return self._running(self._scheduler)

    @property
    def components(self) -> ComponentLoop:
        return self._running(self._components)

    async def on_components(self, coro: Awaitable[T]) -> T:
        """Await a coroutine of the controllers, the kubelet or the scheduler on their own loop."""
        return await self.components.run(coro)

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await self.apiserver.start()
        try:
            if self.pod_network:
                await self._start_network()
            # How its pods reach each other (kube-public/pod-addressing), so clients follow the plane.
            await publish(self.url, self.network is not None, self.pod_network_reason,
                          self.network.net.api_ip if self.network is not None else None)
            if self.crds:
                await install_crds(self.url, self.crds)
            self._components = ComponentLoop()
            self._components.start()
            self._kubelet_loop = ComponentLoop("kubelocal-kubelet")
            self._kubelet_loop.start()
            await self._components.run(self._start_components())
        except BaseException:
            await self.stop()
            raise

    async def _start_network(self) -> None:
        """The pod network, its DNS, and the API server's sockets inside it (TLS for pods; plain for the plane's
        own processes run in its namespace)."""
        records = StoreRecords(self.apiserver.store, asyncio.get_running_loop())
        self.network = plane.PlaneNetwork(records, self.ca)
        sockets = await asyncio.to_thread(self.network.start, self.apiserver.port)
        await self.apiserver.serve_socket(sockets.api_tls, sockets.ssl_context)
        await self.apiserver.serve_socket(sockets.api_local)
        self.apiserver.webhooks.dial = self.network.net.plane_socket  # webhooks are pod IPs now

    async def _start_components(self) -> None:
        """On the components' loop: the controllers, the kubelet on its own loop (it registers the nodes), then
        the scheduler."""
        self._controllers = ControllerManager(self.url, self.ca.cert_pem, self.controller_settings)
        await self._controllers.start()
        await wait_for_default_service_accounts(self.url, ("default", "kube-system"))
        networking = None if self.network is None else PodNetworking(self.network.net)
        # Pods on the network use in-cluster config (KUBERNETES_SERVICE_HOST, the token); others the kubeconfig.
        cluster_env = {} if networking else {"KUBECONFIG": str(self._pod_kubeconfig())}
        self._kubelet = ProcessKubelet(self.url, nodes=self.nodes, workdir=self.workdir,
                                       max_grace_seconds=self.max_grace_seconds, backoff=self.restart_backoff,
                                       image=self.image, images=self.images, cluster_env=cluster_env,
                                       network=networking,
                                       sim_speed=self.sim_speed, sim_heartbeat_seconds=self._sim_heartbeat())
        self.apiserver.set_log_source(self._kubelet)
        self.apiserver.set_exec_source(self._kubelet)
        assert self._kubelet_loop is not None
        await self._kubelet_loop.run(self._kubelet.start())
        await self.start_scheduler()

    async def start_scheduler(self) -> None:
        """On the components' loop: a scheduler (a new one, after `stop_scheduler`), as kube-scheduler restarting."""
        self._scheduler = Scheduler(self.url)
        self.apiserver.metrics.register(self._scheduler.events)  # its dropped Events, on /metrics
        await self._scheduler.start()

    async def stop_scheduler(self) -> None:
        """On the components' loop: no scheduler (kube-scheduler down: pods stay unbound)."""
        if self._scheduler is not None:
            self.apiserver.metrics.unregister(self._scheduler.events)
            await self._scheduler.stop()
            self._scheduler = None

    def _sim_heartbeat(self) -> float:
        """Simulated nodes renew their Leases as kubelet does (every 10 s), and at least four times per grace
        period of the node lifecycle controller, so a test's short grace never finds one stale."""
        return min(10.0, self.controller_settings.node_monitor_grace / 4)

    def _pod_kubeconfig(self) -> Path:
        """The kubeconfig pods use to reach the API server (in place of in-cluster config: plain HTTP here)."""
        path = self.workdir / "pod-kubeconfig"
        write_kubeconfig(path, self.url)
        return path

    async def _stop_components(self) -> None:
        await self.stop_scheduler()
        if self._controllers is not None:
            await self._controllers.stop()
        if self._kubelet is not None and self._kubelet_loop is not None:
            await self._kubelet_loop.run(self._kubelet.stop())

    async def stop(self) -> None:
        """Stop scheduling, end every pod process, then the API server."""
        if self._components is not None:
            try:
                await self._components.run(self._stop_components())
            finally:
                self.apiserver.set_log_source(None)
                self.apiserver.set_exec_source(None)
                self._components.stop()
                if self._kubelet_loop is not None:
                    self._kubelet_loop.stop()
        try:
            await self.apiserver.stop()
        finally:
            if self.network is not None:
                self.apiserver.webhooks.dial = None
                await asyncio.to_thread(self.network.stop)
                self.network = None

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class LocalClusterThread:
    """A LocalCluster on its own event loop in a daemon thread; `with LocalClusterThread(workdir=...) as c:`."""

    def __init__(self, *, start_timeout: float = 60.0, **cluster_kwargs: Any) -> None:
        self.cluster: Any = self._make_cluster(**cluster_kwargs)
        self.start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = concurrent.futures.Future[None]()

    @staticmethod
    def _make_cluster(**cluster_kwargs: Any) -> Any:
        return LocalCluster(**cluster_kwargs)

    @property
    def url(self) -> str:
        return str(self.cluster.url)

    def write_kubeconfig(self, path: Path) -> None:
        self.cluster.write_kubeconfig(path)

    @property
    def kubelet(self) -> ProcessKubelet:
        kubelet: ProcessKubelet = self.cluster.kubelet
        return kubelet

    @property
    def scheduler(self) -> Scheduler:
        return self.cluster.scheduler

    @property
    def apiserver(self) -> ApiServer:
        return self.cluster.apiserver

    @property
    def controllers(self) -> ControllerManager:
        return self.cluster.controllers

    @property
    def network(self) -> plane.PlaneNetwork | None:
        """The pod network, when the plane has one."""
        return self.cluster.network

    def __enter__(self) -> LocalClusterThread:
        self._thread = threading.Thread(target=self._run, name="tfjob-local-cluster", daemon=True)
        self._thread.start()
        try:
            self._ready.result(timeout=self.start_timeout)
        except BaseException:
            self._thread.join(timeout=self.start_timeout)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(timeout=60)

    def call(self, coro: Awaitable[T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the components' loop (the controllers' and scheduler's) and return its result,
        e.g. `c.call(c.kubelet.evict(...))` (the kubelet's faults hop to its own loop); clients of the API server
        work there too."""
        if self._loop is None:
            raise RuntimeError("the cluster thread is not running")
        return self.cluster.components.submit(coro).result(timeout)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        try:
            await self.cluster.start()
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        try:
            await self._stopped.wait()
        finally:
            await self.cluster.stop()
