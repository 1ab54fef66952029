"""Test hooks: fault injection (fail, delay, drop watches) and the record of every request served."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web


@dataclass(frozen=True)
class RequestRecord:
    """One served request, as RBAC would see it (a namespaced list across namespaces has namespace None)."""

    method: str
    verb: str  # get/list/watch/create/update/patch/delete/deletecollection (non-resource: the lowercased method)
    group: str | None  # None for non-resource URLs such as /version, /apis
    version: str | None
    resource: str | None
    subresource: str | None
    namespace: str | None
    name: str | None
    user_agent: str
    status_code: int
    path: str = ""


# Each request carries its recorder: a streaming response records its status when the stream starts.
RECORD: web.RequestKey[Callable[[int], None]] = web.RequestKey("record")


@dataclass
class _Rule:
    method: str
    pattern: re.Pattern[str]
    count: int
    status: int = 0
    seconds: float = 0.0
    agent: re.Pattern[str] | None = None

    def matches(self, method: str, path: str, user_agent: str) -> bool:
        return (self.count > 0 and self.method in ("*", method) and bool(self.pattern.search(path))
                and (self.agent is None or bool(self.agent.search(user_agent))))


@dataclass
class FaultInjector:
    """Fail or delay the next N requests matching a method and a path regex; drop live watch streams."""

    _fails: list[_Rule] = field(default_factory=list)
    _delays: list[_Rule] = field(default_factory=list)
    _drop_watches: Callable[[], int] | None = None
    _expire_watches: Callable[[], int] | None = None

    def fail(self, method: str, path_regex: str, status: int, count: int = 1, *, agent: str | None = None) -> None:
        """The next `count` matching requests get `status` with a Kubernetes Status body ("*" = any method);
        `agent`, a regex, limits the fault to clients whose User-Agent it matches (e.g. one controller's)."""
        self._fails.append(_Rule(method.upper(), re.compile(path_regex), count, status=status,
                                 agent=re.compile(agent) if agent else None))

    def delay(self, method: str, path_regex: str, seconds: float, count: int = 1, *, agent: str | None = None) -> None:
        """The next `count` matching requests wait `seconds` before being served (`agent` as for `fail`)."""
        self._delays.append(_Rule(method.upper(), re.compile(path_regex), count, seconds=seconds,
                                  agent=re.compile(agent) if agent else None))

    def drop_watches(self) -> int:
        """Abort every open watch connection (as a network blip would); returns how many were dropped."""
        return self._drop_watches() if self._drop_watches else 0

    def expire_watches(self) -> int:
        """Compact the history and drop every watch: each client resumes from a resourceVersion the server no
        longer has, gets 410 Expired and must list again (what etcd compaction does); returns how many."""
        return self._expire_watches() if self._expire_watches else 0

    def clear(self) -> None:
        self._fails.clear()
        self._delays.clear()

    def take_failure(self, method: str, path: str, user_agent: str = "") -> int | None:
        for rule in self._fails:
            if rule.matches(method, path, user_agent):
                rule.count -= 1
                return rule.status
        return None

    def take_delay(self, method: str, path: str, user_agent: str = "") -> float:
        for rule in self._delays:
            if rule.matches(method, path, user_agent):
                rule.count -= 1
                return rule.seconds
        return 0.0


class LogSource(Protocol):
    """Where pods/{name}/log reads from (the kubelet); raise KeyError for an unknown pod or container."""

    def stream(
        self,
        namespace: str,
        pod: str,
        container: str | None,
        *,
        follow: bool,
        tail_lines: int | None,
        previous: bool,
    ) -> AsyncIterator[bytes]: ...
