"""The kubelet of the local plane: one agent for every declared node, dispatching each pod bound to a node it
serves to a pod worker, confirming deletions, and serving logs and exec to the API server.

It registers its nodes, watches pods over HTTP, and for each pod bound to a node it serves (every Node in
the cluster that it has not lost) starts a pod worker: a `PodRuntime` (containers as local processes), or on
a simulated node (`kubelocal.dev/sim=true`) a `SimPod` (containers as timers, kwok's stages). Workers report
status through `pods/status`; on deletion they stop their containers, and the kubelet confirms it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubelocal import containers as ct
from kubelocal import podtoken
from kubelocal.apiserver.portforward_ws import PodAddress
from kubelocal.controllers.node_lifecycle import NODE_NAME
from kubelocal.kubeclient import ApiError, Informer, KubeClient, post_event
from kubelocal.lifeline import ChildProcess, Lifeline
from kubelocal.nodes import is_simulated

from . import faults
from .cgroups import MemoryCgroups
from .container import killpg
from .logs import read_log
from .network import PodNetworking
from .node_status import NodeStatus
from .pod_worker import PodRuntime, PodWorker
from .server import KubeletServer
from .sim import SimPod

log = logging.getLogger(__name__)

USER_AGENT = "tfjob-local-kubelet"
COMPONENT = "kubelet"


class ProcessKubelet:
    """Runs pods bound to the cluster's nodes as local processes; the API server's LogSource."""

    def __init__(self, url: str, *, nodes: Sequence[Mapping[str, Any]], workdir: Path,
                 max_grace_seconds: float = 5.0, backoff: tuple[float, float] = (0.2, 5.0),
                 config_retry_seconds: float = 1.0, heartbeat_seconds: float = 1.0,
                 image: ct.ImageDefaults = ct.ImageDefaults(),
                 images: Mapping[str, ct.ImageDefaults] | None = None,
                 cluster_env: Mapping[str, str] | None = None, status_concurrency: int = 6,
                 sim_speed: float = 1.0, sim_heartbeat_seconds: float = 10.0,
                 network: PodNetworking | None = None, tls: ssl.SSLContext | None = None,
                 ca_pem: str | None = None, node: str | None = None, node_labels: Mapping[str, str] | None = None,
                 admin: KubeClient | None = None, api: tuple[socket.socket, ssl.SSLContext] | None = None) -> None:
        self.url = url
        #: The API server's CA and this kubelet's identity (a `system:node:<name>` certificate), None: plain HTTP.
        self.tls = tls
        #: The API server's CA (PEM), for the kubeconfigs pods get when it speaks TLS.
        self.ca_pem = ca_pem
        #: The kubelet API (logs, exec, attach, port-forward for kube-apiserver): its listening socket and TLS.
        self._api = api
        self._api_server: KubeletServer | None = None
        #: The one node this kubelet is (its credentials are that node's: it watches only that Node and the pods
        #: bound to it, as the Node authorizer allows), or None: every node it is given or finds (kubelocal).
        self.node = node
        #: The pod network (each pod its own namespace and IP), or None: pods share the host's network.
        self.network = network
        #: What every container's image is taken to give it (there is no image locally): ENV and WORKDIR.
        self.image = image
        #: Image repository → what that image gives (ENTRYPOINT as a local command, ENV, WORKDIR).
        self.images = dict(images or {})
        #: Env every container gets (lowest priority): a real kubelet's KUBERNETES_SERVICE_HOST/PORT; here the
        #: KUBECONFIG of the local API server, for pods that mount no ServiceAccount token (a pod that does gets
        #: a KUBECONFIG presenting its token).
        self.cluster_env = dict(cluster_env or {})
        self.workdir = Path(workdir).resolve()
        self.declared_nodes = [dict(n) for n in nodes]
        self.max_grace_seconds = max_grace_seconds
        self.backoff = backoff
        self.config_retry_seconds = config_retry_seconds
        self.heartbeat_seconds = heartbeat_seconds
        if not sim_speed > 0:
            raise ValueError(f"sim_speed: {sim_speed!r} must be a positive number of simulated seconds per second")
        #: Simulated seconds per wall second for simulated pods' delays and durations.
        self.sim_speed = sim_speed
        #: How often each simulated node renews its Lease (kubelet: every 10 s, a quarter of the Lease's 40 s).
        self.sim_heartbeat_seconds = sim_heartbeat_seconds
        self.client = KubeClient(url, USER_AGENT, max_connections=8, tls=tls)
        self.shared_objects = podtoken.SharedObjects(self.client)  # ServiceAccounts, root CAs: read once a while
        # Leases and node status on their own connections, as the kubelet's heartbeat client: a backlog of pod
        # status writes during a burst must not delay a renewal until the node looks unreachable.
        self.heartbeat_client = KubeClient(url, USER_AGENT, max_connections=2, tls=tls)
        #: Simulated nodes' heartbeats: a connection each for many at once, as each real node has its own kubelet,
        #: so renewals do not queue behind each other while the loop is busy (e.g. scheduling a burst).
        self.sim_heartbeat_client = KubeClient(url, USER_AGENT, max_connections=32, tls=tls)
        #: Pod status writes in flight at once. A pod computes its status once it holds a slot, so under a
        #: backlog it sends its latest state and skips the ones it went through while waiting.
        self.status_slots = asyncio.Semaphore(status_concurrency)
        self.processes: dict[int, ChildProcess] = {}
        #: Kills every pod's process group if this process dies without stopping them (e.g. SIGKILLed).
        self.lifeline = Lifeline()
        #: Where containers with resources.limits.memory get their cgroup (made at start), or why they do not.
        self.memory = MemoryCgroups(None, 0, "not enforced: the kubelet has not started")
        self.lost_nodes: set[str] = set()
        self._runtimes: dict[str, PodWorker] = {}
        self._retired: list[PodWorker] = []  # forgotten runtimes whose tasks may still be winding down
        self._by_name: dict[tuple[str, str], str] = {}
        self._confirming: set[str] = set()
        # One node's kubelet reads only what the Node authorizer lets a node read: its own Node, its own pods.
        pod_params: dict[str, str] = {}
        node_params: dict[str, str] = {}
        if node:
            pod_params = {"fieldSelector": f"{NODE_NAME}={node}"}
            node_params = {"fieldSelector": f"metadata.name={node}"}
        elif node_labels:  # e.g. the simulated nodes' agent: only the nodes labelled as such
            node_params = {"labelSelector": ",".join(f"{k}={v}" for k, v in node_labels.items())}
        self._pods = Informer(self.client, "/api/v1/pods", self._on_pod, params=pod_params, index_fields=(NODE_NAME,))
        self._nodes = Informer(self.client, "/api/v1/nodes", self._on_node, params=node_params)
        self.node_status = NodeStatus(self.client, self.heartbeat_client,
                                      lambda name: self._nodes.cache.get(("", name)), self.lost_nodes, admin)
        self.sim_node_status = NodeStatus(self.client, self.sim_heartbeat_client, self.node_status.cached,
                                          self.lost_nodes, admin)
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def node_objects(self) -> dict[str, dict[str, Any]]:
        return {key[1]: obj for key, obj in self._nodes.cache.items()}

    # -- start / stop -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the declared nodes (Ready), then start serving pods."""
        self._loop = asyncio.get_running_loop()
        self.lifeline.start()
        self.memory = MemoryCgroups.detect()
        (log.info if self.memory.enforced else log.warning)("memory limits: %s", self.memory.why)
        await self.node_status.ensure_lease_namespace()
        await self.node_status.register_all(self.declared_nodes)
        names = [node["metadata"]["name"] for node in self.declared_nodes if not is_simulated(node)]
        simulated = [node["metadata"]["name"] for node in self.declared_nodes if is_simulated(node)]
        self._tasks = [asyncio.create_task(self._nodes.run(), name="kubelet-nodes"),
                       asyncio.create_task(self.node_status.heartbeat(names, self.heartbeat_seconds),
                                           name="kubelet-heartbeat"),
                       asyncio.create_task(self.sim_node_status.heartbeat(simulated, self.sim_heartbeat_seconds),
                                           name="kubelet-sim-heartbeat")]
        await self._nodes.synced.wait()
        self._tasks.append(asyncio.create_task(self._pods.run(), name="kubelet-pods"))
        await self._pods.synced.wait()
        if self._api is not None:
            self._api_server = KubeletServer(self, self._api[1])
            await self._api_server.start(self._api[0])

    async def stop(self, grace: float = 2.0) -> None:
        """Stop watching and end every process this kubelet started (SIGTERM, SIGKILL after `grace`)."""
        if self._api_server is not None:
            await self._api_server.stop()
            self._api_server = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        runtimes = list(self._runtimes.values()) + self._retired
        for rt in runtimes:
            rt.abandoned = True  # the API server may be going away too: no more status writes
        await asyncio.gather(*(rt.terminate(min(grace, self.max_grace_seconds)) for rt in runtimes),
                             return_exceptions=True)
        leftovers = [t for rt in runtimes for t in (rt.task, rt.writer) if t is not None and not t.done()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        for pid in list(self.processes):
            killpg(pid, signal.SIGKILL)
        self.lifeline.close()
        for _ in range(20):  # the killed processes leave their cgroups as the kernel finishes them
            if self.memory.close():
                break
            await asyncio.sleep(0.1)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.client.close()
        await self.heartbeat_client.close()
        await self.sim_heartbeat_client.close()

    # -- events ---------------------------------------------------------------------------------------------

    def serves(self, node: str | None) -> bool:
        return bool(node) and node not in self.lost_nodes and ("", node) in self._nodes.cache

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "ADDED" and self._pods.synced.is_set():
            self.resync_node(node["metadata"]["name"])

    def resync_node(self, node: str) -> None:
        """Look again at every pod bound to the node (it was added, or it came back)."""
        for pod in self._pods.by_field(NODE_NAME, node):
            self._on_pod("MODIFIED", pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        rt = self._runtimes.get(uid)
        if kind == "DELETED":
            if rt is not None:
                self.forget(rt)
                if not rt.abandoned:
                    self._spawn_background(rt.terminate(min(self.max_grace_seconds,
                                                            float(meta.get("deletionGracePeriodSeconds") or 2))))
                rt.abandoned = True
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not self.serves(node):
            return
        if rt is None:
            if meta.get("deletionTimestamp"):
                self._confirm_in_background(pod)  # never ran here (or ran before a restart): nothing to stop
                return
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return  # finished before this kubelet started; never rerun
            rt = self._new_worker(pod)
            self._runtimes[uid] = rt
            self._by_name[(rt.namespace, rt.name)] = uid
            rt.start()
            return
        rt.pod = pod
        if meta.get("deletionTimestamp") and not rt.abandoned:
            self._spawn_background(rt.delete_confirmed())

    def _new_worker(self, pod: dict[str, Any]) -> PodWorker:
        if is_simulated(self._nodes.cache.get(("", pod["spec"]["nodeName"]))):
            return SimPod(self, pod, self.sim_speed)
        return PodRuntime(self, pod)

    def forget(self, rt: PodWorker) -> None:
        """Stop tracking a pod worker (its tasks may still be winding down) and its status writes."""
        self._runtimes.pop(rt.uid, None)
        self._retired = [r for r in self._retired if r.task is not None and not r.task.done()]
        self._retired.append(rt)
        if self._by_name.get((rt.namespace, rt.name)) == rt.uid:
            del self._by_name[(rt.namespace, rt.name)]
        if rt.writer is not None:
            rt.writer.cancel()

    def _confirm_in_background(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        if meta["uid"] in self._confirming:
            return
        self._confirming.add(meta["uid"])
        self._spawn_background(self.confirm_deletion(meta.get("namespace", "default"), meta["name"], meta["uid"]))

    def _spawn_background(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def confirm_deletion(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final word on a terminating pod: delete it with grace 0, for this uid only."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}
        try:
            await self.client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("confirming deletion of %s/%s failed: %s", namespace, name, exc)
        except (TimeoutError, OSError) as exc:
            log.warning("confirming deletion of %s/%s failed: %s", namespace, name, exc)
        finally:
            self._confirming.discard(uid)

    async def fetch_refs(self, pod: Mapping[str, Any]) -> ct.Refs:
        """The ConfigMaps and Secrets a pod references (None for those that do not exist)."""
        configmaps, secrets = ct.referenced_names(pod)
        ns = pod["metadata"].get("namespace", "default")

        async def get(kind: str, name: str) -> Mapping[str, Any] | None:
            try:
                obj: Mapping[str, Any] = await self.client.get(f"/api/v1/namespaces/{ns}/{kind}/{name}")
                return obj
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise

        return ct.Refs(configmaps={n: await get("configmaps", n) for n in configmaps if n},
                       secrets={n: await get("secrets", n) for n in secrets if n})

    async def post_event(self, pod: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        await post_event(self.client, pod, kind, reason, message, component=COMPONENT,
                         host=(pod.get("spec") or {}).get("nodeName"))

    # -- pods, and faults injected into them (kubelocal.kubelet.faults) ---------------------------------------

    def runtime(self, namespace: str, pod: str) -> PodWorker:
        uid = self._by_name.get((namespace, pod))
        if uid is None or uid not in self._runtimes:
            raise KeyError(f'pod "{pod}" is not running on this kubelet (namespace {namespace})')
        return self._runtimes[uid]

    def workers(self) -> list[PodWorker]:
        return list(self._runtimes.values())

    def pods(self) -> Iterable[PodWorker]:
        return self.workers()

    async def _on_own_loop(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a coroutine on the kubelet's loop, awaited from whichever loop the caller is on."""
        if self._loop is None or asyncio.get_running_loop() is self._loop:
            await coro
        else:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def evict(self, namespace: str, pod: str, message: str = faults.DEFAULT_EVICTION_MESSAGE, *,
                    grace_seconds: float = 0.0) -> None:
        """Node-pressure eviction (`faults.evict`)."""
        await self._on_own_loop(faults.evict(self, namespace, pod, message, grace_seconds=grace_seconds))

    async def kill_container(self, namespace: str, pod: str, sig: int = signal.SIGKILL,
                             container: str | None = None, why: str = "a fault injection") -> None:
        """A container's process killed, as by a crash; its status says by `why` (`faults.kill_container`)."""
        await self._on_own_loop(faults.kill_container(self, namespace, pod, sig, container, why))

    async def lose_node(self, node: str) -> None:
        """The node's processes die and its kubelet goes silent (`faults.lose_node`)."""
        await self._on_own_loop(faults.lose_node(self, node))

    async def restore_node(self, node: str) -> None:
        """The node's kubelet comes back (`faults.restore_node`)."""
        await self._on_own_loop(faults.restore_node(self, node))

    async def partition(self, namespace: str, pod: str) -> None:
        """Cut the pod's link (`faults.partition`)."""
        await self._on_own_loop(faults.partition(self, namespace, pod))

    async def heal(self, namespace: str, pod: str) -> None:
        """Restore the pod's link (`faults.heal`)."""
        await self._on_own_loop(faults.heal(self, namespace, pod))

    async def shape(self, namespace: str, pod: str, *, delay_ms: float = 0.0, loss_percent: float = 0.0) -> None:
        """Delay and drop the pod's packets (`faults.shape`)."""
        await self._on_own_loop(faults.shape(self, namespace, pod, delay_ms=delay_ms, loss_percent=loss_percent))

    async def unshape(self, namespace: str, pod: str) -> None:
        """Stop delaying and dropping the pod's packets (`faults.unshape`)."""
        await self._on_own_loop(faults.unshape(self, namespace, pod))

    # -- LogSource and ExecSource ---------------------------------------------------------------------------

    async def stream(self, namespace: str, pod: str, container: str | None, *, follow: bool,
                     tail_lines: int | None, previous: bool) -> AsyncIterator[bytes]:
        """A container's log, as the API server's pods/log serves it; KeyError (on first read) when none."""
        run = self.runtime(namespace, pod).container(container).log_run(pod, previous)
        async for chunk in read_log(run.log_path, run.exited, follow=follow and not previous,
                                    tail_lines=tail_lines, poll=0.05):
            yield chunk

    def pod_address(self, namespace: str, pod: str) -> PodAddress:
        """Where port-forward reaches the pod's ports: its own IP on the pod network (dialled from the plane's
        namespace), else this host's loopback."""
        rt = self.runtime(namespace, pod)
        network = self.network
        if network is None or not rt.pod_ip or rt.pod_ip == ct.LOCAL_IP:
            return PodAddress()

        async def connect(ip: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await network.dial(ip, port, timeout=5.0)

        return PodAddress(rt.pod_ip, connect)

    def pod_object(self, namespace: str, pod: str) -> Mapping[str, Any]:
        """The pod as this kubelet last saw it; KeyError when it does not run it."""
        return self.runtime(namespace, pod).pod

    def exec_spec(self, namespace: str, pod: str, container: str | None) -> ct.ProcessSpec:
        """The process environment (env, work dir, mounts) a command exec'd in a running container gets;
        KeyError naming what is missing otherwise."""
        rt = self.runtime(namespace, pod)
        c = rt.container(container)
        spec = rt.specs.get(c.name)
        if spec is None or c.running is None:
            raise KeyError(f'container not found ("{c.name}")')
        return spec
