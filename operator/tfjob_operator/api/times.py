"""Kubernetes time stamps (metav1.Time: RFC 3339, UTC, second precision), written and read in one place; and the
clock the controller and the admission loop read."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any


def now() -> datetime:
    return datetime.now(UTC)


class Clock:
    """The one clock a controller and its admission loop read: the wall time (for decisions and time stamps) and a
    monotonic count (for waits, holds and latencies). Tests hand both a fake one."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = Clock()


def format_time(moment: datetime | None = None) -> str:
    """`2026-11-22T01:02:03Z` for `moment` (default: now)."""
    return (moment or now()).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    """A time stamp as an aware datetime; None for a missing or malformed value."""
    if not value or not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
