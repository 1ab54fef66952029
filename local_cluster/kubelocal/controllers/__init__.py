"""The controllers a cluster runs beside its API server (kube-controller-manager's), one module each.

Each talks to the API server only through its HTTP API. `ControllerManager` starts and stops them
together; `ControllerSettings` holds the knobs tests and `tfjob local` turn.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubelocal.kubeclient import KubeClient

from .deployment import DeploymentController
from .garbage_collector import GarbageCollector
from .job import JobController
from .namespace import NamespaceController
from .node_lifecycle import NodeLifecycleController
from .replicaset import ReplicaSetController
from .runtime import Controller
from .serviceaccounts import RootCAPublisher, ServiceAccountController

USER_AGENT = "kubelocal-controller-manager"


@dataclass(frozen=True)
class ControllerSettings:
    #: Seconds the garbage collector waits before acting on a vanished owner (0: as soon as it sees it).
    gc_delay: float = 0.0
    #: A node whose Lease is older than this is unreachable: kube's node-monitor-grace-period (50 s since Kubernetes
    #: 1.32, kubernetes PR #126287; 40 s before). Tests that lose nodes on purpose set a few seconds; a shorter
    #: default marks busy nodes unreachable under load (a heartbeat delayed while the machine is saturated) and
    #: evicts healthy pods. The operator's TFJOB_NODE_MONITOR_GRACE says the same value (tfjob local passes it).
    node_monitor_grace: float = 50.0
    #: Upper bound on tolerationSeconds for NoExecute eviction (None: honour them, e.g. 300 s).
    toleration_cap: float | None = 0.0


class ControllerManager:
    """Starts every controller against one API server; `await start()`, `await stop()`."""

    def __init__(self, url: str, ca_pem: str, settings: ControllerSettings | None = None) -> None:
        self.settings = settings or ControllerSettings()
        # The garbage collector alone keeps one watch open per resource type.
        self.client = KubeClient(url, USER_AGENT, max_connections=160)
        s = self.settings
        self.garbage_collector = GarbageCollector(self.client, delay=s.gc_delay)
        self.namespaces = NamespaceController(self.client)
        self.node_lifecycle = NodeLifecycleController(self.client, grace=s.node_monitor_grace,
                                                      toleration_cap=s.toleration_cap)
        self.controllers: list[Controller] = [
            self.garbage_collector, self.namespaces, ServiceAccountController(self.client),
            RootCAPublisher(self.client, ca_pem), DeploymentController(self.client),
            ReplicaSetController(self.client), JobController(self.client), self.node_lifecycle,
        ]

    async def start(self) -> None:
        await asyncio.gather(*(c.start() for c in self.controllers))

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.controllers), return_exceptions=True)
        await self.client.close()


__all__ = ["USER_AGENT", "ControllerManager", "ControllerSettings"]
