"""End-to-end fixtures: the local control plane, the real operator, and real TensorFlow worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import Cluster, Operator, local_cluster

REPO = Path(__file__).resolve().parents[2]


def example(name: str, **changes: Any) -> dict[str, Any]:
    """An example manifest as a user would copy it, with `changes` applied to its spec."""
    manifest = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
    manifest["spec"].update(changes)
    return manifest


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


def apply(cluster: Cluster, manifest: dict[str, Any]) -> str:
    cluster.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", manifest)
    return str(manifest["metadata"]["name"])
