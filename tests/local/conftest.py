"""Fixtures for the local control plane tests: one running cluster per module and the official client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from local_helpers import core_api

from kubelocal.cluster import LocalClusterThread
from kubelocal.controllers import ControllerSettings


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterThread]:
    """Two ordinary nodes plus a tainted `lossy` node that only node-loss tests use."""
    workdir = tmp_path_factory.mktemp("cluster")
    with LocalClusterThread(nodes="2x{cpu:8,memory:16Gi};lossy{cpu:2,memory:4Gi,taint:lossy=true:NoSchedule}",
                            workdir=workdir, crds=(), restart_backoff=(0.1, 0.4), max_grace_seconds=3.0,
                            controllers=ControllerSettings(node_monitor_grace=4.0)) as c:
        yield c


@pytest.fixture(scope="module")
def core(cluster: LocalClusterThread) -> Iterator[kubernetes.client.CoreV1Api]:
    api = core_api(cluster.url)
    yield api
    api.api_client.close()


@pytest.fixture
def workdir(cluster: LocalClusterThread) -> Path:
    return cluster.cluster.workdir
