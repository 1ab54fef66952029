"""TFJOB_KUBEFLOW_API=managed: beside a Kubeflow controller that still runs, the operator takes only the
kubeflow.org/v1 jobs handed to it (runPolicy.managedBy tfjob.dev/tfjob-operator) and leaves the rest."""

from __future__ import annotations

import pytest
from operator_harness import Cluster, py, replica
from polling import wait_for

from tfjob_operator.api import apigroups

KF = "kubeflow.org"
QUICK = py("import time; time.sleep(0.3)")


#: The harness's cluster and operator (tests/integration/conftest.py): Kubeflow's CRD, only jobs handed over.
KUBEFLOW_CRD = True
OPERATOR_SETTINGS = {"TFJOB_KUBEFLOW_API": "managed"}
pytestmark = pytest.mark.usefixtures("operator")


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
