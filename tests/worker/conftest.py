"""Worker tests: the worker_image package and this directory's helpers on sys.path; a process launcher."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for path in (HERE.parents[1] / "worker_image", HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from procs import Launcher  # noqa: E402


@pytest.fixture
def launcher(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Launcher]:
    """Starts worker processes; kills leftovers and prints their logs if the test failed."""
    launch = Launcher(tmp_path)
    yield launch
    launch.close()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(launch.dump())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
