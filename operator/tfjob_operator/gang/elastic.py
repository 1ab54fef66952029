"""Elastic gangs as admission reads them: a job's worker bounds (``spec.elasticPolicy`` on the Worker type), the
width its pods were created with, the gang at another width, and the widest width in [min, max] that fits.

Pure: no I/O. :func:`elastic_bounds` is the one place that reads the API field; the builtin pass
(`gang.queue`) and the admission loop's answer to the reconcile (`AdmissionLoop.fits_workers`) use the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from tfjob_operator.api import ReplicaType, TFJob, constants
from tfjob_operator.gang import resources
from tfjob_operator.gang.caches import PassCapacity
from tfjob_operator.gang.cluster import Cluster
from tfjob_operator.gang.placement import widest_in
from tfjob_operator.gang.request import GangRequest, units

_WORKER = ReplicaType.WORKER


def elastic_bounds(job: TFJob) -> tuple[int, int] | None:
    """(minReplicas, maxReplicas) of the job's workers when it has ``spec.elasticPolicy``, else None (rigid).
    A bound left out is the Worker replicas; min is at least 1 and max at least min."""
    policy = getattr(job.spec, "elasticPolicy", None)
    if policy is None:
        return None
    replicas = next((spec.replicas for rtype, spec in job.replica_specs() if rtype is _WORKER), 1)
    lo = getattr(policy, "minReplicas", None)
    hi = getattr(policy, "maxReplicas", None)
    low = max(1, int(replicas if lo is None else lo))
    return low, max(low, int(replicas if hi is None else hi))


def is_worker(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(constants.LABEL_REPLICA_TYPE) == _WORKER.tf_name


def rendered_sizes(pods: Iterable[Mapping[str, Any]]) -> set[int]:
    """How many pods the gang was created with, as each pod records it (annotation tfjob.dev/gang-replicas): one
    value for a gang created at one width, two while pods of an older width are still there."""
    sizes: set[int] = set()
    for pod in pods:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(constants.ANNOTATION_GANG_REPLICAS)
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            continue
        if isinstance(value, dict):
            sizes.add(sum(int(v) for v in value.values() if isinstance(v, int)))
    return sizes


def gang_at(gang: GangRequest, width: int) -> GangRequest:
    """The gang with ``width`` workers: its other pods as they are, workers copied from its first worker (workers
    are interchangeable: one template). Unchanged when it has no worker."""
    workers = [p for p in gang.pods if is_worker(p)]
    if not workers:
        return gang
    others = tuple(p for p in gang.pods if not is_worker(p))
    template = workers[0]
    prefix = str((template.get("metadata") or {}).get("name", "worker")).rsplit("-", 1)[0]
    taken = {(p.get("metadata") or {}).get("name") for p in gang.pods}
    names = (name for i in range(len(workers) + width) if (name := f"{prefix}-{i}") not in taken)
    copies = tuple(workers[:width]) + tuple(
        {**template, "metadata": {**(template.get("metadata") or {}), "name": next(names)}}
        for _ in range(width - len(workers))
    )
    return GangRequest(gang.key, others + copies, priority=gang.priority, arrival=gang.arrival,
                       domain_label=gang.domain_label)


def widths(gang: GangRequest) -> Callable[[int], GangRequest]:
    """``gang_at`` for one gang, each width built once: a pass probes widths by binary search, and a request's
    pods are parsed when it is built."""
    made: dict[int, GangRequest] = {}

    def at(width: int) -> GangRequest:
        got = made.get(width)
        if got is None:
            got = made[width] = gang_at(gang, width)
        return got

    return at


def held_by(pods: Iterable[Mapping[str, Any]], holds_on: Any = resources.bound_node) -> dict[str, resources.Resources]:
    """Node → what the pods hold there (``holds_on`` says where a pod counts; the builtin backend's also counts
    pods it released but that are not bound yet)."""
    held: dict[str, resources.Resources] = {}
    for pod in pods:
        node = holds_on(pod)
        if node:
            held[node] = resources.add(held.get(node, {}), resources.scheduling_demand(pod))
    return held


def widest_fit(cluster: Cluster, gang: GangRequest, bounds: tuple[int, int],
               own: Mapping[str, Mapping[str, Decimal]] | None = None) -> int | None:
    """The widest worker count in ``bounds`` at which ``gang`` (any width: workers are copied) fits the free
    capacity of ``cluster`` (not modified), counting what ``own`` holds (node → resources: the job's own running
    pods) as free for it; None when not even the minimum fits. All or nothing, as the pass places it."""
    work = PassCapacity(cluster)
    for node_name, amounts in (own or {}).items():
        n = cluster.node_index.get(node_name)
        if n is None:
            continue
        for name, value in amounts.items():
            i = cluster.index.get(name)
            if i is not None and value > 0:
                work.avail[n, i] = min(int(work.avail[n, i]) + units(value, up=True), int(cluster.alloc[n, i]))
    if not any(is_worker(p) for p in gang.pods):
        return None
    found = widest_in(work, widths(gang), *bounds)
    return None if found is None else found[0]


def worker_count(pods: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for p in pods if is_worker(p))

