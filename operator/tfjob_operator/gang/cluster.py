"""Free capacity as admission sees it: a node × resource matrix (:class:`Cluster`), and the same kept between
passes from pod and node events (:class:`ClusterState`).

Pure: no I/O. A pass reads a :class:`Cluster` and never mutates it; a simulator or the admission loop moves
capacity between passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from tfjob_operator.gang import resources
from tfjob_operator.gang.request import MAX_UNITS, GangRequest, PodClass, Requests, units
from tfjob_operator.gang.resources import GPU, bound_node

#: Node × resource matrix of amounts in thousandths; a 1-D array of node indexes.
Matrix = npt.NDArray[np.int64]
Indexes = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class _Node:
    name: str
    obj: Mapping[str, Any]
    labels: Mapping[str, str]


class Cluster:
    """Nodes with their free capacity as an integer matrix, plus caches of node eligibility.

    Build it with :meth:`from_objects`, or keep one with :class:`ClusterState`. A simulator may move capacity
    with :meth:`take` and :meth:`give` between passes; a pass never mutates it.
    """

    def __init__(self, nodes: Sequence[Mapping[str, Any]], used: Mapping[str, Mapping[str, Decimal]]):
        ordered = sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name", "")))
        allocs = [resources.node_allocatable(n) for n in ordered]
        # Every node has a pod count: one that does not report `pods` (a test's bare node) is taken as unbounded.
        allocs = [{resources.POD_COUNT: Decimal(MAX_UNITS), **a} for a in allocs]
        names: set[str] = set()
        for alloc in allocs:
            names.update(alloc)
        self.resource_names: tuple[str, ...] = tuple(sorted(names))
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.resource_names)}
        self.nodes: tuple[_Node, ...] = tuple(
            _Node(
                name=str((n.get("metadata") or {}).get("name", "")),
                obj=n,
                labels=dict((n.get("metadata") or {}).get("labels") or {}),
            )
            for n in ordered
        )
        self.alloc: Matrix = np.array(
            [[min(units(a.get(r, Decimal(0)), up=False), MAX_UNITS) for r in self.resource_names] for a in allocs],
            dtype=np.int64,
        ).reshape(len(ordered), len(self.resource_names))
        self.node_index: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        self.free: Matrix = self.alloc.copy()
        #: Allocatable, at least 1, as floats: the divisor of the best-fit share (computed once, not per placement).
        self.divisors: Floats = np.maximum(self.alloc, 1).astype(np.float64)
        #: The same row by row, for keys computed one node at a time.
        self.divisor_rows: list[list[float]] = self.divisors.tolist()
        for node_name, amounts in used.items():
            if node_name in self.node_index:
                self.take(node_name, amounts)
        self._eligible: dict[str, Indexes] = {}
        self._domains: dict[str, dict[str, Indexes]] = {}
        self._fits_empty: dict[tuple[Any, ...], bool] = {}
        self._requests: dict[Requests, tuple[Indexes, Indexes] | None] = {}
        self.gpu = self.index.get(GPU)
        self.cpu = self.index.get("cpu")
        self.memory = self.index.get("memory")

    @classmethod
    def from_objects(
        cls,
        nodes: Sequence[Mapping[str, Any]],
        bound_pods: Iterable[Mapping[str, Any]] = (),
        reservations: Mapping[str, Mapping[str, Decimal]] | None = None,
    ) -> Cluster:
        """Free = allocatable − requests of bound non-terminal pods − reservations (node → resources)."""
        used = resources.used_on_nodes(bound_pods)
        for node_name, amounts in (reservations or {}).items():
            used[node_name] = resources.add(used.get(node_name, {}), amounts)
        return cls(nodes, used)

    def _move(self, node_name: str, amounts: Mapping[str, Decimal], sign: int) -> None:
        row = self.free[self.node_index[node_name]]
        for name, value in amounts.items():
            if name in self.index and value > 0:
                row[self.index[name]] += sign * min(units(value, up=True), MAX_UNITS)

    def take(self, node_name: str, amounts: Mapping[str, Decimal]) -> None:
        """Mark capacity on a node as used (a pod bound there)."""
        self._move(node_name, amounts, -1)

    def give(self, node_name: str, amounts: Mapping[str, Decimal]) -> None:
        """Return capacity to a node (a pod there finished)."""
        self._move(node_name, amounts, +1)

    def eligible(self, cls: PodClass) -> Indexes:
        """Indexes of nodes whose readiness, labels and taints accept the class's pods (cached)."""
        found = self._eligible.get(cls.signature)
        if found is None:
            found = np.array(
                [i for i, n in enumerate(self.nodes) if resources.node_accepts(cls.template, n.obj)], dtype=np.int64
            )
            self._eligible[cls.signature] = found
        return found

    def domains(self, label: str) -> dict[str, Indexes]:
        """Node indexes grouped by their value of ``label`` (nodes without it are left out)."""
        found = self._domains.get(label)
        if found is None:
            groups: dict[str, list[int]] = {}
            for i, n in enumerate(self.nodes):
                if label in n.labels:
                    groups.setdefault(n.labels[label], []).append(i)
            found = {value: np.array(idx, dtype=np.int64) for value, idx in sorted(groups.items())}
            self._domains[label] = found
        return found

    def requests(self, cls: PodClass) -> tuple[Indexes, Indexes] | None:
        """The class's requests as (resource indexes, amounts); None if no node offers one of them."""
        if cls.requests in self._requests:
            return self._requests[cls.requests]
        found: tuple[Indexes, Indexes] | None = None
        if all(name in self.index for name, _ in cls.requests):
            found = (
                np.array([self.index[name] for name, _ in cls.requests], dtype=np.int64),
                np.array([min(amount, MAX_UNITS) for _, amount in cls.requests], dtype=np.int64),
            )
        self._requests[cls.requests] = found
        return found

    def allowed(self, cls: PodClass, group: Indexes | None) -> Indexes:
        eligible = self.eligible(cls)
        return eligible if group is None else np.intersect1d(eligible, group, assume_unique=True)

    def fits_empty(self, gang: GangRequest) -> bool:
        """Whether the gang fits on these nodes were they empty (cached; a no means wait forever)."""
        key = (gang.shape, gang.domain_label)
        found = self._fits_empty.get(key)
        if found is None:
            groups = [None] if gang.domain_label is None else list(self.domains(gang.domain_label).values())
            found = any(self.fill(gang, self.alloc, group, ranked=False) is not None for group in groups)
            self._fits_empty[key] = found
        return found

    def fill(self, gang: GangRequest, capacity: Matrix, group: Indexes | None, *, ranked: bool) -> Matrix | None:
        """Greedy placement of the gang on ``capacity``: node order (ranked: most free GPUs now first)."""
        plan = np.zeros_like(self.alloc)
        for cls in gang.classes:
            req = self.requests(cls)
            if req is None:
                return None
            idx, amounts = req
            allowed = self.allowed(cls, group)
            if ranked and allowed.size:
                gpu = self.free[allowed, self.gpu] if self.gpu is not None else np.zeros(allowed.size, np.int64)
                cpu = self.free[allowed, self.cpu] if self.cpu is not None else np.zeros(allowed.size, np.int64)
                allowed = allowed[np.lexsort((allowed, -cpu, -gpu))]
            remaining = len(cls.pod_names)
            rows = capacity[allowed] - plan[allowed]
            counts = (rows[:, idx] // amounts).min(axis=1) if idx.size else np.full(allowed.size, remaining)
            for n, count in zip(allowed.tolist(), counts.tolist(), strict=True):
                take = min(count, remaining)
                if take > 0:
                    plan[n, idx] += amounts * take
                    remaining -= take
                    if not remaining:
                        break
            if remaining:
                return None
        return plan


def _node_facts(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What placement reads of a node (allocatable, labels, taints, readiness): a status heartbeat that changes
    none of it leaves the kept matrix as it is."""
    return (resources.node_allocatable(node), (node.get("metadata") or {}).get("labels") or {},
            (node.get("spec") or {}).get("taints") or [], resources.node_is_ready(node))


class ClusterState:
    """Free capacity kept between passes and moved by pod and node events, instead of rebuilt from lists per pass.

    Pod events (bound, finished, deleted) move one pod's requests in and out of the kept :class:`Cluster` (its
    requests are parsed once, when it starts holding capacity); node events that change what placement reads
    (rare) drop the matrix, and the next :meth:`cluster` rebuilds it from the kept nodes and pods. ``holds_on``
    says on which node a pod's requests count (default: its node once bound, until it ends); the builtin backend
    also counts pods it released but that are not bound yet. :meth:`reserve` layers holds the caller knows of
    before any event shows them (its own releases). The result equals ``Cluster.from_objects`` over the same nodes,
    pods and reservations (pinned by a property test).
    """

    def __init__(self, holds_on: Callable[[Mapping[str, Any]], str | None] = bound_node) -> None:
        self._holds_on = holds_on
        self._nodes: dict[str, Mapping[str, Any]] = {}
        #: pod key (namespace/name) → (node name, requests) for every pod that holds capacity.
        self._held: dict[str, tuple[str, resources.Resources]] = {}
        #: pod key → (node name, requests) reserved by the caller (see reserve).
        self._reserved: dict[str, tuple[str, resources.Resources]] = {}
        self._cluster: Cluster | None = None
        #: Times the matrix was rebuilt (node changes); the loop reports it.
        self.rebuilds = 0

    def node_event(self, event_type: str, node: Mapping[str, Any]) -> bool:
        """Keep the node; True when something placement reads changed (the matrix is rebuilt at the next pass)."""
        name = str((node.get("metadata") or {}).get("name", ""))
        old = self._nodes.get(name)
        if event_type == "DELETED":
            if self._nodes.pop(name, None) is None:
                return False
        else:
            self._nodes[name] = node
            if old is not None and _node_facts(old) == _node_facts(node):
                return False  # a heartbeat: nothing placement reads changed
        self._cluster = None  # allocatable, labels, taints or readiness changed: rebuild on demand
        return True

    def pod_event(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Move the pod's hold; True when capacity it held was given back (it ended, went, or moved)."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        node_name = None if event_type == "DELETED" else self._holds_on(pod)
        # Parsed once per event, not per pass; requests may change in place (pod resize), so compare them.
        return self._set(self._held, key, (node_name, resources.scheduling_demand(pod)) if node_name else None)

    def holds(self, key: str) -> bool:
        """Whether pod ``key`` (namespace/name) holds capacity as its last event showed it."""
        return key in self._held

    def reserve(self, key: str, node_name: str, amounts: resources.Resources) -> None:
        """Count ``amounts`` on ``node_name`` for pod ``key`` until :meth:`unreserve` (e.g. a release the watch has
        not shown yet)."""
        self._set(self._reserved, key, (node_name, dict(amounts)))

    def unreserve(self, key: str) -> None:
        self._set(self._reserved, key, None)

    def _set(self, table: dict[str, tuple[str, resources.Resources]], key: str,
             entry: tuple[str, resources.Resources] | None) -> bool:
        old = table.get(key)
        if entry == old:
            return False
        if old is not None:
            del table[key]
            if self._cluster is not None and old[0] in self._cluster.node_index:
                self._cluster.give(old[0], old[1])
        if entry is not None:
            table[key] = entry
            if self._cluster is not None and entry[0] in self._cluster.node_index:
                self._cluster.take(entry[0], entry[1])
        return old is not None

    def cluster(self) -> Cluster:
        """The kept Cluster (rebuilt only after a node change). Passes must not mutate it."""
        if self._cluster is None:
            cluster = Cluster(list(self._nodes.values()), {})
            for node_name, amounts in [*self._held.values(), *self._reserved.values()]:
                if node_name in cluster.node_index:
                    cluster.take(node_name, amounts)
            self._cluster = cluster
            self.rebuilds += 1
        return self._cluster
