"""pytest fixtures for testing any operator against a local control plane.

Installed with this distribution it is a pytest plugin (entry point `pytest11`; elsewhere, pass
`-p kubelocal.pytest_plugin`). Name your CRD files in the `kubelocal_crds` fixture (override it in a
conftest), then use `kubelocal_cluster` (a running LocalClusterThread with those CRDs Established) and
`kubelocal_kubeconfig` (a kubeconfig file for kubectl, kopf or the official client). Each test gets its
own cluster: starting one takes well under a second.

`--control-plane upstream` (or `TFJOB_CONTROL_PLANE=upstream`) runs the same fixtures on the real control plane
(kube-apiserver and its peers, built with `make upstream`): a start takes seconds, not a fraction of one; tests
skip, saying how to build it, when it is not built.

The plane is imported by the fixtures that start one, not when pytest loads the plugin: in an environment with
the operator alone (no `[local]` extra, docs/design.md §1) every pytest run still starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kubelocal.planes import CONTROL_PLANES, ENV, choose

if TYPE_CHECKING:
    from kubelocal.cluster import LocalClusterThread


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--control-plane", choices=CONTROL_PLANES, default=None,
                     help=f"the plane kubelocal_cluster runs on (default ${ENV}, else kubelocal)")


def pytest_configure(config: pytest.Config) -> None:
    """`--control-plane` is the session's $TFJOB_CONTROL_PLANE: what else starts a plane (a harness of your own
    calling `kubelocal.planes.choose()`, a `tfjob local` subprocess) follows the same switch."""
    chosen = config.getoption("--control-plane", default=None)
    if chosen:
        os.environ[ENV] = chosen


def usable_control_plane(chosen: str | None = None) -> str:
    """The plane a test runs on (`chosen`, else $TFJOB_CONTROL_PLANE, else kubelocal); on the upstream plane the
    test skips, saying to run `make upstream`, when its binaries are not built."""
    plane = choose(chosen)
    if plane == "upstream":
        from kubelocal.upstream.binaries import BinariesMissing, find

        try:
            find()
        except BinariesMissing as exc:
            pytest.skip(str(exc))
    return plane


@pytest.fixture(scope="session")
def kubelocal_control_plane(request: pytest.FixtureRequest) -> str:
    """`kubelocal` or `upstream`; a test on the upstream plane skips when its binaries are not built."""
    return usable_control_plane(request.config.getoption("--control-plane"))


@pytest.fixture
def kubelocal_crds() -> Sequence[Path]:
    """CRD files installed before the test starts; override in your conftest."""
    return ()


@pytest.fixture
def kubelocal_nodes() -> str | None:
    """Node declaration (see docs/local-cluster.md), e.g. "2x{cpu:8,memory:16Gi}"; None for the default."""
    return None


@pytest.fixture
def kubelocal_cluster(tmp_path: Path, kubelocal_crds: Sequence[Path], kubelocal_nodes: str | None,
                      kubelocal_control_plane: str) -> Iterator[LocalClusterThread]:
    from kubelocal.planes import cluster_thread

    with cluster_thread(kubelocal_control_plane, workdir=tmp_path / "kubelocal", nodes=kubelocal_nodes,
                        crds=tuple(kubelocal_crds), max_grace_seconds=1.0) as cluster:
        yield cluster


@pytest.fixture
def kubelocal_kubeconfig(kubelocal_cluster: LocalClusterThread, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    kubelocal_cluster.write_kubeconfig(path)
    return path
