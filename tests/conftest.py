"""The suite on two workers (`make test` runs `pytest -n 2 --dist loadgroup`, pytest-xdist).

Each test file is one unit of work, so its module fixtures (a control plane, an operator) are made once, on
one worker. The files whose real TensorFlow gangs are timed against the clock (a node lost, a pod deleted mid
epoch, a partition) form one unit of their own: they run one after another, never beside each other, and
first, so the longest unit does not start last. A plain `pytest` (no -n) runs in file order as before.
"""

from __future__ import annotations

import pytest

#: Run one after another on one worker, from the start of the run (longest first).
TIMED_GANGS = (
    "tests/e2e/test_elastic_local.py",
    "tests/e2e/test_graceful_preemption.py",
    "tests/e2e/test_local_pod_network.py",
)
TIMED_GROUP = "timed-tensorflow-gangs"


@pytest.hookimpl(tryfirst=True)  # before xdist names each test's group in its node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # set on the workers of a `--dist loadgroup` run
        return
    for item in items:
        path = item.nodeid.partition("::")[0]
        if not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(TIMED_GROUP if path in TIMED_GANGS else path))
    # xdist hands out units in the order their first test is collected: the timed gangs' unit first.
    items.sort(key=lambda item: item.nodeid.partition("::")[0] not in TIMED_GANGS)
