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
* Anti-starvation: once the highest-ranked waiting gang has waited ``starvation_passes`` passes, it gets
  a reservation: the nodes it would occupy on an empty cluster (chosen among those with the most free
  capacity now) are held for it, and gangs ranked below it may use only what it cannot use there.
  Running pods on those nodes finish, capacity accumulates, and the gang starts; a stream of small
  gangs cannot keep it out forever. A gang that cannot fit even on empty nodes never holds capacity.
* Reservations passed in (pods released but not yet bound) count as used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import cached_property
from typing import Any

from tfjob_operator import resources
from tfjob_operator.resources import GPU

#: Quantities are compared as integers in thousandths (cpu in millicores, memory in milli-bytes).
_SCALE = Decimal(1000)

Vector = list[int]
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
            reqs = tuple(
                sorted(
                    (name, _units(value, up=True)) for name, value in resources.pod_requests(pod).items() if value > 0
                )
            )
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
    alloc: tuple[int, ...]


class Cluster:
    """Nodes with their free capacity in integer vectors, plus caches of node eligibility.

    Build it with :meth:`from_objects`. A simulator may keep one across passes and move capacity with
    :meth:`take` and :meth:`give`; :func:`admit_in` never mutates it.
    """

    def __init__(self, nodes: Sequence[Mapping[str, Any]], used: Mapping[str, Mapping[str, Decimal]]):
        ordered = sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name", "")))
        allocs = [resources.node_allocatable(n) for n in ordered]
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
                alloc=tuple(_units(alloc.get(r, Decimal(0)), up=False) for r in self.resource_names),
            )
            for n, alloc in zip(ordered, allocs, strict=True)
        )
        self.node_index: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        self.free: list[Vector] = [list(n.alloc) for n in self.nodes]
        for node_name, amounts in used.items():
            if node_name in self.node_index:
                self.take(node_name, amounts)
        self._eligible: dict[str, tuple[int, ...]] = {}
        self._domains: dict[str, dict[str, tuple[int, ...]]] = {}
        self._fits_empty: dict[tuple[Any, ...], bool] = {}
        self._gpu = self.index.get(GPU)
        self._cpu = self.index.get("cpu")
        self._mem = self.index.get("memory")

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

    def _vector(self, amounts: Mapping[str, Decimal]) -> list[tuple[int, int]]:
        return [
            (self.index[name], _units(value, up=True))
            for name, value in amounts.items()
            if name in self.index and value > 0
        ]

    def take(self, node_name: str, amounts: Mapping[str, Decimal]) -> None:
        """Mark capacity on a node as used (a pod bound there)."""
        free = self.free[self.node_index[node_name]]
        for i, units in self._vector(amounts):
            free[i] -= units

    def give(self, node_name: str, amounts: Mapping[str, Decimal]) -> None:
        """Return capacity to a node (a pod there finished)."""
        free = self.free[self.node_index[node_name]]
        for i, units in self._vector(amounts):
            free[i] += units

    def eligible(self, cls: PodClass) -> tuple[int, ...]:
        """Indexes of nodes whose readiness, labels and taints accept the class's pods (cached)."""
        found = self._eligible.get(cls.signature)
        if found is None:
            found = tuple(i for i, n in enumerate(self.nodes) if resources.node_accepts(cls.template, n.obj))
            self._eligible[cls.signature] = found
        return found

    def domains(self, label: str) -> dict[str, tuple[int, ...]]:
        """Node indexes grouped by their value of ``label`` (nodes without it are left out)."""
        found = self._domains.get(label)
        if found is None:
            groups: dict[str, list[int]] = {}
            for i, n in enumerate(self.nodes):
                if label in n.labels:
                    groups.setdefault(n.labels[label], []).append(i)
            found = {value: tuple(idx) for value, idx in sorted(groups.items())}
            self._domains[label] = found
        return found

    def fits_empty(self, gang: GangRequest) -> bool:
        """Whether the gang fits on these nodes were they empty (cached; a no means wait forever)."""
        key = (tuple((c.requests, c.signature, len(c.pod_names)) for c in gang.classes), gang.domain_label)
        found = self._fits_empty.get(key)
        if found is None:
            groups: list[tuple[int, ...] | None]
            groups = [None] if gang.domain_label is None else list(self.domains(gang.domain_label).values())
            found = any(self._fill_empty(gang, group) for group in groups)
            self._fits_empty[key] = found
        return found

    def _fill_empty(self, gang: GangRequest, group: tuple[int, ...] | None) -> bool:
        plan: dict[int, Vector] = {}
        inside = None if group is None else set(group)
        for cls in gang.classes:
            req = _index_requests(self, cls)
            if req is None:
                return False
            remaining = len(cls.pod_names)
            for n in self.eligible(cls):
                if inside is not None and n not in inside:
                    continue
                cap = [a - b for a, b in zip(self.nodes[n].alloc, plan.get(n, [0] * len(self.index)), strict=True)]
                take = min(max(min((cap[i] // amount for i, amount in req), default=remaining), 0), remaining)
                if take:
                    vec = plan.setdefault(n, [0] * len(self.index))
                    for i, amount in req:
                        vec[i] += amount * take
                    remaining -= take
                if not remaining:
                    break
            if remaining:
                return False
        return True

    def gpu_total(self) -> int:
        """Allocatable GPUs over all nodes (whole GPUs)."""
        if self._gpu is None:
            return 0
        return sum(n.alloc[self._gpu] for n in self.nodes) // 1000


def _index_requests(cluster: Cluster, cls: PodClass) -> list[tuple[int, int]] | None:
    """The class's requests against the cluster's resource index; None if no node offers one of them."""
    out = []
    for name, amount in cls.requests:
        i = cluster.index.get(name)
        if i is None:
            return None
        out.append((i, amount))
    return out


class _Pass:
    """Working state of one admission pass: a copy of free capacity that admissions consume."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.avail: list[Vector] = [list(v) for v in cluster.free]
        self.version = 0
        # (signature, domain) → (version, largest free per resource, total free per resource)
        self._summary: dict[tuple[str, str], tuple[int, Vector, Vector]] = {}

    def summary(self, cls: PodClass, allowed: tuple[int, ...], domain: str) -> tuple[Vector, Vector]:
        key = (cls.signature, domain)
        cached = self._summary.get(key)
        if cached is not None and cached[0] == self.version:
            return cached[1], cached[2]
        width = len(self.cluster.resource_names)
        largest, total = [0] * width, [0] * width
        for n in allowed:
            for i, value in enumerate(self.avail[n]):
                if value > largest[i]:
                    largest[i] = value
                if value > 0:
                    total[i] += value
        self._summary[key] = (self.version, largest, total)
        return largest, total

    def allowed(self, cls: PodClass, domain_nodes: tuple[int, ...] | None) -> tuple[int, ...]:
        eligible = self.cluster.eligible(cls)
        if domain_nodes is None:
            return eligible
        inside = set(domain_nodes)
        return tuple(n for n in eligible if n in inside)

    def _score(self, free: Vector, req: list[tuple[int, int]], n: int) -> tuple[int, float, str]:
        """Best-fit key after placing one pod: fewest GPUs left, then least cpu+memory share left."""
        c = self.cluster
        alloc = c.nodes[n].alloc
        left = {i: free[i] - amount for i, amount in req}
        gpu = max(left.get(c._gpu, free[c._gpu]), 0) if c._gpu is not None else 0
        share = 0.0
        for i in (c._cpu, c._mem):
            if i is not None and alloc[i] > 0:
                share += left.get(i, free[i]) / alloc[i]
        return (gpu, share, c.nodes[n].name)

    def place(
        self, gang: GangRequest, domain_nodes: tuple[int, ...] | None, domain: str
    ) -> tuple[dict[str, str], dict[int, Vector]] | None:
        """Best-fit placement of every pod of the gang on current free capacity, or None."""
        used: dict[int, Vector] = {}
        placement: dict[str, str] = {}
        for cls in gang.classes:
            req = _index_requests(self.cluster, cls)
            if req is None:
                return None
            allowed = self.allowed(cls, domain_nodes)
            largest, _ = self.summary(cls, allowed, domain)
            if any(largest[i] < amount for i, amount in req):
                return None  # no node has room for even one pod of this class
            wanted = len(cls.pod_names)
            candidates: list[tuple[tuple[int, float, str], int, int]] = []
            room = 0
            for n in allowed:
                free = self.avail[n]
                if n in used:
                    free = [a - b for a, b in zip(free, used[n], strict=True)]
                count = min((free[i] // amount for i, amount in req), default=wanted)
                if count > 0:
                    count = min(count, wanted)
                    candidates.append((self._score(free, req, n), n, count))
                    room += count
            if room < wanted:
                return None
            candidates.sort()
            names = iter(cls.pod_names)
            remaining = wanted
            for _, n, count in candidates:
                take = min(count, remaining)
                vec = used.setdefault(n, [0] * len(self.cluster.resource_names))
                for i, amount in req:
                    vec[i] += amount * take
                for _ in range(take):
                    placement[next(names)] = self.cluster.nodes[n].name
                remaining -= take
                if remaining == 0:
                    break
        return placement, used

    def place_gang(self, gang: GangRequest) -> tuple[dict[str, str], dict[int, Vector]] | None:
        if gang.domain_label is None:
            return self.place(gang, None, "")
        domains = self.cluster.domains(gang.domain_label)
        gpu = self.cluster._gpu

        def free_in(nodes: tuple[int, ...]) -> int:
            return sum(self.avail[n][gpu] for n in nodes) if gpu is not None else 0

        # Best fit at the domain level too: the fullest domain that still fits, big domains stay whole.
        for value, nodes in sorted(domains.items(), key=lambda kv: (free_in(kv[1]), kv[0])):
            found = self.place(gang, nodes, f"{gang.domain_label}={value}")
            if found is not None:
                return found
        return None

    def commit(self, used: Mapping[int, Vector]) -> None:
        for n, vec in used.items():
            free = self.avail[n]
            for i, value in enumerate(vec):
                free[i] -= value
        self.version += 1

    def hold_plan(self, gang: GangRequest) -> dict[int, Vector] | None:
        """Nodes the gang would occupy if they were empty, preferring those with the most free now.

        None when the gang cannot fit even on empty nodes (it must never hold capacity).
        """
        c = self.cluster
        groups: list[tuple[int, ...] | None]
        if gang.domain_label is None:
            groups = [None]
        else:
            groups = list(c.domains(gang.domain_label).values())
        best: tuple[int, dict[int, Vector]] | None = None
        for group in groups:
            plan: dict[int, Vector] = {}
            ok = True
            for cls in gang.classes:
                req = _index_requests(c, cls)
                if req is None:
                    return None
                allowed = self.allowed(cls, group)

                def most_free(n: int) -> tuple[int, int, str]:
                    free = self.avail[n]
                    gpu = free[c._gpu] if c._gpu is not None else 0
                    cpu = free[c._cpu] if c._cpu is not None else 0
                    return (-gpu, -cpu, c.nodes[n].name)

                remaining = len(cls.pod_names)
                for n in sorted(allowed, key=most_free):
                    cap = list(c.nodes[n].alloc)
                    if n in plan:
                        cap = [a - b for a, b in zip(cap, plan[n], strict=True)]
                    count = min((cap[i] // amount for i, amount in req), default=remaining)
                    take = min(max(count, 0), remaining)
                    if take:
                        vec = plan.setdefault(n, [0] * len(c.resource_names))
                        for i, amount in req:
                            vec[i] += amount * take
                        remaining -= take
                    if remaining == 0:
                        break
                if remaining:
                    ok = False
                    break
            if ok:
                gpu = c._gpu
                score = sum(self.avail[n][gpu] for n in plan) if gpu is not None else 0
                if best is None or score > best[0]:
                    best = (score, plan)
        return None if best is None else best[1]

    def explain(self, gang: GangRequest, *, never_fits: bool, held_for: str | None) -> str:
        """Why the gang waits, e.g. "needs 8 nvidia.com/gpu on ≤ 2 nodes; largest free 6 (6 in total...)"."""
        c = self.cluster
        pods = len(gang.pods)
        # Headline: the resource that is short for some pod, GPUs if the gang asks for any.
        short: list[str] = []
        largest_of: dict[str, int] = {}
        total_of: dict[str, int] = {}
        n_eligible = 0
        for cls in gang.classes:
            missing = [name for name, _ in cls.requests if name not in c.index]
            if missing:
                return f"no node offers {missing[0]} (requested by pod {cls.pod_names[0]})"
            allowed = self.allowed(cls, None)
            if not allowed:
                return (
                    f"no ready node matches the nodeSelector, node affinity and tolerations of pod {cls.pod_names[0]}"
                )
            n_eligible = max(n_eligible, len(allowed))
            largest, total = self.summary(cls, allowed, "")
            for name, amount in cls.requests:
                i = c.index[name]
                largest_of[name] = max(largest_of.get(name, 0), largest[i])
                total_of[name] = max(total_of.get(name, 0), total[i])
                if largest[i] < amount and name not in short:
                    short.append(name)
        wanted = gang.total_requests
        # Too little in aggregate is the next best explanation after "no node has room for one pod".
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
                f"largest free {_fmt(head, largest_of.get(head, 0))}"
                f" ({_fmt(head, total_of.get(head, 0))} free on {n_eligible} eligible nodes)"
            )
        if never_fits:
            return text + "; cannot fit even on empty nodes (lower the request or add bigger nodes)"
        if gang.domain_label:
            text += f"; all pods must share one value of node label {gang.domain_label}"
        if held_for:
            text += f"; capacity is held for {held_for} (waited longest)"
        return text


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
    held: dict[int, Vector] = {}
    for gang in sorted(queue, key=lambda g: g.rank):
        if blocked_by is not None:
            waiting[gang.key] = f"waiting behind {blocked_by} (strict FIFO)"
            next_waited[gang.key] = waited.get(gang.key, 0) + 1
            continue
        found = work.place_gang(gang)
        if found is not None:
            placement, used = found
            work.commit(used)
            admitted[gang.key] = placement
            continue
        passes = waited.get(gang.key, 0)
        never_fits = not cluster.fits_empty(gang)
        if not never_fits and not policy.backfill:
            blocked_by = gang.key
        reason = work.explain(gang, never_fits=never_fits, held_for=reserved_for)
        if not never_fits and policy.backfill and reserved_for is None and passes >= policy.starvation_passes:
            plan = work.hold_plan(gang)
            if plan is not None:
                reserved_for, held = gang.key, plan
                # Gangs ranked below see the held capacity as used (commit also invalidates summaries).
                work.commit(plan)
                reason += f"; capacity reserved on {len(plan)} node(s) after waiting {passes} passes"
        waiting[gang.key] = reason
        next_waited[gang.key] = passes + 1
    held_out = {
        cluster.nodes[n].name: {cluster.resource_names[i]: Decimal(v) / _SCALE for i, v in enumerate(vec) if v}
        for n, vec in held.items()
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
