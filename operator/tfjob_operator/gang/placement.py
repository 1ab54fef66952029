"""All-or-nothing gang admission: (queue of gangs, nodes, bound pods, reservations) → placements.

Pure: no I/O, no clock. The built-in backend's admission loop calls :func:`admit` once per pass; the
trace-replay benchmark calls :func:`admit_in` on a :class:`Cluster` it keeps between passes.

Policy, in order:

* Rank: higher ``priority`` first, then earlier ``arrival``, then ``key`` (FIFO within a priority).
* All or nothing: a gang is admitted only when every pod has a node; pods are never placed alone.
* Best fit: each pod goes to the eligible node it leaves with the fewest free GPUs (then the least
  cpu+memory), so partly used nodes fill up first and whole nodes stay free for big gangs.
* Backfill: a gang that does not fit waits, and smaller gangs behind it may still start
  (``AdmissionPolicy(backfill=False)`` gives strict FIFO: nothing starts behind a waiting gang).
* Anti-starvation: the highest-ranked waiting gang that has waited ``starvation_passes`` passes gets a
  reservation (one per pass): the nodes it would occupy on an empty cluster (chosen among those with the
  most free GPUs now) are held for it, and gangs ranked below it may use only what it cannot use there.
  Gangs ranked above it (higher priority) are placed before it as always.
  Running pods on those nodes finish, capacity accumulates, and the gang starts; a stream of small
  gangs cannot keep it out forever. A gang that cannot fit even on empty nodes never holds capacity.
* Reservations passed in (pods released but not yet bound) count as used.
"""

from __future__ import annotations

import heapq
import json
from bisect import bisect_left, insort
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from tfjob_operator import resources
from tfjob_operator.resources import GPU, is_terminal

#: Quantities are compared as integers in thousandths (cpu in millicores, memory in milli-bytes).
_SCALE = Decimal(1000)

#: Node × resource matrix of amounts in thousandths; a 1-D array of node indexes.
Matrix = npt.NDArray[np.int64]
Indexes = npt.NDArray[np.int64]
#: Quantities beyond this (in thousandths) are clipped so they stay inside int64.
_MAX_UNITS = 2**62
#: A pod's nonzero requests as (resource name, amount in thousandths), sorted by name.
Requests = tuple[tuple[str, int], ...]


def _units(value: Decimal, *, up: bool) -> int:
    return int((value * _SCALE).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))


def _fmt(name: str, units: int) -> str:
    value = Decimal(units) / _SCALE
    if name == "memory":
        if value >= 2**30:
            return f"{value / 2**30:.3g}Gi"
        if value >= 2**20:
            return f"{value / 2**20:.3g}Mi"
    if name == "cpu" and value != value.to_integral_value():
        return f"{units}m"
    return f"{value.normalize():f}"


def _constraint_signature(pod: Mapping[str, Any]) -> str:
    """What node predicates look at, as a stable string: equal signatures accept the same nodes."""
    spec = pod.get("spec") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return json.dumps([spec.get("nodeSelector") or {}, affinity or {}, spec.get("tolerations") or []], sort_keys=True)


def _pod_name(pod: Mapping[str, Any]) -> str:
    name = (pod.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("gang pod without metadata.name: every pod of a GangRequest needs a name")
    return str(name)


@dataclass(frozen=True)
class PodClass:
    """Pods of one gang that are interchangeable for placement: same requests, same node constraints."""

    requests: Requests
    signature: str
    template: Mapping[str, Any]
    pod_names: tuple[str, ...]

    def amount(self, name: str) -> int:
        return dict(self.requests).get(name, 0)


@dataclass(frozen=True)
class GangRequest:
    """One queued gang: all its pods must be placed together or not at all.

    ``pods`` are Kubernetes pod dicts (``metadata.name``, containers' requests, nodeSelector, affinity,
    tolerations). ``arrival`` orders gangs of equal priority (e.g. creation time in seconds).
    ``domain_label``: when set, every pod must land on nodes sharing one value of that node label
    (an NVLink island, a rack); nodes without the label are not used.
    """

    key: str
    pods: tuple[Mapping[str, Any], ...]
    priority: int = 0
    arrival: float = 0.0
    domain_label: str | None = None

    @cached_property
    def classes(self) -> tuple[PodClass, ...]:
        """Pods grouped by (requests, constraints), biggest first (GPUs, then cpu, then memory)."""
        groups: dict[tuple[Requests, str], list[Mapping[str, Any]]] = {}
        for pod in self.pods:
            demand = resources.scheduling_demand(pod)
            reqs = tuple(sorted((name, _units(value, up=True)) for name, value in demand.items() if value > 0))
            groups.setdefault((reqs, _constraint_signature(pod)), []).append(pod)
        classes = [
            PodClass(reqs, sig, members[0], tuple(_pod_name(p) for p in members))
            for (reqs, sig), members in groups.items()
        ]
        classes.sort(key=lambda c: (-c.amount(GPU), -c.amount("cpu"), -c.amount("memory"), c.pod_names))
        return tuple(classes)

    @cached_property
    def total_requests(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for cls in self.classes:
            for name, amount in cls.requests:
                total[name] = total.get(name, 0) + amount * len(cls.pod_names)
        return total

    @cached_property
    def shape(self) -> tuple[tuple[Requests, str, int], ...]:
        """What placement depends on besides the cluster: gangs of equal shape fit alike."""
        return tuple((c.requests, c.signature, len(c.pod_names)) for c in self.classes)

    @property
    def rank(self) -> tuple[int, float, str]:
        return (-self.priority, self.arrival, self.key)


@dataclass(frozen=True)
class AdmissionPolicy:
    """Knobs of the admission pass; the defaults are the built-in backend's policy."""

    #: Let gangs behind a waiting gang start when they fit (False: strict FIFO, nothing overtakes).
    backfill: bool = True
    #: Passes the highest-ranked waiting gang waits before capacity is reserved for it (0: at once).
    starvation_passes: int = 10


@dataclass(frozen=True)
class AdmissionResult:
    """What one pass decided."""

    #: Admitted gangs: key → {pod name → node name}. Release exactly these pods to these nodes.
    admitted: dict[str, dict[str, str]]
    #: Gangs left waiting: key → human reason for the Queued condition.
    waiting: dict[str, str]
    #: Passes each waiting gang has now waited; feed back as ``passes_waited`` on the next pass.
    passes_waited: dict[str, int]
    #: The gang holding the anti-starvation reservation this pass, if any.
    reserved_for: str | None = None
    #: Nodes held for ``reserved_for`` (node name → resources held), for status and metrics.
    held: dict[str, dict[str, Decimal]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Node:
    name: str
    obj: Mapping[str, Any]
    labels: Mapping[str, str]


class Cluster:
    """Nodes with their free capacity as an integer matrix, plus caches of node eligibility.

    Build it with :meth:`from_objects`. A simulator may keep one across passes and move capacity with
    :meth:`take` and :meth:`give`; :func:`admit_in` never mutates it.
    """

    def __init__(self, nodes: Sequence[Mapping[str, Any]], used: Mapping[str, Mapping[str, Decimal]]):
        ordered = sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name", "")))
        allocs = [resources.node_allocatable(n) for n in ordered]
        # Every node has a pod count: one that does not report `pods` (a test's bare node) is taken as unbounded.
        allocs = [{resources.POD_COUNT: Decimal(_MAX_UNITS), **a} for a in allocs]
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
            [[min(_units(a.get(r, Decimal(0)), up=False), _MAX_UNITS) for r in self.resource_names] for a in allocs],
            dtype=np.int64,
        ).reshape(len(ordered), len(self.resource_names))
        self.node_index: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        self.free: Matrix = self.alloc.copy()
        #: Allocatable, at least 1: the divisor of the best-fit share (computed once, not per placement).
        self.alloc_floor: Matrix = np.maximum(self.alloc, 1)
        #: The same as Python ints, row by row, for keys computed one node at a time.
        self.alloc_floor_rows: list[list[int]] = self.alloc_floor.tolist()
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
                row[self.index[name]] += sign * min(_units(value, up=True), _MAX_UNITS)

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
                np.array([min(amount, _MAX_UNITS) for _, amount in cls.requests], dtype=np.int64),
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

    def gpu_total(self) -> int:
        """Allocatable GPUs over all nodes (whole GPUs)."""
        return int(self.alloc[:, self.gpu].sum()) // 1000 if self.gpu is not None else 0


#: Capacity a placement takes: node indexes (each once) and, row by row, the amounts taken on those nodes.
Taken = tuple[Indexes, Matrix]
#: One node's free capacity after a commit changed it: (node index, free per resource).
Change = tuple[int, list[int]]


class _Kept:
    """A cache built from a pass's free capacity at one point of its change log, caught up from the log."""

    #: Changes folded in so far (a position in _Pass.changes).
    seen: int

    def update(self, changes: Sequence[Change]) -> None:
        raise NotImplementedError

    def catch_up(self, changes: Sequence[Change]) -> None:
        """Fold in what the log holds past ``seen``."""
        if self.seen < len(changes):
            self.update(changes[self.seen :])
            self.seen = len(changes)


class _Summary(_Kept):
    """Largest and total free per resource over a fixed set of nodes, kept current from the pass's changes.

    Recomputing both after every admission took two axis-0 reductions over the node matrix per waiting gang,
    yet a commit changes a handful of rows: those alone are folded in (in Python; numpy's per-call overhead
    dominates at that size). Totals clip at 0 (an over-committed node adds nothing) and largest is the raw
    max, as ``avail[nodes].clip(0).sum(axis=0)`` and ``avail[nodes].max(axis=0)`` give; totals are Python ints,
    so nodes that report no pod count (2**62 pods each) do not wrap an int64 sum round to 0 free pods.
    """

    def __init__(self, avail: Matrix, nodes: Indexes, seen: int):
        rows = avail[nodes]
        width = avail.shape[1]
        #: Node index → its row in ``rows``, for these nodes only.
        self.position: dict[int, int] = dict(zip(nodes.tolist(), range(nodes.size), strict=True))
        #: Free capacity of these nodes as last folded in.
        self.rows: list[list[int]] = rows.tolist()
        self.largest: list[int] = rows.max(axis=0).tolist() if nodes.size else [0] * width
        # An int64 sum is exact while no column can reach 2**63; past that (unbounded pod counts) sum in Python.
        exact = max(self.largest, default=0) < 2**63 // max(nodes.size, 1)
        free = np.clip(rows, 0, None)
        self.total: list[int] = (
            free.sum(axis=0, dtype=None if exact else object).tolist() if nodes.size else [0] * width
        )
        #: Rows at the largest value, per resource: the max is looked for again only when none is left there.
        self.ties: list[int] = (rows == np.array(self.largest, np.int64)).sum(axis=0).tolist()
        self.seen = seen

    def update(self, changes: Sequence[Change]) -> None:
        """Fold in nodes' new free capacity, in the order it changed (nodes not among ours are ignored)."""
        for node, new in changes:
            p = self.position.get(node)
            if p is None:
                continue
            old = self.rows[p]
            self.rows[p] = new
            for i, (was, now) in enumerate(zip(old, new, strict=True)):
                if was == now:
                    continue
                self.total[i] += max(now, 0) - max(was, 0)
                top = self.largest[i]
                if now > top:  # capacity does not grow within a pass, but a summary need not rely on it
                    self.largest[i], self.ties[i] = now, 1
                    continue
                self.ties[i] += (now == top) - (was == top)
                if not self.ties[i]:  # the max left its last row: find it again
                    column = [row[i] for row in self.rows]
                    self.largest[i] = max(column)
                    self.ties[i] = column.count(self.largest[i])


#: Where best fit puts a node: (GPUs it has left after one pod, its cpu+memory share left, node index).
#: Tuples compare as ``np.lexsort((node, share, gpu_left))`` orders, the node index breaking ties.
FitKey = tuple[int, float, int]


class _BestFit(_Kept):
    """The nodes of one (requests, allowed nodes) pair with room for a pod, in best-fit order, kept current.

    Best fit ranks a node by the GPUs it has left after one pod (fewest first), then the cpu+memory share it
    has left, then its index. Ranking every allowed node for every gang (a dozen numpy calls over all nodes,
    and a sort) was most of a pass, yet a commit changes a handful of rows: the order is built once per pass
    (vectorized, by :meth:`keys_of`) and then kept, sorted, by re-keying the changed nodes one by one
    (:meth:`key_of`, the same arithmetic on Python ints and floats: both give the same numbers).
    """

    def __init__(self, c: Cluster, avail: Matrix, nodes: Indexes, idx: Indexes, amounts: Indexes, seen: int):
        self.cluster = c
        self.members: set[int] = set(nodes.tolist())
        self.req: list[tuple[int, int]] = list(zip(idx.tolist(), amounts.tolist(), strict=True))
        #: What one pod takes of the ranked resources (0 when it requests none).
        taken = dict(self.req)
        self.gpu_taken = taken.get(c.gpu, 0) if c.gpu is not None else 0
        self.shares = [(i, taken.get(i, 0)) for i in (c.cpu, c.memory) if i is not None]
        counts, gpu_left, share = self.keys_of(avail[nodes], nodes, idx, amounts)
        fit = counts > 0
        nodes, counts, gpu_left, share = nodes[fit], counts[fit], gpu_left[fit], share[fit]
        order = np.lexsort((nodes, share, gpu_left))
        #: Keys of the nodes with room for at least one pod, sorted.
        self.order: list[FitKey] = list(
            zip(gpu_left[order].tolist(), share[order].tolist(), nodes[order].tolist(), strict=True)
        )
        self.key: dict[int, FitKey] = {key[2]: key for key in self.order}
        #: Pods of these requests each of those nodes has room for, and their sum.
        self.room: dict[int, int] = dict(zip(nodes.tolist(), counts.tolist(), strict=True))
        self.total = sum(self.room.values())
        self.seen = seen

    def keys_of(
        self, rows: Matrix, nodes: Indexes, idx: Indexes, amounts: Indexes
    ) -> tuple[Indexes, Indexes, npt.NDArray[np.float64]]:
        """Pods each node has room for, GPUs left after one pod and cpu+memory share left, for all nodes."""
        # No requests (never: every pod takes one of the node's pod count) would mean room without end.
        counts = (rows[:, idx] // amounts).min(axis=1) if idx.size else np.full(nodes.size, _MAX_UNITS)
        gpu = self.cluster.gpu
        gpu_left = np.maximum(rows[:, gpu] - self.gpu_taken, 0) if gpu is not None else np.zeros(nodes.size, np.int64)
        share = np.zeros(nodes.size)
        for i, taken in self.shares:
            share += (rows[:, i] - taken) / self.cluster.alloc_floor[nodes, i]
        return counts, gpu_left, share

    def key_of(self, node: int, row: list[int]) -> tuple[int, FitKey]:
        """:meth:`keys_of` for one node: (pods it has room for, its key)."""
        count = min((row[i] // amount for i, amount in self.req), default=_MAX_UNITS)
        gpu = self.cluster.gpu
        gpu_left = max(row[gpu] - self.gpu_taken, 0) if gpu is not None else 0
        share = 0.0
        divisors = self.cluster.alloc_floor_rows[node]
        for i, taken in self.shares:
            # float() rounds an int64 as numpy's cast does, then one IEEE division: the same float as keys_of.
            share += float(row[i] - taken) / float(divisors[i])
        return count, (gpu_left, share, node)

    def update(self, changes: Sequence[Change]) -> None:
        """Re-key the changed nodes that are ours, in the order they changed."""
        for node, row in changes:
            if node not in self.members:
                continue
            old = self.key.pop(node, None)
            if old is not None:
                del self.order[bisect_left(self.order, old)]
                self.total -= self.room.pop(node)
            count, key = self.key_of(node, row)
            if count > 0:
                insort(self.order, key)
                self.key[node], self.room[node] = key, count
                self.total += count


class _Pass:
    """Working state of one admission pass: a copy of free capacity that admissions consume.

    Every commit logs the rows it changed (``changes``); caches built from ``avail`` catch up from that log
    instead of being recomputed over all nodes after each admission.
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.avail: Matrix = cluster.free.copy()
        #: (node, free per resource after the change) for every row a commit changed, in commit order.
        self.changes: list[Change] = []
        # (signature, domain) → largest and total free per resource over the allowed nodes
        self._summary: dict[tuple[str, str], _Summary] = {}
        # (requests, signature, domain) → allowed nodes with room for a pod, in best-fit order
        self._best_fit: dict[tuple[Requests, str, str], _BestFit] = {}
        self._reasons: dict[tuple[Any, ...], str] = {}

    def summary(self, cls: PodClass, allowed: Indexes, domain: str) -> tuple[list[int], list[int]]:
        """Largest and total free per resource over the allowed nodes, as of now."""
        key = (cls.signature, domain)
        found = self._summary.get(key)
        if found is None:
            found = self._summary[key] = _Summary(self.avail, allowed, len(self.changes))
        found.catch_up(self.changes)
        return found.largest, found.total

    def best_fit(self, cls: PodClass, group: Indexes | None, domain: str, req: tuple[Indexes, Indexes]) -> _BestFit:
        """The class's allowed nodes with room for a pod, in best-fit order, as of now."""
        key = (cls.requests, cls.signature, domain)
        found = self._best_fit.get(key)
        if found is None:
            allowed = self.cluster.allowed(cls, group)
            found = self._best_fit[key] = _BestFit(self.cluster, self.avail, allowed, *req, len(self.changes))
        found.catch_up(self.changes)
        return found

    def _stale_says_no(self, cls: PodClass, domain: str, idx: Indexes, amounts: Indexes) -> bool:
        # Capacity only shrinks within a pass, so a summary that already says "no" stays right (even before
        # it folds in the latest changes).
        cached = self._summary.get((cls.signature, domain))
        return cached is not None and any(
            cached.largest[i] < amount for i, amount in zip(idx.tolist(), amounts.tolist(), strict=True)
        )

    def place(self, gang: GangRequest, group: Indexes | None, domain: str) -> tuple[dict[str, str], Taken] | None:
        """Best-fit placement of every pod of the gang on current free capacity, or None."""
        c = self.cluster
        width = self.avail.shape[1]
        used: dict[int, list[int]] = {}  # node → what the gang's classes placed so far take there
        placement: dict[str, str] = {}
        for cls in gang.classes:
            req = c.requests(cls)
            if req is None:
                return None
            idx, amounts = req
            if self._stale_says_no(cls, domain, idx, amounts):
                return None
            fit = self.best_fit(cls, group, domain, req)
            wanted = len(cls.pod_names)
            candidates: Iterable[FitKey] = fit.order
            room: Mapping[int, int] = fit.room
            total = fit.total
            # Nodes where earlier classes of this gang went have less room than the kept order says:
            # re-key those few on what is left and merge them into the order in their place.
            again = [n for n in used if n in fit.members]
            if again:
                free = self.avail[again].tolist()
                rekeyed = [fit.key_of(n, [f - u for f, u in zip(row, used[n], strict=True)])
                           for n, row in zip(again, free, strict=True)]
                rekeyed = [(count, key) for count, key in rekeyed if count > 0]
                room = ChainMap({key[2]: count for count, key in rekeyed}, fit.room)
                total += sum(count for count, _ in rekeyed) - sum(fit.room.get(n, 0) for n in again)
                skip = set(again)
                candidates = heapq.merge(
                    (key for key in fit.order if key[2] not in skip), sorted(key for _, key in rekeyed)
                )
            # Every node's room counted up to `wanted` (as many as the gang places) sums to at least `wanted`
            # exactly when the uncapped room does.
            if total < wanted:
                return None
            names = iter(cls.pod_names)
            remaining = wanted
            for _, _, n in candidates:
                take = min(room[n], remaining)
                row = used.setdefault(n, [0] * width)
                for i, amount in fit.req:
                    row[i] += amount * take
                node_name = c.nodes[n].name
                for _ in range(take):
                    placement[next(names)] = node_name
                remaining -= take
                if not remaining:
                    break
        nodes = list(used)
        return placement, (np.array(nodes, np.int64), np.array([used[n] for n in nodes], np.int64).reshape(-1, width))

    def place_gang(self, gang: GangRequest) -> tuple[dict[str, str], Taken] | None:
        if not gang.pods:
            return {}, (np.zeros(0, np.int64), np.zeros((0, self.avail.shape[1]), np.int64))
        if gang.domain_label is None:
            return self.place(gang, None, "")
        gpu = self.cluster.gpu

        def free_in(nodes: Indexes) -> int:
            return int(self.avail[nodes, gpu].clip(0).sum()) if gpu is not None else 0

        # Best fit at the domain level too: the fullest domain that still fits, big domains stay whole.
        domains = self.cluster.domains(gang.domain_label)
        for value, nodes in sorted(domains.items(), key=lambda kv: (free_in(kv[1]), kv[0])):
            found = self.place(gang, nodes, f"{gang.domain_label}={value}")
            if found is not None:
                return found
        return None

    def commit(self, taken: Taken) -> None:
        nodes, amounts = taken
        self.avail[nodes] -= amounts
        self.changes.extend(zip(nodes.tolist(), self.avail[nodes].tolist(), strict=True))

    def hold_plan(self, gang: GangRequest) -> Matrix | None:
        """Nodes the gang would occupy were they empty, preferring those with the most free GPUs now."""
        c = self.cluster
        groups = [None] if gang.domain_label is None else list(c.domains(gang.domain_label).values())
        best: tuple[int, Matrix] | None = None
        for group in groups:
            plan = c.fill(gang, c.alloc, group, ranked=True)
            if plan is None:
                continue
            held_nodes = plan.any(axis=1)
            score = int(self.avail[held_nodes, c.gpu].sum()) if c.gpu is not None else 0
            if best is None or score > best[0]:
                best = (score, plan)
        return None if best is None else best[1]

    def explain(self, gang: GangRequest, *, never_fits: bool, held_for: str | None) -> str:
        """Why the gang waits, e.g. "needs 8 nvidia.com/gpu on ≤ 2 nodes; largest free 6 (...)"."""
        c = self.cluster
        for cls in gang.classes:
            missing = [name for name, _ in cls.requests if name not in c.index]
            if missing:
                return f"no node offers {missing[0]} (requested by pod {cls.pod_names[0]})"
            if not c.eligible(cls).size:
                return (
                    f"no ready node matches the nodeSelector, node affinity and tolerations of pod {cls.pod_names[0]}"
                )
        # Long queues hold many gangs of one shape; their reasons are equal until capacity changes.
        # The change log's length stands for the free capacity: equal lengths, equal capacity.
        key = (gang.shape, gang.domain_label, never_fits, held_for, len(self.changes))
        found = self._reasons.get(key)
        if found is None:
            found = self._explain(gang, never_fits=never_fits, held_for=held_for)
            self._reasons[key] = found
        return found

    def _explain(self, gang: GangRequest, *, never_fits: bool, held_for: str | None) -> str:
        c = self.cluster
        pods = len(gang.pods)
        short: list[str] = []
        largest_of: dict[str, int] = {}
        total_of: dict[str, int] = {}
        n_eligible = 0
        for cls in gang.classes:
            allowed = c.eligible(cls)
            n_eligible = max(n_eligible, int(allowed.size))
            largest, total = self.summary(cls, allowed, "")
            for name, amount in cls.requests:
                i = c.index[name]
                largest_of[name] = max(largest_of.get(name, 0), int(largest[i]))
                total_of[name] = max(total_of.get(name, 0), int(total[i]))
                if largest[i] < amount and name not in short:
                    short.append(name)
        wanted = gang.total_requests
        # After "no node has room for one pod", too little in aggregate is the next best explanation.
        scarce = sorted((total_of.get(n, 0) / amount, n != GPU, n) for n, amount in wanted.items() if amount)
        if short:
            head = GPU if GPU in short else short[0]
        elif scarce and scarce[0][0] < 1:
            head = scarce[0][2]
        else:
            head = GPU if GPU in wanted else ("cpu" if "cpu" in wanted else next(iter(wanted), ""))
        if not head:
            text = f"needs {pods} pod(s) placed together"
        else:
            text = (
                f"needs {_fmt(head, wanted[head])} {head} on ≤ {pods} node{'s' if pods != 1 else ''}; "
                f"largest free {_fmt(head, max(largest_of.get(head, 0), 0))}"
                f" ({_fmt(head, total_of.get(head, 0))} free on {n_eligible} eligible nodes)"
            )
        if never_fits:
            return text + "; cannot fit even on empty nodes (lower the request or add bigger nodes)"
        if gang.domain_label:
            text += f"; all pods must share one value of node label {gang.domain_label}"
        if held_for:
            text += f"; capacity is held for {held_for} (waited longest)"
        return text


def _sparse(plan: Matrix) -> Taken:
    """A node × resource plan as the rows it uses (a commit changes only those)."""
    nodes = np.flatnonzero(plan.any(axis=1))
    return nodes, plan[nodes]


def admit_in(
    cluster: Cluster,
    queue: Sequence[GangRequest],
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
) -> AdmissionResult:
    """One admission pass over ``queue`` on a prepared :class:`Cluster` (which is not modified)."""
    waited = passes_waited or {}
    work = _Pass(cluster)
    admitted: dict[str, dict[str, str]] = {}
    waiting: dict[str, str] = {}
    next_waited: dict[str, int] = {}
    blocked_by: str | None = None
    reserved_for: str | None = None
    held: Matrix | None = None
    failed: set[tuple[Any, ...]] = set()
    for gang in sorted(queue, key=lambda g: g.rank):
        if blocked_by is not None:
            waiting[gang.key] = f"waiting behind {blocked_by} (strict FIFO)"
            next_waited[gang.key] = waited.get(gang.key, 0) + 1
            continue
        # Capacity only shrinks during a pass, so a shape that failed once fails for the rest of it.
        shape = (gang.shape, gang.domain_label)
        found = None if shape in failed else work.place_gang(gang)
        if found is not None:
            placement, used = found
            work.commit(used)
            admitted[gang.key] = placement
            continue
        failed.add(shape)
        passes = waited.get(gang.key, 0)
        never_fits = not cluster.fits_empty(gang)
        if not never_fits and not policy.backfill:
            blocked_by = gang.key
        reason = work.explain(gang, never_fits=never_fits, held_for=reserved_for)
        if not never_fits and policy.backfill and reserved_for is None and passes >= policy.starvation_passes:
            plan = work.hold_plan(gang)
            if plan is not None:
                reserved_for, held = gang.key, plan
                # Gangs ranked below see the held capacity as used.
                work.commit(_sparse(plan))
                reason += f"; capacity reserved on {int(plan.any(axis=1).sum())} node(s) after waiting {passes} passes"
        waiting[gang.key] = reason
        next_waited[gang.key] = passes + 1
    held_out: dict[str, dict[str, Decimal]] = {}
    if held is not None:
        for n in np.flatnonzero(held.any(axis=1)).tolist():
            held_out[cluster.nodes[n].name] = {
                cluster.resource_names[i]: Decimal(int(v)) / _SCALE for i, v in enumerate(held[n].tolist()) if v
            }
    return AdmissionResult(admitted, waiting, next_waited, reserved_for, held_out)


def admit(
    queue: Sequence[GangRequest],
    nodes: Sequence[Mapping[str, Any]],
    bound_pods: Iterable[Mapping[str, Any]] = (),
    reservations: Mapping[str, Mapping[str, Decimal]] | None = None,
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
) -> AdmissionResult:
    """One admission pass over plain Kubernetes objects.

    ``bound_pods``: every pod with ``spec.nodeName`` (terminal ones are ignored); ``reservations``:
    node name → resources of pods released to that node but not yet bound (see
    ``builtin.in_flight_reservations``); ``passes_waited``: the previous result's ``passes_waited``.
    """
    return admit_in(Cluster.from_objects(nodes, bound_pods, reservations), queue, policy, passes_waited)


def bound_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod holds capacity on: its node once bound, until it ends (terminal pods hold nothing)."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    return str(node_name) if node_name and not is_terminal(pod) else None


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
        """The kept Cluster (rebuilt only after a node change). Passes must not mutate it (admit_in does not)."""
        if self._cluster is None:
            cluster = Cluster(list(self._nodes.values()), {})
            for node_name, amounts in [*self._held.values(), *self._reserved.values()]:
                if node_name in cluster.node_index:
                    cluster.take(node_name, amounts)
            self._cluster = cluster
            self.rebuilds += 1
        return self._cluster
