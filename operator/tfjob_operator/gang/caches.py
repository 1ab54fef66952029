"""What one admission pass keeps while it admits gangs: its copy of free capacity, the log of rows each admission
changed, and the caches built from that copy and caught up from the log.

A commit changes a handful of rows, so instead of recomputing per-gang facts over every node after each
admission, a cache is built once per pass (vectorized) and then folds in only the logged rows:

* :class:`Summary`: largest and total free per resource over a class's allowed nodes (the waiting reasons);
* :class:`BestFit`: the allowed nodes with room for a pod, in best-fit order (:func:`fit_key`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from typing import Any, overload

import numpy as np

from tfjob_operator.gang.cluster import Cluster, Floats, Indexes, Matrix
from tfjob_operator.gang.request import MAX_UNITS, PodClass, Requests

#: Capacity a placement takes: node indexes (each once) and, row by row, the amounts taken on those nodes.
Taken = tuple[Indexes, Matrix]
#: One node's free capacity after a commit changed it: (node index, free per resource).
Change = tuple[int, list[int]]
#: Where best fit puts a node: (GPUs it has left after one pod, its cpu+memory share left, node index).
#: Tuples compare as ``np.lexsort((node, share, gpu_left))`` orders, the node index breaking ties.
FitKey = tuple[int, float, int]


@overload
def fit_key(gpu_free: int, gpu_taken: int, shares: Iterable[tuple[int, int, float]]) -> tuple[int, float]: ...


@overload
def fit_key(
    gpu_free: Indexes, gpu_taken: int, shares: Iterable[tuple[Indexes, int, Floats]]
) -> tuple[Indexes, Floats]: ...


def fit_key(gpu_free: Any, gpu_taken: int, shares: Iterable[tuple[Any, int, Any]]) -> tuple[Any, Any]:
    """Best fit's rank of a node after one pod goes there: the GPUs it has left (never below 0; fewest first), then
    the share of its cpu and memory left (free − taken) / allocatable, summed (smallest first).

    The same arithmetic for one node (Python ints, float divisors) and for many (numpy columns): ints are cast to
    float as numpy casts int64 to float64, so both give the same floats and so the same order.
    """
    left = gpu_free - gpu_taken
    share = 0.0
    for free, taken, divisor in shares:
        share = share + (free - taken) / divisor
    return left * (left > 0), share


class _Kept:
    """A cache built from a pass's free capacity at one point of its change log, caught up from the log."""

    #: Changes folded in so far (a position in PassCapacity.changes).
    seen: int

    def update(self, changes: Sequence[Change]) -> None:
        raise NotImplementedError

    def catch_up(self, changes: Sequence[Change]) -> None:
        """Fold in what the log holds past ``seen``."""
        if self.seen < len(changes):
            self.update(changes[self.seen :])
            self.seen = len(changes)


class Summary(_Kept):
    """Largest and total free per resource over a fixed set of nodes, kept current from the pass's changes.

    Changed rows are folded in in Python (numpy's per-call overhead dominates at a handful of rows). Totals clip
    at 0 (an over-committed node adds nothing) and largest is the raw max, as ``avail[nodes].clip(0).sum(axis=0)``
    and ``avail[nodes].max(axis=0)`` give; totals are Python ints, so nodes that report no pod count (2**62 pods
    each) do not wrap an int64 sum round to 0 free pods.
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


class BestFit(_Kept):
    """The nodes of one (requests, allowed nodes) pair with room for a pod, sorted by :func:`fit_key`, kept current.

    The order is built once per pass over all allowed nodes (vectorized) and then kept sorted by re-keying the
    changed nodes one by one (:meth:`key_of`); both go through :func:`fit_key`.
    """

    def __init__(self, c: Cluster, avail: Matrix, nodes: Indexes, idx: Indexes, amounts: Indexes, seen: int):
        self.cluster = c
        self.members: set[int] = set(nodes.tolist())
        self.req: list[tuple[int, int]] = list(zip(idx.tolist(), amounts.tolist(), strict=True))
        #: What one pod takes of the ranked resources (0 when it requests none).
        taken = dict(self.req)
        self.gpu_taken = taken.get(c.gpu, 0) if c.gpu is not None else 0
        self.shares = [(i, taken.get(i, 0)) for i in (c.cpu, c.memory) if i is not None]
        rows = avail[nodes]
        # No requests (never: every pod takes one of the node's pod count) would mean room without end.
        counts = (rows[:, idx] // amounts).min(axis=1) if idx.size else np.full(nodes.size, MAX_UNITS)
        gpu_free = rows[:, c.gpu] if c.gpu is not None else np.zeros(nodes.size, np.int64)
        gpu_left, share = fit_key(gpu_free, self.gpu_taken,
                                  [(rows[:, i], taken, c.divisors[nodes, i]) for i, taken in self.shares])
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

    def key_of(self, node: int, row: list[int]) -> tuple[int, FitKey]:
        """One node's (pods it has room for, its key), given its free capacity ``row``."""
        count = min((row[i] // amount for i, amount in self.req), default=MAX_UNITS)
        gpu = self.cluster.gpu
        divisors = self.cluster.divisor_rows[node]
        gpu_left, share = fit_key(row[gpu] if gpu is not None else 0, self.gpu_taken,
                                  [(row[i], taken, divisors[i]) for i, taken in self.shares])
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


class PassCapacity:
    """A pass's copy of free capacity that admissions consume, with the caches built from it.

    Every commit logs the rows it changed (``changes``); caches catch up from that log when next asked.
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.avail: Matrix = cluster.free.copy()
        #: (node, free per resource after the change) for every row a commit changed, in commit order.
        self.changes: list[Change] = []
        # (signature, domain) → largest and total free per resource over the allowed nodes
        self._summary: dict[tuple[str, str], Summary] = {}
        # (requests, signature, domain) → allowed nodes with room for a pod, in best-fit order
        self._best_fit: dict[tuple[Requests, str, str], BestFit] = {}

    def summary(self, cls: PodClass, allowed: Indexes, domain: str) -> tuple[list[int], list[int]]:
        """Largest and total free per resource over the allowed nodes, as of now."""
        key = (cls.signature, domain)
        found = self._summary.get(key)
        if found is None:
            found = self._summary[key] = Summary(self.avail, allowed, len(self.changes))
        found.catch_up(self.changes)
        return found.largest, found.total

    def best_fit(self, cls: PodClass, group: Indexes | None, domain: str, req: tuple[Indexes, Indexes]) -> BestFit:
        """The class's allowed nodes with room for a pod, in best-fit order, as of now."""
        key = (cls.requests, cls.signature, domain)
        found = self._best_fit.get(key)
        if found is None:
            allowed = self.cluster.allowed(cls, group)
            found = self._best_fit[key] = BestFit(self.cluster, self.avail, allowed, *req, len(self.changes))
        found.catch_up(self.changes)
        return found

    def stale_says_no(self, cls: PodClass, domain: str, idx: Indexes, amounts: Indexes) -> bool:
        """A summary already says no node has room for one pod of the class. Capacity only shrinks within a pass,
        so that stays right even before it folds in the latest changes."""
        cached = self._summary.get((cls.signature, domain))
        return cached is not None and any(
            cached.largest[i] < amount for i, amount in zip(idx.tolist(), amounts.tolist(), strict=True)
        )

    def commit(self, taken: Taken) -> None:
        nodes, amounts = taken
        self.avail[nodes] -= amounts
        self.changes.extend(zip(nodes.tolist(), self.avail[nodes].tolist(), strict=True))
