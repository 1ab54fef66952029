"""The operator's own watches (`informer`): TFJob pods for the pod index, and, for the builtin gang backend's
admission loop, nodes and every pod. Every pod event reaches `on_pod` once: under the builtin backend one watch of
every pod feeds both the index and the loop (each event decoded once); otherwise the TFJob pods' watch does, and
the watch of every pod, once the loop asks for it, hands on only the pods that one does not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from tfjob_operator.api import constants
from tfjob_operator.controller.informer import Informer, OnEvent
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.gang.backends import released_by_operator
from tfjob_operator.kube import Kube, KubeError, pods_path

log = logging.getLogger("tfjob_operator")


class Watches:
    """Starts and stops the watches; `on_pod` receives each pod event once, `on_node` each node event."""

    def __init__(self, settings: OperatorSettings, kube: Kube, on_pod: OnEvent, on_node: OnEvent) -> None:
        self.settings = settings
        self.kube = kube
        self._on_pod = on_pod
        self._on_node = on_node
        self.informers: list[Informer] = []
        self._tfjob_pods = False
        self._cluster: asyncio.Future[None] | None = None

    @property
    def one_pod_watch(self) -> bool:
        """Whether the watch of every pod (builtin backend, started with the operator) feeds the pod index too: one
        watch, not two."""
        return released_by_operator(self.settings.gang_backend)

    async def watch_pods(self) -> None:
        """The pods the index needs, listed before it returns, then followed: every pod under the builtin backend
        (with the nodes), else only TFJob pods (label selector) in the watched namespaces."""
        if self.one_pod_watch:
            await self.watch_cluster()
            return
        self._tfjob_pods = True
        for path in [pods_path(namespace) for namespace in self.settings.namespaces] or ["/api/v1/pods"]:
            informer = Informer(self.kube, path, self._on_pod, name=f"TFJob pods ({path})",
                                selector=constants.LABEL_JOB_NAME)
            await informer.start()
            self.informers.append(informer)

    def watch_cluster(self) -> asyncio.Future[None]:
        """Watch nodes and every pod, once (again after a failure to start): cluster-wide, or only the watched
        namespaces' pods if the operator may not read pods cluster-wide (the watchdog covers the rest)."""
        if self._cluster is None or (self._cluster.done() and (
                self._cluster.cancelled() or self._cluster.exception() is not None)):
            self._cluster = asyncio.ensure_future(self._start_cluster())
            self._cluster.add_done_callback(_report_watch_failure)
        return self._cluster

    @property
    def cluster_listed(self) -> bool:
        """Whether the nodes and every pod have been listed (their watches started)."""
        return (self._cluster is not None and self._cluster.done() and not self._cluster.cancelled()
                and self._cluster.exception() is None)

    def _not_tfjob_watched(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """A pod of the watch of every pod that the TFJob pods' watch does not show too (it shows those once)."""
        meta = pod.get("metadata") or {}
        if constants.LABEL_JOB_NAME in (meta.get("labels") or {}) and (
                not self.settings.namespaces or (meta.get("namespace") or "default") in self.settings.namespaces):
            return
        self._on_pod(event_type, pod)

    async def _start_cluster(self) -> None:
        nodes = Informer(self.kube, "/api/v1/nodes", self._on_node, name="nodes")
        await nodes.start()
        self.informers.append(nodes)
        on_pod = self._not_tfjob_watched if self._tfjob_pods else self._on_pod
        pods = Informer(self.kube, "/api/v1/pods", on_pod, name="pods")
        try:
            await pods.start()
            self.informers.append(pods)
            return
        except KubeError as exc:
            if exc.status != 403 or not self.settings.namespaces:
                raise
            log.warning("cannot watch pods cluster-wide (%s): admission counts only the pods of %s", exc,
                        ", ".join(self.settings.namespaces))
        for namespace in self.settings.namespaces:
            informer = Informer(self.kube, pods_path(namespace), on_pod, name=f"pods in {namespace}")
            await informer.start()
            self.informers.append(informer)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.cancel()
        for informer in self.informers:
            informer.stop()


def _report_watch_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("cannot watch nodes and pods for gang admission (%s); the next pass tries again",
                    future.exception())
