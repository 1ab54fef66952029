"""The operator under a cluster's asynchrony: garbage collection after the DELETE returns, namespaces that
drain, pods refused by admission. Each race a real cluster has, exercised against the local one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from operator_harness import Cluster, local_cluster, py, replica, wait_for
from polling import poll_until

from kubelocal.controllers import ControllerSettings

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("operator")]
#: The garbage collector lags this long, so the old job's pods visibly outlive it.
GC_DELAY = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("cluster"), controllers=ControllerSettings(gc_delay=GC_DELAY)) as c:
        yield c

QUICK = py("import time; time.sleep(0.5)")
FOREVER = py("import time; time.sleep(600)")


def _running(cluster: Cluster, name: str) -> list[str]:
    return [n for n, phase in cluster.pod_phases(name).items() if phase in ("Pending", "Running")]


def test_a_gang_whose_pods_name_a_missing_service_account_fails_clearly_and_leaves_nothing_running(
        cluster: Cluster) -> None:
    name = cluster.submit({"PS": replica(FOREVER), "Worker": replica(FOREVER, 2, serviceAccountName="robot")})
    status = cluster.wait_state(name, "Failed")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert 'serviceaccount "robot" not found' in failed["message"], failed
    wait_for(lambda: not _running(cluster, name), 30, what="no pod of the refused gang left running")


def test_resubmitting_a_job_under_the_same_name_while_its_pods_terminate_runs_the_new_one(
        cluster: Cluster) -> None:
    name = cluster.submit({"Worker": replica(FOREVER, 2)})
    wait_for(lambda: len([p for p in cluster.pod_phases(name).values() if p == "Running"]) == 2, 30,
             what="the first job's pods to run")
    old_uid = cluster.job(name)["metadata"]["uid"]  # type: ignore[index]
    cluster.custom.delete_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", name)
    wait_for(lambda: cluster.job(name) is None, 10, what="the first job to be deleted")
    assert cluster.pods(name), "the old pods must still be there when the new job arrives"
    cluster.submit({"Worker": replica(QUICK, 2)}, name=name)
    status = cluster.wait_state(name, "Succeeded", timeout=60)
    assert cluster.job(name)["metadata"]["uid"] != old_uid  # type: ignore[index]
    assert status["replicaStatuses"]["Worker"]["succeeded"] >= 1


def test_a_job_deleted_by_its_ttl_can_be_submitted_again_under_the_same_name(cluster: Cluster) -> None:
    # A TTL of a few seconds leaves a window to see Succeeded; with 0 the job can be gone before a poll sees it.
    name = cluster.submit({"Worker": replica(QUICK, 2)}, ttlSecondsAfterFinished=2)
    cluster.wait_state(name, "Succeeded")
    wait_for(lambda: cluster.job(name) is None, 30, what="the TTL to delete the job")
    cluster.submit({"Worker": replica(QUICK, 2)}, name=name)
    cluster.wait_state(name, "Succeeded", timeout=60)


def test_a_job_submitted_before_its_namespace_has_a_default_account_waits_for_it_and_runs(cluster: Cluster) -> None:
    ns = f"fresh-{uuid.uuid4().hex[:6]}"
    with cluster.service_accounts_paused():  # the account comes late
        cluster.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        body = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "early"},
                "spec": {"tfReplicaSpecs": {"Worker": replica(QUICK, 2)}}}
        cluster.custom.create_namespaced_custom_object("tfjob.dev", "v1", ns, "tfjobs", body)
        failed = poll_until(lambda: _state(cluster, ns) == "Failed", 5)
        assert not failed, "a namespace whose default account is still pending failed the job"
        assert not cluster.core.list_namespaced_pod(ns).items, "the pods were refused while the account was missing"
    wait_for(lambda: _state(cluster, ns) == "Succeeded", 60, what="the job to run once the account exists")


def _state(cluster: Cluster, ns: str) -> str | None:
    job = cluster.custom.get_namespaced_custom_object("tfjob.dev", "v1", ns, "tfjobs", "early")
    return (job.get("status") or {}).get("state")  # type: ignore[no-any-return]


def test_a_gang_whose_pods_exceed_the_namespaces_quota_fails_clearly_and_leaves_nothing_running(
        cluster: Cluster) -> None:
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-cpu"},
             "spec": {"hard": {"requests.cpu": "2"}}}  # room for two of the three workers
    cluster.core.create_namespaced_resource_quota("default", quota)
    try:
        worker = replica(FOREVER, 3)
        worker["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        name = cluster.submit({"Worker": worker})
        status = cluster.wait_state(name, "Failed")
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert "exceeded quota: team-cpu" in failed["message"], failed
        wait_for(lambda: not _running(cluster, name), 30, what="no pod of the refused gang left running")
    finally:
        cluster.core.delete_namespaced_resource_quota("team-cpu", "default", _preload_content=False)
