"""Bounded polling for tests: wait for something a user would see, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def poll_until(predicate: Callable[[], T], timeout: float, interval: float = 0.1) -> T:
    """Call `predicate` until it returns something truthy or `timeout` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.1, what: str = "") -> T:
    """Like poll_until, but fail naming what was awaited and the last value seen."""
    value: Any = poll_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}; last value: {value!r}")
    return value  # type: ignore[no-any-return]
