"""The API requests the operator makes for one 4-worker TFJob, create → Succeeded, by verb and resource.

A count is behaviour, not a timing: a change that adds a request per job (a second status write per pod
transition, an Event per condition, kopf's bookkeeping annotations) fails here. `bench/operator_scale.py` prints
the same figures at scale, with the floor beside them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import watch
from operator_harness import Cluster, Operator, needs_kubelocal, py, replica, wait_for

from tfjob_operator import kube

pytestmark = [needs_kubelocal(), pytest.mark.timeout(120)]

WORKERS = 4
QUICK = py("import time; time.sleep(0.5)")
#: Worker 0 decides the outcome at once; the others would run on, until the clean-up deletes them.
ZERO_QUICK = py("import json, os, time; time.sleep(0.5 if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 0"
                " else 120)")


@pytest.fixture(params=["builtin", "none"])
def backend(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    start = len(cluster.apiserver.requests)
    op = Operator(cluster.kubeconfig, tmp_path / "operator.log", TFJOB_GANG_BACKEND=request.param).start()
    # Its start-up (discovery, the initial lists) is per operator, not per job: counting begins once it watches:
    # TFJobs through kopf, pods through its own informer (under builtin, the admission loop's watch of every pod,
    # beside its watch of nodes).
    wait_for(lambda: {r.resource for r in list(cluster.apiserver.requests)[start:]
                      if r.user_agent.startswith("kopf") and r.verb == "watch"} >= {"tfjobs"},
             30, what="the operator's watch of TFJobs")
    own = {"nodes", "pods"} if request.param == "builtin" else {"pods"}
    wait_for(lambda: {r.resource for r in list(cluster.apiserver.requests)[start:]
                      if r.user_agent == kube.USER_AGENT and r.verb == "watch"} >= own,
             30, what="the operator's own watches")
    yield request.param
    op.stop()


def requests_by_verb(cluster: Cluster, since: int) -> collections.Counter[str]:
    """The operator's requests since request number `since`, as "verb resource[/subresource]" (watches aside:
    they are per operator, not per job)."""
    counts: collections.Counter[str] = collections.Counter()
    for r in list(cluster.apiserver.requests)[since:]:
        if (r.user_agent.startswith("kopf") or r.user_agent == kube.USER_AGENT) and r.verb != "watch":
            counts[f"{r.verb} {r.resource}" + (f"/{r.subresource}" if r.subresource else "")] += 1
    return counts


def test_one_job_costs_its_pods_one_service_two_events_and_at_most_three_status_writes(
        cluster: Cluster, backend: str) -> None:
    since = len(cluster.apiserver.requests)
    # cleanPodPolicy None: no clean-up deletes racing the workers' own exits, so the count is exact.
    name = cluster.submit({"Worker": replica(QUICK, WORKERS)}, cleanPodPolicy="None")
    cluster.wait_state(name, "Succeeded")
    # The last pod counts reach the status at most a second after the state (counts alone are batched).
    wait_for(lambda: (cluster.status(name).get("replicaStatuses") or {}).get("Worker", {}).get("succeeded")
             == WORKERS, 10, what="the final pod counts in the status")
    # The Events go out after the status they announce, in the background.
    cluster.wait_events(name, "JobCreated", "WorkerSucceeded")
    counts = requests_by_verb(cluster, since)
    releases = WORKERS if backend == "builtin" else 0
    assert counts["create pods"] == WORKERS and counts["create services"] == 1
    assert counts["patch pods"] == releases  # the builtin gang's release: one merge PATCH per gated pod
    assert counts["create events"] == 2  # JobCreated and WorkerSucceeded
    # Nothing is written to the job itself: each pod records the gang size and ports; nothing of kopf's.
    assert counts["patch tfjobs"] == 0
    assert counts["patch tfjobs/status"] <= 3  # Running, Succeeded, the last pod counts (Created rides along)
    # Nothing is read per job: reconcile reads kopf's index of TFJobs and the operator's of pods, the builtin
    # admission pass the free capacity it keeps from its watches of nodes and pods (listed once, at start).
    reads = {k: v for k, v in counts.items() if k.startswith(("get ", "list "))}
    assert reads == {}
    assert sum(counts.values()) <= releases + WORKERS + 1 + 2 + 3, counts


def test_the_outcome_is_written_with_the_counts_the_clean_up_leaves(cluster: Cluster, backend: str) -> None:
    name = cluster.submit({"Worker": replica(ZERO_QUICK, WORKERS)}, cleanPodPolicy="Running")
    outcome = None
    for event in watch.Watch().stream(cluster.custom.list_namespaced_custom_object, "tfjob.dev", "v1", "default",
                                      "tfjobs", timeout_seconds=60):
        obj = event["object"]
        if obj["metadata"]["name"] == name and (obj.get("status") or {}).get("state") == "Succeeded":
            outcome = obj["status"]
            break
    assert outcome is not None, "no Succeeded status within 60 s"
    # The first status that says Succeeded already counts the workers still running as gone (cleanPodPolicy
    # Running deletes them): no write of the last counts follows the deletes.
    counts = outcome["replicaStatuses"]["Worker"]
    assert (counts.get("active", 0), counts.get("ready", 0), counts.get("succeeded", 0)) == (0, 0, 1), outcome
    assert outcome["workers"] == f"0/{WORKERS}"
    wait_for(lambda: [p.metadata.name for p in cluster.core.list_namespaced_pod(
        "default", label_selector=f"tfjob.dev/job-name={name}").items] == [f"{name}-worker-0"], 60,
             what="the running workers deleted")
    assert cluster.status(name)["replicaStatuses"]["Worker"] == counts
