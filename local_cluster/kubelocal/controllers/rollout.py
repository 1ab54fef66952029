"""The Deployment controller's decisions, as pure functions over plain data: the pod-template hash,
maxSurge/maxUnavailable, and how far to scale each ReplicaSet in one step (rolling or recreate)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: kube's rand.SafeEncodeString alphabet: no vowels (no words), no look-alikes.
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Mapping[str, Any], collision_count: int = 0) -> str:
    """The `pod-template-hash` label value: FNV-1a 32 of the template, safe-encoded as kube does."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in str(value))


def resolve_int_or_percent(value: int | str | None, total: int, *, round_up: bool, default: str) -> int:
    """`maxSurge: 25%` of 10 replicas is 3 (rounded up); `maxUnavailable: 25%` is 2 (rounded down)."""
    raw = default if value is None else value
    if isinstance(raw, str) and raw.endswith("%"):
        share = total * int(raw[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(raw)


def surge_and_unavailable(strategy: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a RollingUpdate; both 0 would deadlock, so unavailable becomes 1."""
    rolling = strategy.get("rollingUpdate") or {}
    surge = resolve_int_or_percent(rolling.get("maxSurge"), replicas, round_up=True, default="25%")
    unavailable = resolve_int_or_percent(rolling.get("maxUnavailable"), replicas, round_up=False, default="25%")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, replicas)


@dataclass(frozen=True)
class SetState:
    """One ReplicaSet as the rollout sees it: its name, wanted replicas and available pods."""

    name: str
    replicas: int
    available: int
    pods: int = 0  # pods that still exist (status.replicas): Recreate waits until old ones are gone


def plan(replicas: int, strategy: Mapping[str, Any], new: SetState, old: Sequence[SetState]) -> dict[str, int]:
    """The replica count each ReplicaSet should get now (only those that change). Old sets oldest first."""
    if (strategy.get("type") or "RollingUpdate") == "Recreate":
        if any(s.replicas for s in old):
            return {s.name: 0 for s in old if s.replicas}
        if any(s.pods for s in old):
            return {}
        return {new.name: replicas} if new.replicas != replicas else {}
    surge, unavailable = surge_and_unavailable(strategy, replicas)
    total = new.replicas + sum(s.replicas for s in old)
    if new.replicas > replicas:
        return {new.name: replicas}
    if new.replicas < replicas:
        room = replicas + surge - total
        up = min(room, replicas - new.replicas)
        if up > 0:
            return {new.name: new.replicas + up}
    # Scale old sets down as far as availability allows: first their unavailable pods, then available ones.
    min_available = replicas - unavailable
    new_unavailable = max(new.replicas - new.available, 0)
    budget = total - min_available - new_unavailable
    changes: dict[str, int] = {}
    targets = {s.name: s.replicas for s in old}
    for s in old:
        if budget <= 0:
            break
        cut = min(budget, max(s.replicas - s.available, 0))
        if cut:
            targets[s.name] -= cut
            budget -= cut
    available = new.available + sum(s.available for s in old)
    down = available - min_available
    for s in old:
        if down <= 0:
            break
        cut = min(down, targets[s.name], s.available)
        if cut:
            targets[s.name] -= cut
            down -= cut
    for s in old:
        if targets[s.name] != s.replicas:
            changes[s.name] = targets[s.name]
    return changes


def conditions(replicas: int, strategy: Mapping[str, Any], new_name: str, *, updated: int, total: int,
               available: int) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) of Available and Progressing, as `kubectl rollout status`, kstatus
    (`helm --wait`) and people read them."""
    unavailable = 0
    if (strategy.get("type") or "RollingUpdate") != "Recreate":
        unavailable = surge_and_unavailable(strategy, replicas)[1]
    if available >= replicas - unavailable:
        avail = ("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        avail = ("Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
    if updated == replicas and total == replicas and available >= replicas:
        progress = ("Progressing", "True", "NewReplicaSetAvailable",
                    f'ReplicaSet "{new_name}" has successfully progressed.')
    else:
        progress = ("Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{new_name}" is progressing.')
    return [avail, progress]
