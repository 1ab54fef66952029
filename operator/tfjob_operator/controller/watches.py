"""The operator's own watches (`informer`): TFJob pods for the pod index, and, for the builtin gang backend's
admission loop, nodes and every pod. Under the builtin backend one watch of every pod feeds both: each pod event
is decoded once, not twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tfjob_operator import constants
from tfjob_operator.gang.backends import released_by_operator
from tfjob_operator.informer import Informer, OnEvent
from tfjob_operator.kube import Kube, KubeError, pods_path
from tfjob_operator.settings import OperatorSettings

log = logging.getLogger("tfjob_operator")


class Watches:
    """Starts and stops the watches; `on_tfjob_pod` receives every pod event that may be a TFJob pod's."""

    def __init__(self, settings: OperatorSettings, kube: Kube, on_tfjob_pod: OnEvent) -> None:
        self.settings = settings
        self.kube = kube
        self._on_tfjob_pod = on_tfjob_pod
        self.informers: list[Informer] = []

    @property
    def one_pod_watch(self) -> bool:
        """Whether the admission loop's watch of every pod (builtin backend, started with the operator) feeds the
        pod index too: one watch, not two."""
        return released_by_operator(self.settings.gang_backend)

    async def watch_tfjob_pods(self) -> None:
        """Only TFJob pods (label selector), in the watched namespaces: listed before it returns, then followed."""
        paths = [pods_path(namespace) for namespace in self.settings.namespaces] or ["/api/v1/pods"]
        for path in paths:
            informer = Informer(self.kube, path, self._on_tfjob_pod, name=f"TFJob pods ({path})",
                                selector=constants.LABEL_JOB_NAME)
            await informer.start()
            self.informers.append(informer)

    async def watch_cluster(self, on_node: OnEvent, on_pod: OnEvent) -> None:
        """Watch nodes and every pod for the admission loop's free capacity: cluster-wide, or only the watched
        namespaces' pods if the operator may not read pods cluster-wide (the watchdog covers the rest)."""
        nodes = Informer(self.kube, "/api/v1/nodes", on_node, name="nodes")
        await nodes.start()
        self.informers.append(nodes)
        if self.one_pod_watch:
            admission_on_pod, on_tfjob_pod = on_pod, self._on_tfjob_pod

            def on_pod(event_type: str, pod: Mapping[str, Any]) -> None:
                on_tfjob_pod(event_type, pod)
                admission_on_pod(event_type, pod)

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
        for informer in self.informers:
            informer.stop()
