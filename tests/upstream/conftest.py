"""The upstream tier: the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler v1.37,
built with `make upstream`) with kubelocal's nodes. A test that needs the binaries skips, saying how to build them,
when they are not there (`TFJOB_UPSTREAM_BIN` names a directory holding them instead)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from upstream_helpers import Kubectl

from kubelocal.upstream.binaries import BinariesMissing, find
from kubelocal.upstream.cluster import UpstreamClusterThread
from tfjob_operator.api.crd import CRD_PATH

#: A process node, a node labelled with a key only an administrator may set, and two simulated nodes.
NODES = "node-0{cpu:8,memory:16Gi};tagged{cpu:2,memory:4Gi,label:node-role.kubernetes.io/tagged=};2xsim{sim:true}"


@pytest.fixture(scope="session")
def upstream_binaries() -> dict[str, Path]:
    try:
        return find()
    except BinariesMissing as exc:
        pytest.skip(f"the upstream plane is not built: {exc}")


@pytest.fixture(scope="module")
def upstream(upstream_binaries: dict[str, Path],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamClusterThread]:
    workdir = tmp_path_factory.mktemp("upstream")
    with UpstreamClusterThread(workdir=workdir, nodes=NODES, crds=(CRD_PATH,), pod_network="auto",
                               max_grace_seconds=2.0, binaries=upstream_binaries) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kubeconfig(upstream: UpstreamClusterThread, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kubeconfig") / "kubeconfig"
    upstream.write_kubeconfig(path)
    return path


@pytest.fixture(scope="module")
def kubectl(kubeconfig: Path) -> Kubectl:
    return Kubectl(kubeconfig)
