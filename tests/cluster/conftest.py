"""Fixtures for the real-cluster tier: skipped when KUBECONFIG is unset; when it is set, the cluster it names
must be reachable and have the TFJob CRD, or every test here fails (a typo must not pass as "skipped").

Run (see docs/deploy.md for kind/k3d set-up):
    KUBECONFIG=~/.kube/config TFJOB_WORKER_IMAGE=ghcr.io/tfjob-operator/tfjob-worker:dev \\
        .venv/bin/pytest tests/cluster -v
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from cluster_helpers import RealCluster


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        pytest.skip("no KUBECONFIG: the real-cluster tier runs only against a cluster you name")
    from kubernetes import client, config

    try:
        api = config.new_client_from_config(kubeconfig)
        client.VersionApi(api).get_code(_request_timeout=5)
        custom = client.CustomObjectsApi(api)
        custom.list_cluster_custom_object("tfjob.dev", "v1", "tfjobs", limit=1, _request_timeout=5)
    except Exception as exc:  # unreachable cluster, or no CRD: the cluster the user named cannot run these
        pytest.fail(f"KUBECONFIG={kubeconfig} names a cluster not usable for tfjob tests "
                    f"({exc.__class__.__name__}: {exc}); install the operator there (docs/deploy.md) "
                    "or unset KUBECONFIG to skip this tier", pytrace=False)
    core = client.CoreV1Api(api)
    namespace = f"tfjob-cluster-test-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "tfjob-shared"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })
    try:
        yield RealCluster(core, custom, namespace, kubeconfig,
                          os.environ.get("TFJOB_WORKER_IMAGE", "ghcr.io/tfjob-operator/tfjob-worker:dev"))
    finally:
        core.delete_namespace(namespace)
