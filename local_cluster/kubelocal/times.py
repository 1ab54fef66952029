"""metav1.Time as the API server writes and reads it: RFC 3339, UTC, second precision."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def now() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime | None = None) -> str:
    """`2026-11-22T01:02:03Z` for `moment` (default: now)."""
    return (moment or now()).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime | None = None) -> str:
    """metav1.MicroTime (Lease renewTime): `2026-11-22T01:02:03.000004Z`."""
    return (moment or now()).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime | None:
    """A time stamp as an aware datetime; None for a missing or malformed value."""
    if not value or not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
