"""kopf registrations: each handler passes the event to the controller (`tfjob_operator.controller`). Nothing
here decides or keeps state.

Run with `tfjob operator` (settings from `TFJOB_*`) or `kopf run -m tfjob_operator.serving.handlers --all-namespaces`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from typing import Any

import kopf

from tfjob_operator.api import apigroups, constants
from tfjob_operator.controller import JobController, informer
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.kube import Kube, RetryPolicy, load_api_client
from tfjob_operator.metrics import Metrics
from tfjob_operator.serving import addressing

log = logging.getLogger("tfjob_operator")

#: Seconds an object's kopf worker waits for its next event before exiting (a later event starts a new one).
KOPF_WORKER_IDLE_SECONDS = 1.0


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf builds an object's diff-base (its essence: a deep copy of the body, cleared by another deep copy) on
    every event of every watched object, for changing handlers only. None are registered (watching handlers and
    indices alone), so an empty essence is built (building it took an eighth of the event loop's time in a burst
    of pod events)."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Apply operator settings to kopf, start /metrics and the controller."""
    ops: OperatorSettings = getattr(memo, "settings", None) or OperatorSettings()
    if not getattr(memo, "addressing_resolved", False):  # under `kopf run`: `tfjob operator` resolved it already
        api = load_api_client()
        try:
            chosen = await addressing.resolve(Kube(api, RetryPolicy(timeout=ops.request_timeout)), ops.addressing)
        except addressing.AddressingMismatch as exc:
            raise kopf.PermanentError(str(exc)) from None
        finally:
            api.close()
        ops = ops.model_copy(update={"addressing": chosen})
        memo.addressing_resolved = True
    memo.settings = ops
    logging.getLogger().setLevel(ops.log_level)
    # kopf sends it as the watch's timeoutSeconds, which kube-apiserver parses as a whole number ("300.0" is a 400)
    settings.watching.server_timeout = max(1, round(ops.watch_server_timeout))
    settings.watching.client_timeout = ops.watch_client_timeout
    settings.networking.request_timeout = ops.request_timeout
    # TFJobs are listed (at start, and after a watch expired) in pages of 500, as client-go's pager does: kopf
    # handles each page before it asks for the next, so a start holds one page, not 10,000 decoded jobs at once
    # (about 95 MB decoded and 20 MB of JSON text more at its peak). A page's 410 would stop kopf (client-go's
    # pager lists again); a continue token lives until etcd's compaction (5 minutes), and the 20 pages of 10,000
    # jobs take seconds.
    settings.watching.chunk_size = informer.PAGE_SIZE
    settings.networking.error_backoffs = [ops.retry_backoff * 2**i for i in range(ops.retry_attempts)]
    settings.posting.enabled = ops.post_kopf_events
    # kopf's per-object worker holds its object's last raw event (managedFields and all) until it has been idle
    # this long: in a burst of thousands of pods, 5 s (kopf's default) kept most of them alive at once.
    settings.queueing.idle_timeout = KOPF_WORKER_IDLE_SECONDS
    # Only watching handlers are registered, so kopf stores no progress nor diff-base: annotations (not status.kopf,
    # which the CRD's structural schema would prune) should a changing handler ever be added.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    settings.persistence.diffbase_storage = NoDiffBase()
    # Never kopf peering, even under `kopf run` without --standalone: a paused peer would still run the builtin
    # gang's admission loop. Several replicas take turns through leader election (`tfjob_operator.serving.leader`).
    settings.peering.standalone = True
    metrics = getattr(memo, "metrics", None) or Metrics()
    memo.metrics = metrics
    metrics.serve(ops.metrics_port, ops.metrics_host)
    controller = JobController.create(ops, metrics)
    # A warm standby (`runner.run_elected`) sets memo.leading once it holds the Lease: until then it lists and
    # watches like the leader, so its indexes are filled when it takes over, and acts on nothing.
    leading: asyncio.Event | None = getattr(memo, "leading", None)
    controller.start(leading=leading is None)
    # Pods are the controller's own watch (pod_index), listed here: kopf starts its TFJob watch after start-up, so
    # every reconcile reads a listed pod index.
    await controller.watch_pods()
    memo.controller = controller
    log.info("tfjob operator started: namespaces=%s addressing=%s gang=%s%s", ops.namespaces or "all",
             ops.addressing.value if ops.addressing else "dns", ops.gang_backend,
             "" if leading is None else " (standby: it watches, and acts once it holds the Lease)")
    if leading is not None:
        memo.lead_when_elected = asyncio.create_task(_lead_when(leading, controller), name="lead when elected")


async def _lead_when(leading: asyncio.Event, controller: JobController) -> None:
    await leading.wait()
    log.info("leading: %d TFJobs and %d jobs' pods in the indexes, reconciling those not settled",
             len(controller.jobs), len(controller.pods))
    controller.lead()


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    controller: JobController | None = getattr(memo, "controller", None)
    if controller is not None:
        await controller.stop()
    # A warm standby's kopf took SIGTERM itself: tell the leader election now, so the Lease is released at once
    # (kopf would first give every task started after it, the election's among them, 5 s to end).
    stopping: threading.Event | None = getattr(memo, "stopping", None)
    if stopping is not None:
        stopping.set()


@kopf.on.event(constants.PLURAL, group=constants.GROUP, version=constants.VERSION)
async def tfjob_event(type: str | None, namespace: str | None, name: str, memo: Any, **kwargs: Any) -> None:
    """A TFJob was listed at start, created or changed: reconcile it (a quiet reconcile writes nothing). A deleted
    one is forgotten (its pods and Service go by garbage collection; no finalizer needed).

    Watching handlers only (no on.create/update/resume): kopf then keeps no handler progress and no diff-base
    annotation on the job, which would cost a PATCH per job each time. Reconcile is level-triggered anyway."""
    controller = _bound(memo)
    key = (namespace or "default", name)
    if type == "DELETED":
        controller.job_gone(key, kwargs["body"])
    else:
        controller.job_seen(key, kwargs["body"])
        # kopf reports a listed object (at start, and again after an expired watch) with type None.
        version = (kwargs["body"].get("metadata") or {}).get("resourceVersion")
        controller.job_event(key, version, listed=type is None)


def register_kubeflow_api(registry: kopf.OperatorRegistry | None = None) -> None:
    """Serve Kubeflow's `kubeflow.org/v1` TFJobs with the same handlers (TFJOB_KUBEFLOW_API managed or all).
    Registered only then: watching a group the operator may not read would fail on RBAC."""
    group = apigroups.KUBEFLOW
    where: dict[str, Any] = {"group": group.group, "version": group.version, "registry": registry}

    kopf.on.event(group.plural, **where)(tfjob_event)


def _bound(memo: Any) -> JobController:
    """The controller, once start-up made it."""
    controller: JobController | None = getattr(memo, "controller", None)
    if controller is None:
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return controller
