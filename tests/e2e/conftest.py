"""End-to-end fixtures: the local control plane, the real operator, and real TensorFlow worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from operator_harness import Cluster, Operator, local_cluster


@pytest.fixture(scope="module")
def e2e_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local cluster with one roomy node and the operator in loopback mode, shared by a module's tests."""
    workdir = tmp_path_factory.mktemp("e2e")
    with local_cluster(workdir, nodes="1x{cpu:64,memory:128Gi}") as cluster:
        op = Operator(cluster.kubeconfig, workdir / "operator.log").start()
        try:
            yield cluster
        finally:
            op.stop()
