"""The upstream plane's node agents: a `ProcessKubelet` per process node, each with that node's own credentials
(as each node of a cluster runs its own kubelet), and one for every simulated node (as kwok's controller does for
its fake nodes, with an identity of its own). `Kubelets` puts them behind the one kubelet's interface callers of
`LocalCluster.kubelet` use: a pod's faults go to the agent running it, a node's to the agent serving it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable

from kubelocal.kubelet import ProcessKubelet
from kubelocal.kubelet.cgroups import MemoryCgroups
from kubelocal.kubelet.faults import DEFAULT_EVICTION_MESSAGE
from kubelocal.kubelet.pod_worker import PodWorker


class Kubelets:
    """Several kubelets as one: `runtime`, `workers`, and the fault controls of `ProcessKubelet`."""

    def __init__(self, agents: Iterable[ProcessKubelet]) -> None:
        self.agents = list(agents)

    def _of_pod(self, namespace: str, pod: str) -> ProcessKubelet:
        for agent in self.agents:
            try:
                agent.runtime(namespace, pod)
            except KeyError:
                continue
            return agent
        raise KeyError(f'pod "{pod}" is not running on any kubelet (namespace {namespace})')

    def _of_node(self, node: str) -> ProcessKubelet:
        for agent in self.agents:
            if any(n["metadata"]["name"] == node for n in agent.declared_nodes):
                return agent
        raise KeyError(f"node {node!r} is served by no kubelet of this plane")

    def runtime(self, namespace: str, pod: str) -> PodWorker:
        return self._of_pod(namespace, pod).runtime(namespace, pod)

    def workers(self) -> list[PodWorker]:
        return [w for agent in self.agents for w in agent.workers()]

    def pods(self) -> list[PodWorker]:
        return self.workers()

    @property
    def memory(self) -> MemoryCgroups:
        """How containers' memory limits are enforced (each agent detects the same)."""
        if not self.agents:
            return MemoryCgroups(None, 0, "not enforced: no kubelet")
        return self.agents[0].memory

    @property
    def lost_nodes(self) -> set[str]:
        return set().union(*(agent.lost_nodes for agent in self.agents)) if self.agents else set()

    async def evict(self, namespace: str, pod: str, message: str = DEFAULT_EVICTION_MESSAGE, *,
                    grace_seconds: float = 0.0) -> None:
        await self._of_pod(namespace, pod).evict(namespace, pod, message, grace_seconds=grace_seconds)

    async def kill_container(self, namespace: str, pod: str, sig: int = signal.SIGKILL,
                             container: str | None = None, why: str = "a fault injection") -> None:
        await self._of_pod(namespace, pod).kill_container(namespace, pod, sig, container, why)

    async def lose_node(self, node: str) -> None:
        await self._of_node(node).lose_node(node)

    async def restore_node(self, node: str) -> None:
        await self._of_node(node).restore_node(node)

    async def partition(self, namespace: str, pod: str) -> None:
        await self._of_pod(namespace, pod).partition(namespace, pod)

    async def heal(self, namespace: str, pod: str) -> None:
        await self._of_pod(namespace, pod).heal(namespace, pod)

    async def shape(self, namespace: str, pod: str, *, delay_ms: float = 0.0, loss_percent: float = 0.0) -> None:
        await self._of_pod(namespace, pod).shape(namespace, pod, delay_ms=delay_ms, loss_percent=loss_percent)

    async def unshape(self, namespace: str, pod: str) -> None:
        await self._of_pod(namespace, pod).unshape(namespace, pod)

    async def start(self) -> None:
        await asyncio.gather(*(agent.start() for agent in self.agents))

    async def stop(self) -> None:
        await asyncio.gather(*(agent.stop() for agent in self.agents), return_exceptions=True)
