"""A pod's status as the kubelet reports it, and the writer that sends it (kubelet's status manager).

The status is computed from the pod worker's containers when a write goes out, not when it was asked for,
so a pod waiting for a write slot sends its latest state and skips the ones it passed through; a status
equal to the last one sent is not written again. Writes are strategic-merge patches of `pods/status`, so
conditions other writers own survive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import aiohttp

from kubelocal import containers as ct
from kubelocal.kubeclient import STRATEGIC_MERGE_PATCH, ApiError, KubeClient, now_rfc3339

from .container import Container
from .rules import pod_phase

#: A status write that failed five times (timeouts or server errors under load) is tried again this often, as the
#: kubelet's status manager syncs every pod's status every 10 s: a pod whose state does not change again (a
#: simulated pod running until deleted) would otherwise stay Pending on the server for good.
STATUS_RESYNC_SECONDS = 10.0

log = logging.getLogger(__name__)


class PodState(Protocol):
    """What the status is computed from: the pod worker's view of its pod."""

    namespace: str
    name: str
    restart_policy: str
    start_time: str
    initialized: bool
    terminal: bool
    abandoned: bool
    reason: str | None
    message: str | None
    pod_ip: str | None
    extra_conditions: list[dict[str, Any]]
    stopping: asyncio.Event

    @property
    def init_containers(self) -> Sequence[Container]: ...

    @property
    def containers(self) -> Sequence[Container]: ...


def phase(pod: PodState) -> str:
    """The pod phase: evicted pods fail; init containers gate the app containers; then kubelet's getPhase."""
    if pod.reason == "Evicted":
        return "Failed"
    if not pod.initialized:
        failed_init = any(c.runs and c.runs[-1].code not in (None, 0) and not c.backing_off
                          for c in pod.init_containers)
        if pod.terminal and (failed_init or pod.stopping.is_set()):
            return "Failed"
        return "Pending"
    return pod_phase(pod.restart_policy, [c.status() for c in pod.containers], terminal=pod.terminal)


class StatusManager:
    """Computes and writes one pod's status; `mark()` asks for a write, `run()` does them one at a time."""

    def __init__(self, pod: PodState, client: KubeClient, slots: asyncio.Semaphore) -> None:
        self.pod = pod
        self.client = client
        #: Shared by every pod of the kubelet: the status writes in flight at once.
        self.slots = slots
        self._dirty = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._last_sent: Any = None
        #: The last push gave up: `run` tries again after STATUS_RESYNC_SECONDS even if nothing is marked.
        self._unsent = False
        self._transitions: dict[str, tuple[str, str]] = {}

    def mark(self) -> None:
        self._dirty.set()

    def _condition(self, ctype: str, ok: bool, reason: str | None = None, message: str | None = None
                   ) -> dict[str, Any]:
        status = "True" if ok else "False"
        previous = self._transitions.get(ctype)
        if previous is None or previous[0] != status:
            self._transitions[ctype] = (status, now_rfc3339())
        # reason/message always present (null clears them), because the patch merges conditions by type.
        return {"type": ctype, "status": status, "lastProbeTime": None,
                "lastTransitionTime": self._transitions[ctype][1], "reason": reason, "message": message}

    def status(self) -> dict[str, Any]:
        """The status this kubelet reports (conditions it does not own are left to the server's merge)."""
        pod = self.pod
        current = phase(pod)
        statuses = [c.status() for c in pod.containers]
        finished = current in ("Succeeded", "Failed")
        unready = [s["name"] for s in statuses if not s["ready"]]
        if finished:
            ready_reason: tuple[str | None, str | None] = ("PodCompleted", None)
        elif unready:
            ready_reason = ("ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
        else:
            ready_reason = (None, None)
        ready = not finished and not unready
        init_pending = [c.name for c in pod.init_containers if not (c.runs and c.runs[-1].code == 0)]
        conditions = [
            self._condition("PodReadyToStartContainers", not finished),
            self._condition("Initialized", pod.initialized, *(
                (None, None) if pod.initialized else
                ("ContainersNotInitialized", f"containers with incomplete status: [{' '.join(init_pending)}]"))),
            self._condition("Ready", ready, *ready_reason),
            self._condition("ContainersReady", ready, *ready_reason),
            *pod.extra_conditions,
        ]
        status: dict[str, Any] = {
            "phase": current,
            "conditions": conditions,
            "hostIP": ct.LOCAL_IP,
            "hostIPs": [{"ip": ct.LOCAL_IP}],
            **({"podIP": pod.pod_ip, "podIPs": [{"ip": pod.pod_ip}]} if pod.pod_ip else {}),
            "startTime": pod.start_time,
            "containerStatuses": statuses,
        }
        if pod.init_containers:
            status["initContainerStatuses"] = [c.status() for c in pod.init_containers]
        if pod.reason:
            status["reason"] = pod.reason
        if pod.message:
            status["message"] = pod.message
        return status

    async def push(self) -> None:
        """Send the current status unless it is what we sent last."""
        pod = self.pod
        async with self._write_lock:
            path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
            for attempt in range(5):
                async with self.slots:
                    if pod.abandoned:
                        return
                    body = {"status": self.status()}  # the state now, not when the write was asked for
                    if body == self._last_sent:
                        self._unsent = False
                        return
                    try:
                        await self.client.patch(path, body, STRATEGIC_MERGE_PATCH)
                        self._last_sent, self._unsent = body, False
                        return
                    except ApiError as exc:
                        if exc.status in (404, 409, 410, 422):
                            if exc.status == 422:
                                log.warning("pod %s/%s: status rejected: %s", pod.namespace, pod.name, exc)
                            self._unsent = False
                            return
                    except (TimeoutError, OSError, aiohttp.ClientError) as exc:  # a dropped keep-alive too
                        log.debug("pod %s/%s: status update failed (%s), retrying", pod.namespace, pod.name, exc)
                await asyncio.sleep(0.1 * (attempt + 1))
            self._unsent = True
            log.warning("pod %s/%s: status update failed 5 times; again in %gs", pod.namespace, pod.name,
                        STATUS_RESYNC_SECONDS)

    async def run(self) -> None:
        """Write whenever marked, until cancelled."""
        while True:
            try:
                await asyncio.wait_for(self._dirty.wait(), STATUS_RESYNC_SECONDS if self._unsent else None)
            except TimeoutError:
                pass
            self._dirty.clear()
            await self.push()
