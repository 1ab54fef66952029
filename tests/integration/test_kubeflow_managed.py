"""TFJOB_KUBEFLOW_API=managed: beside a Kubeflow controller that still runs, the operator takes only the
kubeflow.org/v1 jobs handed to it (runPolicy.managedBy tfjob.dev/tfjob-operator) and leaves the rest."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from operator_harness import Cluster, Operator, free_port, local_cluster, py, replica
from polling import wait_for

from kubelocal.cluster import install_crds
from tfjob_operator import apigroups
from tfjob_operator.crd import KUBEFLOW_CRD_PATH

KF = "kubeflow.org"
QUICK = py("import time; time.sleep(0.3)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("kubeflow-managed")) as c:
        c.call(install_crds(c.local.url, [KUBEFLOW_CRD_PATH]))
        op = Operator(c.kubeconfig, c.workdir / "operator.log", TFJOB_KUBEFLOW_API="managed",
                      TFJOB_METRICS_PORT=str(free_port()), TFJOB_METRICS_HOST="127.0.0.1").start()
        yield c
        op.stop()
        assert op.proc is not None and op.proc.returncode in (0, -signal.SIGTERM), op.log()[-3000:]


def last_condition(cluster: Cluster, name: str) -> str | None:
    conditions = cluster.status(name, KF).get("conditions") or []
    return conditions[-1]["type"] if conditions else None


def test_only_jobs_handed_to_the_operator_are_run(cluster: Cluster) -> None:
    kubeflows = cluster.submit({"Worker": replica(QUICK, 1)}, group=KF)
    kubeflows_named = cluster.submit({"Worker": replica(QUICK, 1)}, group=KF,
                                     managedBy=apigroups.MANAGED_BY_KUBEFLOW)
    ours = cluster.submit({"Worker": replica(QUICK, 1)}, group=KF, managedBy=apigroups.MANAGED_BY_TFJOB)
    wait_for(lambda: last_condition(cluster, ours) == "Succeeded", 40, what="the job handed to the operator")
    # Submitted before it, so already seen and left to Kubeflow's controller: no status, no pods.
    for theirs in (kubeflows, kubeflows_named):
        assert cluster.status(theirs, KF) == {} and cluster.pods(theirs) == []
