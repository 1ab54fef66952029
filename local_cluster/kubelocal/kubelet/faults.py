"""Faults the tests inject through the kubelet: node-pressure eviction, a container killed (crash or OOM),
a node lost and restored, a pod's link cut or its packets delayed and dropped (on the pod network). Nothing
here runs unless a test or `tfjob local`'s chaos option asks for it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping
from typing import Any, Protocol

from kubelocal.kubeclient import now_rfc3339
from kubelocal.network import PodAttachment
from kubelocal.network import faults as link

from .network import PodNetworking
from .node_status import NodeStatus
from .pod_worker import PodWorker

DEFAULT_EVICTION_MESSAGE = "The node was low on resource: memory. "


class FaultTarget(Protocol):
    """What the faults act on: the kubelet's pod workers and its nodes' heartbeats."""

    max_grace_seconds: float
    lost_nodes: set[str]
    node_status: NodeStatus
    network: PodNetworking | None

    def runtime(self, namespace: str, pod: str) -> PodWorker: ...

    def workers(self) -> list[PodWorker]: ...

    def forget(self, rt: PodWorker) -> None: ...

    def resync_node(self, node: str) -> None: ...

    async def post_event(self, pod: Mapping[str, Any], kind: str, reason: str, message: str) -> None: ...


async def evict(kubelet: FaultTarget, namespace: str, pod: str, message: str = DEFAULT_EVICTION_MESSAGE, *,
                grace_seconds: float = 0.0) -> None:
    """Node-pressure eviction: stop the pod (hard eviction: no grace by default), phase Failed, reason
    Evicted, a DisruptionTarget condition; the pod object stays, as with a real kubelet."""
    rt = kubelet.runtime(namespace, pod)
    rt.reason, rt.message = "Evicted", message
    rt.extra_conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": message, "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}]
    await kubelet.post_event(rt.pod, "Warning", "Evicted", message)
    await rt.terminate(min(grace_seconds, kubelet.max_grace_seconds))
    await rt.push_status()


async def kill_container(kubelet: FaultTarget, namespace: str, pod: str, sig: int = signal.SIGKILL,
                         container: str | None = None, why: str = "a fault injection") -> None:
    """Signal a running container's process group, as a crash would; a run that ends by it reads as reason
    Killed, its message "Killed with SIGKILL by <why>" (never OOMKilled: only the kernel's OOM killer is that, see
    `cgroups`); the restartPolicy then applies."""
    rt = kubelet.runtime(namespace, pod)
    candidates = [rt.container(container)] if container else rt.all_containers
    for c in candidates:
        run = c.running
        if run is not None:
            run.killed_by(sig, why)
            rt.kill(run, sig)
            return
    raise KeyError(f"pod {namespace}/{pod} has no running container"
                   + (f" named {container}" if container else ""))


async def lose_node(kubelet: FaultTarget, node: str) -> None:
    """Node loss: the node's processes die at once and its kubelet goes silent (no Lease renewals, no
    status writes). The node lifecycle controller then marks it unreachable and its taint manager
    deletes its pods, which stay Terminating: no kubelet is left to confirm."""
    kubelet.lost_nodes.add(node)
    for rt in kubelet.workers():
        if rt.node == node:
            rt.abandon()
            kubelet.forget(rt)


async def restore_node(kubelet: FaultTarget, node: str) -> None:
    """The node comes back: its kubelet renews the Lease and posts Ready again (the node lifecycle
    controller then lifts the unreachable taints), confirms deletions that piled up and starts pods
    that are still meant to run."""
    kubelet.lost_nodes.discard(node)
    await kubelet.node_status.renew_lease(node)
    await kubelet.node_status.post_ready(node)
    kubelet.resync_node(node)


def _link(kubelet: FaultTarget, namespace: str, pod: str) -> tuple[PodNetworking, PodAttachment]:
    """The pod's link; KeyError when the pod is not running here or the plane has no pod network."""
    rt = kubelet.runtime(namespace, pod)
    if kubelet.network is None:
        raise KeyError(f"pod {namespace}/{pod}: the plane has no pod network (start it with pod_network on)")
    return kubelet.network, kubelet.network.attachment(rt.uid)


async def partition(kubelet: FaultTarget, namespace: str, pod: str) -> None:
    """Cut the pod off the network: its processes keep running, every packet to or from it is lost."""
    networking, att = _link(kubelet, namespace, pod)
    await asyncio.to_thread(link.cut, networking.net, att)


async def heal(kubelet: FaultTarget, namespace: str, pod: str) -> None:
    """Undo `partition`."""
    networking, att = _link(kubelet, namespace, pod)
    await asyncio.to_thread(link.heal, networking.net, att)


async def shape(kubelet: FaultTarget, namespace: str, pod: str, *, delay_ms: float = 0.0,
                loss_percent: float = 0.0) -> None:
    """Delay the pod's packets by `delay_ms` each way and drop `loss_percent` of them (tc netem or the relay)."""
    networking, att = _link(kubelet, namespace, pod)
    await asyncio.to_thread(lambda: link.shape(networking.net, att, delay_ms=delay_ms, loss_percent=loss_percent))


async def unshape(kubelet: FaultTarget, namespace: str, pod: str) -> None:
    """Undo `shape`."""
    networking, att = _link(kubelet, namespace, pod)
    await asyncio.to_thread(link.unshape, networking.net, att)
