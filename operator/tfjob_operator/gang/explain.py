"""Why a gang waits: the reason its Queued condition shows, and what kind of wait it is.

The kind (:class:`WaitKind`) is what code reads (metrics, whether the wait is worth showing yet); the message
is for people, e.g. "needs 8 nvidia.com/gpu on ≤ 2 nodes; largest free 6 (10 free on 4 eligible nodes)".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tfjob_operator.gang.caches import PassCapacity
from tfjob_operator.gang.request import GangRequest, decimal_of
from tfjob_operator.gang.resources import GPU, format_amount


class WaitKind(StrEnum):
    """What a gang waits for."""

    #: Its pods are still being created (a wait of milliseconds nobody needs to hear about).
    CREATING = "Creating"
    #: Requeued after a schedule timeout, until its back-off ends.
    BACKOFF = "BackOff"
    #: It fits an empty cluster but not the free capacity now (or strict FIFO holds it behind another gang).
    NO_ROOM = "NoRoom"
    #: It cannot fit even on empty nodes: no node offers a resource, none matches its constraints, or too small.
    NEVER_FITS = "NeverFits"


@dataclass(frozen=True)
class GangWait:
    """One waiting gang's reason."""

    kind: WaitKind
    message: str

    @property
    def shown(self) -> bool:
        """Worth a Queued condition: anything but a gang whose pods are still being created."""
        return self.kind is not WaitKind.CREATING


def _fmt(name: str, amount: int) -> str:
    return format_amount(name, decimal_of(amount))


class Reasons:
    """Waiting reasons for one pass, cached: long queues hold many gangs of one shape, and their reasons are equal
    until capacity changes (the change log's length stands for the free capacity)."""

    def __init__(self, work: PassCapacity):
        self.work = work
        self._cache: dict[tuple[Any, ...], str] = {}

    def explain(self, gang: GangRequest, *, never_fits: bool, held_for: str | None) -> GangWait:
        """Why the gang waits on the pass's free capacity now."""
        kind = WaitKind.NEVER_FITS if never_fits else WaitKind.NO_ROOM
        c = self.work.cluster
        for cls in gang.classes:
            missing = [name for name, _ in cls.requests if name not in c.index]
            if missing:
                return GangWait(kind, f"no node offers {missing[0]} (requested by pod {cls.pod_names[0]})")
            if not c.eligible(cls).size:
                return GangWait(kind, "no ready node matches the nodeSelector, node affinity and tolerations of "
                                      f"pod {cls.pod_names[0]}")
        key = (gang.shape, gang.domain_label, never_fits, held_for, len(self.work.changes))
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._explain(gang, never_fits=never_fits, held_for=held_for)
        return GangWait(kind, found)

    def _explain(self, gang: GangRequest, *, never_fits: bool, held_for: str | None) -> str:
        c = self.work.cluster
        pods = len(gang.pods)
        short: list[str] = []
        largest_of: dict[str, int] = {}
        total_of: dict[str, int] = {}
        n_eligible = 0
        for cls in gang.classes:
            allowed = c.eligible(cls)
            n_eligible = max(n_eligible, int(allowed.size))
            largest, total = self.work.summary(cls, allowed, "")
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
