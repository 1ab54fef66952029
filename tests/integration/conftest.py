"""Fixtures: a local control plane and the real operator as a subprocess (see operator_harness)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from operator_harness import Cluster, Operator, free_port, local_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> Iterator[Operator]:
    """One operator for the module's tests (each test uses its own job names)."""
    op = Operator(cluster.kubeconfig, cluster.workdir / "operator.log",
                  TFJOB_METRICS_PORT=str(free_port()), TFJOB_METRICS_HOST="127.0.0.1",
                  TFJOB_LIVENESS_PORT=str(free_port()), TFJOB_LIVENESS_HOST="127.0.0.1").start()
    yield op
    op.stop()
    if op.proc is not None:
        assert op.proc.returncode in (0, -signal.SIGTERM), op.log()[-3000:]
