"""One local cluster per module whose garbage collector waits a visible moment, and the official clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from controller_helpers import GC_DELAY

from kubelocal.cluster import LocalClusterThread
from kubelocal.controllers import ControllerSettings


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterThread]:
    workdir = tmp_path_factory.mktemp("cluster")
    settings = ControllerSettings(gc_delay=GC_DELAY, node_monitor_grace=2.0)
    with LocalClusterThread(nodes="2x{cpu:8,memory:16Gi};lossy{cpu:2,memory:4Gi,taint:lossy=true:NoSchedule}",
                            workdir=workdir, restart_backoff=(0.1, 0.4), max_grace_seconds=3.0,
                            controllers=settings) as c:
        yield c


@pytest.fixture(scope="module")
def api(cluster: LocalClusterThread) -> Iterator[kubernetes.client.ApiClient]:
    config = kubernetes.client.Configuration()
    config.host = cluster.url
    client = kubernetes.client.ApiClient(config)
    yield client
    client.close()


@pytest.fixture(scope="module")
def core(api: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(api: kubernetes.client.ApiClient) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(api)


@pytest.fixture(scope="module")
def batch(api: kubernetes.client.ApiClient) -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(api)


@pytest.fixture
def workdir(cluster: LocalClusterThread) -> Path:
    return cluster.cluster.workdir
