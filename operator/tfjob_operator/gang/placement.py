"""All-or-nothing gang admission: (queue of gangs, free capacity) → placements, and a reason for every gang left.

Pure: no I/O, no clock. The builtin backend's pass (:func:`builtin.plan_pass_in`) calls :func:`admit_in` on the
free capacity the admission loop keeps (:class:`cluster.ClusterState`); the trace-replay benchmark calls it on a
:class:`cluster.Cluster` it keeps between passes.

Policy, in order:

* Rank: higher ``priority`` first, then earlier ``arrival``, then ``key`` (FIFO within a priority).
* All or nothing: a gang is admitted only when every pod has a node; pods are never placed alone.
* Best fit: each pod goes to the eligible node it leaves with the fewest free GPUs (then the least
  cpu+memory), so partly used nodes fill up first and whole nodes stay free for big gangs (:func:`caches.fit_key`).
* Backfill: a gang that does not fit waits, and smaller gangs behind it may still start
  (``AdmissionPolicy(backfill=False)`` gives strict FIFO: nothing starts behind a waiting gang).
* Anti-starvation: the highest-ranked waiting gang that has waited ``starvation_passes`` passes gets a
  reservation (one per pass): the nodes it would occupy on an empty cluster (chosen among those with the
  most free GPUs now) are held for it, and gangs ranked below it may use only what it cannot use there.
  Gangs ranked above it (higher priority) are placed before it as always.
  Running pods on those nodes finish, capacity accumulates, and the gang starts; a stream of small
  gangs cannot keep it out forever. A gang that cannot fit even on empty nodes never holds capacity.
* Elastic gangs (``elastic``, see `gang.elastic`): a gang is placed at the width its pods were created with, all or
  nothing. When that does not fit, the widest width in [min, created) that fits what is left at its turn is
  reported (``fits``) and held for it for the rest of the pass, so gangs ranked below cannot take it while its
  pods are created again at that width. It never goes below min; gangs ranked above are placed first as always.

Where the rest lives: the request (`request`), free capacity (`cluster`), what a pass keeps while it admits
(`caches`), and why a gang waits (`explain`).
"""

from __future__ import annotations

import heapq
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np

from tfjob_operator.gang.caches import FitKey, PassCapacity, Taken
from tfjob_operator.gang.cluster import Cluster, Indexes, Matrix
from tfjob_operator.gang.explain import GangWait, Reasons, WaitKind
from tfjob_operator.gang.request import GangRequest, decimal_of


@dataclass(frozen=True)
class AdmissionPolicy:
    """Knobs of the admission pass; the defaults are the built-in backend's policy."""

    #: Let gangs behind a waiting gang start when they fit (False: strict FIFO, nothing overtakes).
    backfill: bool = True
    #: Passes the highest-ranked waiting gang waits before capacity is reserved for it (0: at once).
    starvation_passes: int = 10


@dataclass(frozen=True)
class Elastic:
    """An elastic gang's widths: it was created with ``width`` workers and may run with any count in [lo, hi].
    ``at(n)``: the gang with ``n`` workers (same pods otherwise)."""

    lo: int
    hi: int
    width: int
    at: Callable[[int], GangRequest]


@dataclass(frozen=True)
class AdmissionResult:
    """What one pass decided."""

    #: Admitted gangs: key → {pod name → node name}. Release exactly these pods to these nodes.
    admitted: dict[str, dict[str, str]]
    #: Gangs left waiting: key → why.
    waits: dict[str, GangWait]
    #: Passes each waiting gang has now waited; feed back as ``passes_waited`` on the next pass.
    passes_waited: dict[str, int]
    #: The gang holding the anti-starvation reservation this pass, if any.
    reserved_for: str | None = None
    #: Nodes held for ``reserved_for`` (node name → resources held), for status and metrics.
    held: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    #: Elastic gangs: key → the workers that fit at its turn (its width when admitted, narrower when that fits,
    #: None when not even its minimum does).
    fits: dict[str, int | None] = field(default_factory=dict)

    @property
    def waiting(self) -> dict[str, str]:
        """Gangs left waiting: key → the reason for their Queued condition."""
        return {key: wait.message for key, wait in self.waits.items()}


def _place(work: PassCapacity, gang: GangRequest, group: Indexes | None,
           domain: str) -> tuple[dict[str, str], Taken] | None:
    """Best-fit placement of every pod of the gang on the pass's free capacity (within ``group``), or None."""
    c = work.cluster
    width = work.avail.shape[1]
    used: dict[int, list[int]] = {}  # node → what the gang's classes placed so far take there
    placement: dict[str, str] = {}
    for cls in gang.classes:
        req = c.requests(cls)
        if req is None:
            return None
        idx, amounts = req
        if work.stale_says_no(cls, domain, idx, amounts):
            return None
        fit = work.best_fit(cls, group, domain, req)
        wanted = len(cls.pod_names)
        candidates: Iterable[FitKey] = fit.order
        room: Mapping[int, int] = fit.room
        total = fit.total
        # Nodes where earlier classes of this gang went have less room than the kept order says:
        # re-key those few on what is left and merge them into the order in their place.
        again = [n for n in used if n in fit.members]
        if again:
            free = work.avail[again].tolist()
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


def _place_gang(work: PassCapacity, gang: GangRequest) -> tuple[dict[str, str], Taken] | None:
    if not gang.pods:
        return {}, (np.zeros(0, np.int64), np.zeros((0, work.avail.shape[1]), np.int64))
    if gang.domain_label is None:
        return _place(work, gang, None, "")
    gpu = work.cluster.gpu

    def free_in(nodes: Indexes) -> int:
        return int(work.avail[nodes, gpu].clip(0).sum()) if gpu is not None else 0

    # Best fit at the domain level too: the fullest domain that still fits, big domains stay whole.
    domains = work.cluster.domains(gang.domain_label)
    for value, nodes in sorted(domains.items(), key=lambda kv: (free_in(kv[1]), kv[0])):
        found = _place(work, gang, nodes, f"{gang.domain_label}={value}")
        if found is not None:
            return found
    return None


def widest_in(work: PassCapacity, at: Callable[[int], GangRequest], lo: int,
              hi: int) -> tuple[int, dict[str, str], Taken] | None:
    """The widest worker count in [lo, hi] whose gang ``at(n)`` places on ``work`` (not modified), with its
    placement; None when not even ``lo`` fits. Binary search: a gang with fewer workers of a class fits wherever
    one with more does (each class fills nodes in one order, so fewer workers take a prefix of the same nodes)."""
    best: tuple[int, dict[str, str], Taken] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        found = _place_gang(work, at(mid))
        if found is None:
            hi = mid - 1
        else:
            best, lo = (mid, *found), mid + 1
    return best


def _hold_plan(work: PassCapacity, gang: GangRequest) -> Matrix | None:
    """Nodes the gang would occupy were they empty, preferring those with the most free GPUs now."""
    c = work.cluster
    groups = [None] if gang.domain_label is None else list(c.domains(gang.domain_label).values())
    best: tuple[int, Matrix] | None = None
    for group in groups:
        plan = c.fill(gang, c.alloc, group, ranked=True)
        if plan is None:
            continue
        held_nodes = plan.any(axis=1)
        score = int(work.avail[held_nodes, c.gpu].sum()) if c.gpu is not None else 0
        if best is None or score > best[0]:
            best = (score, plan)
    return None if best is None else best[1]


def _sparse(plan: Matrix) -> Taken:
    """A node × resource plan as the rows it uses (a commit changes only those)."""
    nodes = np.flatnonzero(plan.any(axis=1))
    return nodes, plan[nodes]


def admit_in(
    cluster: Cluster,
    queue: Sequence[GangRequest],
    policy: AdmissionPolicy = AdmissionPolicy(),
    passes_waited: Mapping[str, int] | None = None,
    elastic: Mapping[str, Elastic] | None = None,
) -> AdmissionResult:
    """One admission pass over ``queue`` on a prepared :class:`Cluster` (which is not modified). ``elastic``: the
    widths of the elastic gangs among them, by key."""
    waited = passes_waited or {}
    work = PassCapacity(cluster)
    reasons = Reasons(work)
    admitted: dict[str, dict[str, str]] = {}
    waits: dict[str, GangWait] = {}
    next_waited: dict[str, int] = {}
    blocked_by: str | None = None
    reserved_for: str | None = None
    held: Matrix | None = None
    failed: set[tuple[Any, ...]] = set()
    fits: dict[str, int | None] = {}
    for gang in sorted(queue, key=lambda g: g.rank):
        if blocked_by is not None:
            waits[gang.key] = GangWait(WaitKind.NO_ROOM, f"waiting behind {blocked_by} (strict FIFO)")
            next_waited[gang.key] = waited.get(gang.key, 0) + 1
            continue
        # Capacity only shrinks during a pass, so a shape that failed once fails for the rest of it.
        shape = (gang.shape, gang.domain_label)
        found = None if shape in failed else _place_gang(work, gang)
        if found is not None:
            placement, used = found
            work.commit(used)
            admitted[gang.key] = placement
            if elastic and gang.key in elastic:
                fits[gang.key] = elastic[gang.key].width
            continue
        failed.add(shape)
        passes = waited.get(gang.key, 0)
        ask = elastic.get(gang.key) if elastic else None
        narrower = widest_in(work, ask.at, ask.lo, min(ask.hi, ask.width - 1)) if ask is not None else None
        if ask is not None and narrower is not None:
            # Held for it while its pods are created again at that width (the pass after admits them).
            width, _, used = narrower
            wait = reasons.explain(gang, never_fits=False, held_for=reserved_for)
            work.commit(used)
            fits[gang.key] = width
            waits[gang.key] = GangWait(wait.kind, f"{wait.message}; {width} of its {ask.width} workers fit now "
                                                  f"(elastic, min {ask.lo}): starting it with {width}")
            next_waited[gang.key] = passes + 1
            continue
        if ask is not None:
            fits[gang.key] = None
        never_fits = not cluster.fits_empty(gang)
        if not never_fits and not policy.backfill:
            blocked_by = gang.key
        wait = reasons.explain(gang, never_fits=never_fits, held_for=reserved_for)
        if not never_fits and policy.backfill and reserved_for is None and passes >= policy.starvation_passes:
            plan = _hold_plan(work, gang)
            if plan is not None:
                reserved_for, held = gang.key, plan
                # Gangs ranked below see the held capacity as used.
                work.commit(_sparse(plan))
                wait = GangWait(wait.kind, f"{wait.message}; capacity reserved on {int(plan.any(axis=1).sum())} "
                                           f"node(s) after waiting {passes} passes")
        waits[gang.key] = wait
        next_waited[gang.key] = passes + 1
    held_out: dict[str, dict[str, Decimal]] = {}
    if held is not None:
        for n in np.flatnonzero(held.any(axis=1)).tolist():
            held_out[cluster.nodes[n].name] = {
                cluster.resource_names[i]: decimal_of(int(v)) for i, v in enumerate(held[n].tolist()) if v
            }
    return AdmissionResult(admitted, waits, next_waited, reserved_for, held_out, fits)
