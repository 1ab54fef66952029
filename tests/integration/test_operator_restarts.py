"""The operator SIGKILLed at several points of a job's life, then restarted: no duplicate pods, status converges.

Pod names are deterministic and the status is written before any action, so a new operator process picks up
exactly where the old one died. A pod's uid shows whether it was ever created twice.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from operator_harness import Cluster, Operator, local_cluster, needs_kubelocal, py, replica, wait_for

pytestmark = pytest.mark.timeout(180)

WORKERS = 4


@pytest.fixture
def fresh(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Cluster, Operator]]:
    op = Operator(cluster.kubeconfig, tmp_path / "operator.log")
    yield cluster, op
    op.stop()


def pod_creations(cluster: Cluster, since: int) -> int:
    """Pods the operator created (201) since request number `since` (only the test's job creates pods then)."""
    return sum(1 for r in list(cluster.apiserver.requests)[since:]
               if r.verb == "create" and r.resource == "pods" and r.subresource is None and r.status_code == 201
               and r.user_agent.startswith("tfjob-operator"))


def pod_deletions(cluster: Cluster, since: int) -> int:
    return sum(1 for r in list(cluster.apiserver.requests)[since:]
               if r.verb == "delete" and r.resource == "pods" and r.user_agent.startswith("tfjob-operator"))


def uids(cluster: Cluster, name: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in cluster.pods(name)}


@needs_kubelocal()
def test_killed_after_the_gang_size_was_recorded_creates_each_pod_once(fresh: tuple[Cluster, Operator]) -> None:
    cluster, op = fresh
    since = len(cluster.apiserver.requests)
    # The first pod is created at once, the others hang in the API server, so the kill lands mid-creation.
    cluster.apiserver.faults.delay("POST", r"/namespaces/default/pods$", 0.01, count=1)
    cluster.apiserver.faults.delay("POST", r"/namespaces/default/pods$", 3.0, count=WORKERS - 1)
    op.start()
    name = cluster.submit({"Worker": replica(py("import time; time.sleep(6)"), WORKERS)})
    wait_for(lambda: cluster.pods(name), 30, what="the first pod")
    op.kill()
    before = uids(cluster, name)
    assert len(before) < WORKERS, "the kill should land mid-creation"
    op.start()
    after = wait_for(lambda: len(u := uids(cluster, name)) == WORKERS and u, 30, what="the whole gang")
    assert {n: after[n] for n in before} == before
    # Requests cut by the kill may still complete in the server (499 to the dead client): either way each pod
    # exists once, and none was deleted and recreated.
    assert pod_creations(cluster, since) <= WORKERS and pod_deletions(cluster, since) == 0
    status = cluster.wait_state(name, "Succeeded", timeout=60)
    assert status["restartCount"] == 0
    assert [r for r, _ in cluster.wait_events(name, "JobCreated")].count("JobCreated") == 1


@needs_kubelocal()
def test_killed_while_running_then_restarted_finishes_the_job(fresh: tuple[Cluster, Operator], tmp_path: Path) -> None:
    cluster, op = fresh
    since = len(cluster.apiserver.requests)
    go = tmp_path / "go"
    op.start()
    name = cluster.submit({"Worker": replica(py(f"import pathlib, time\nwhile not pathlib.Path({str(go)!r}).exists():"
                                                " time.sleep(0.1)"), 2)})
    cluster.wait_state(name, "Running")
    before = uids(cluster, name)
    op.kill()
    go.write_text("1")  # the pods finish while no operator is running
    wait_for(lambda: set(cluster.pod_phases(name).values()) == {"Succeeded"}, 20, what="pods succeeded")
    op.start()
    cluster.wait_state(name, "Succeeded")
    assert uids(cluster, name) == before
    assert pod_creations(cluster, since) == 2


@needs_kubelocal()
def test_killed_right_after_deciding_a_gang_restart_restarts_once(fresh: tuple[Cluster, Operator]) -> None:
    cluster, op = fresh
    since = len(cluster.apiserver.requests)
    op.start()
    code = ("import os, sys, time; time.sleep(0.5); "
            "sys.exit(130 if os.environ['TFJOB_ATTEMPT'] == '0' and os.environ['TF_CONFIG'].find('\"index\": 1}') > 0"
            " else (0 if os.environ['TFJOB_ATTEMPT'] != '0' else time.sleep(600)))")
    name = cluster.submit({"Worker": replica(py(code), 2)})
    wait_for(lambda: cluster.status(name).get("restartCount") == 1, 30, what="the restart decided")
    op.kill()
    op.start()
    status = cluster.wait_state(name, "Succeeded", timeout=60)
    assert (status["restartCount"], status["failureRestarts"]) == (1, 1)
    assert {p.metadata.labels["tfjob.dev/attempt"] for p in cluster.pods(name)} <= {"1"}
    assert pod_creations(cluster, since) == 4  # two attempts of two pods, nothing more


def test_kopf_run_of_the_handlers_module_works_too(cluster: Cluster, tmp_path: Path) -> None:
    kopf = [str(Path(sys.executable).parent / "kopf"), "run", "-m", "tfjob_operator.serving.handlers",
            "--all-namespaces", "--standalone"]
    op = Operator(cluster.kubeconfig, tmp_path / "kopf.log", command=kopf).start()
    try:
        name = cluster.submit({"Worker": replica(py("pass"), 2)})
        cluster.wait_state(name, "Succeeded")
    finally:
        op.stop()


@needs_kubelocal()
def test_node_loss_restarts_the_gang_and_force_deletes_pods_stuck_terminating(tmp_path: Path) -> None:
    with local_cluster(tmp_path, nodes="node-a{cpu:4,memory:8Gi};node-b{cpu:4,memory:8Gi}") as cluster:
        op = Operator(cluster.kubeconfig, tmp_path / "operator.log").start()
        try:
            code = "import os, sys, time; sys.exit(0) if os.environ['TFJOB_ATTEMPT'] != '0' else time.sleep(600)"
            name = cluster.submit({"Worker": replica(py(code), 2, resources={})})
            cluster.wait_state(name, "Running")
            node = cluster.pods(name)[1].spec.node_name
            cluster.call(cluster.local.kubelet.lose_node(node))
            status = cluster.wait_state(name, "Succeeded", timeout=60)
            assert (status["restartCount"], status["failureRestarts"]) == (1, 0)
            assert "NodeLost" in cluster.event_reasons(name)
            forced = [r for r in cluster.apiserver.requests if r.verb == "delete" and r.resource == "pods"
                      and r.user_agent.startswith("tfjob-operator")]
            assert forced, "the operator deleted the old attempt"
            assert all(p.metadata.labels["tfjob.dev/attempt"] == "1" for p in cluster.pods(name))
        finally:
            op.stop()
