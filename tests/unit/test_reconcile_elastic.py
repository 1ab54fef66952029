"""An elastic job's life as a sequence of reconciles (the table in test_reconcile.py pins each step alone): the
gang loses a node and goes 4 → 3, then widens back to 4 only after the room has lasted and the cooldown passed,
with no backoffLimit used; and `tfjob status` shows the width."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tfjob_operator.api import constants
from tfjob_operator.client.jobs import describe
from tfjob_operator.reconcile import CreateObject, Decision, DeletePod, EmitEvent, GangView, ReconcileOptions, reconcile

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Cluster:
    """The job and its pods as the API server would hold them after the operator's actions: created pods run at
    once, deleted pods are gone at once; `fits` is the widest width the gang view says fits."""

    def __init__(self) -> None:
        self.job: dict[str, Any] = {
            "apiVersion": "tfjob.dev/v1", "kind": "TFJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "generation": 1, "annotations": {}},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4, "restartPolicy": "ExitCode", "template": {
                "spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}}},
                "runPolicy": {"backoffLimit": 0},
                "elasticPolicy": {"minReplicas": 2, "maxReplicas": 4, "resizeCooldownSeconds": 300}},
            "status": {},
        }
        self.pods: dict[str, dict[str, Any]] = {}
        self.fits = 4
        self.events: list[str] = []

    def step(self, seconds: float) -> Decision:
        decision = reconcile(self.job, list(self.pods.values()), T0 + timedelta(seconds=seconds),
                             ReconcileOptions(gang=GangView(fits_workers=self.fits)))
        self.job["status"] = decision.status.model_dump(mode="json")
        for action in decision.actions:
            if isinstance(action, CreateObject) and action.kind == "Pod":
                pod = action.obj
                pod["status"] = {"phase": "Running", "containerStatuses": [{"name": "tensorflow",
                                                                             "state": {"running": {}}}]}
                pod["spec"]["nodeName"] = f"gpu-{pod['metadata']['labels'][constants.LABEL_REPLICA_INDEX]}"
                self.pods[action.name] = pod
            elif isinstance(action, DeletePod):
                self.pods.pop(action.name, None)
            elif isinstance(action, EmitEvent):
                self.events.append(f"{action.reason}: {action.message}")
        return decision

    def settle(self, seconds: float) -> Decision:
        """Reconcile until nothing changes (the pods' watch events would trigger these)."""
        for _ in range(6):
            before = (dict(self.job["status"]), set(self.pods))
            decision = self.step(seconds)
            if (self.job["status"], set(self.pods)) == before:
                return decision
        return decision

    def lose_node(self, name: str) -> None:
        self.pods[name]["status"] = {"phase": "Unknown", "reason": "NodeLost", "message": "node stopped posting"}

    @property
    def width(self) -> int:
        return int(self.job["status"]["elastic"]["currentReplicas"])


def test_lose_a_node_shrink_to_3_then_widen_back_to_4_after_the_cooldown() -> None:
    cluster = Cluster()
    cluster.settle(0)
    assert (cluster.width, len(cluster.pods), cluster.job["status"]["state"]) == (4, 4, "Running")

    cluster.fits = 3
    cluster.lose_node("j-worker-3")
    cluster.settle(100)
    status = cluster.job["status"]
    assert (cluster.width, len(cluster.pods), status["state"]) == (3, 3, "Running")
    assert (status["restartCount"], status["failureRestarts"]) == (1, 0)  # backoffLimit 0 and still running
    assert "Resized: 4 → 3 workers: node gpu-3 lost" in cluster.events
    assert status["elastic"]["summary"] == "3/4 (min 2)"

    cluster.fits = 4  # the node is back: widen only after 60 s of room and 300 s since the resize
    decision = cluster.settle(150)
    assert cluster.width == 3 and decision.requeue_after == 250  # the cooldown ends at 400
    cluster.fits = 3  # the room goes away again: no flapping
    cluster.settle(200)
    assert cluster.job["status"]["elastic"]["widerSince"] is None
    cluster.fits = 4
    assert cluster.settle(380).requeue_after == 60  # room seen again at 380: stable at 440
    cluster.settle(439)
    assert cluster.width == 3
    cluster.settle(440)
    status = cluster.job["status"]
    assert (cluster.width, len(cluster.pods), status["state"]) == (4, 4, "Running")
    assert (status["restartCount"], status["failureRestarts"], status["elastic"]["resizes"]) == (2, 0, 2)
    assert any(e.startswith("Resized: 3 → 4 workers: room for 4 workers for 60 s") for e in cluster.events)

    text = describe({**cluster.job, "metadata": {**cluster.job["metadata"]}}, [])
    assert "elastic: 4/4 workers (min 2), 2 resizes, last 2026-01-01T12:07:20Z" in text


def test_a_node_lost_as_a_cluster_shows_it_peers_first_then_the_node_shrinks_with_no_backoff_used() -> None:
    """On a real node loss the peers notice first (exit 200 'peer lost' within a second), the node is found lost
    after kube's node-monitor-grace-period (50 s), the taint manager evicts its pod at once (the pods tolerate the
    unreachable taint 0 s), and that pod then stays Terminating (no kubelet confirms): the gang still goes 4 → 3
    as a disruption, without waiting for that pod, and backoffLimit 0 is not touched."""
    cluster = Cluster()
    cluster.settle(0)
    for pod in cluster.pods.values():
        assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 0} in pod["spec"]["tolerations"]
    finished = (T0 + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for i in range(3):
        cluster.pods[f"j-worker-{i}"]["status"] = {"phase": "Failed", "containerStatuses": [{
            "name": "tensorflow", "state": {"terminated": {"exitCode": 200, "finishedAt": finished}}}]}
    cluster.settle(10.5)
    cluster.settle(55)  # the node is not found lost yet: still waiting for the cause, not counting a failure
    status = cluster.job["status"]
    assert (status["state"], status.get("failureRestarts", 0)) == ("Running", 0)

    cluster.fits = 3
    found = (T0 + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")  # 50 s after the loss at 10 s
    lost = cluster.pods["j-worker-3"]
    lost["metadata"]["deletionTimestamp"] = found
    lost["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                                     "lastTransitionTime": found}]
    cluster.settle(60)
    status = cluster.job["status"]
    attempt1 = sorted(n for n, p in cluster.pods.items() if p["metadata"]["labels"][constants.LABEL_ATTEMPT] == "1")
    assert (cluster.width, attempt1, status["state"]) == (3, ["j-worker-0", "j-worker-1", "j-worker-2"], "Running")
    assert (status["restartCount"], status["failureRestarts"]) == (1, 0)
    assert "Resized: 4 → 3 workers: node gpu-3 lost" in cluster.events


def test_a_short_cooldown_widens_as_soon_as_it_is_over_not_after_the_60_s_window() -> None:
    """resizeCooldownSeconds 20 (as examples/mnist-elastic.yaml): room that has lasted 20 s, 20 s after the last
    resize, widens; the job looks again within 20 s while narrower."""
    cluster = Cluster()
    cluster.job["spec"]["elasticPolicy"]["resizeCooldownSeconds"] = 20
    cluster.settle(0)
    cluster.fits = 3
    cluster.lose_node("j-worker-3")
    cluster.settle(100)
    assert cluster.width == 3
    decision = cluster.step(105)
    assert decision.requeue_after is not None and decision.requeue_after <= 20
    cluster.fits = 4
    cluster.settle(120)  # room first seen
    assert cluster.width == 3
    cluster.settle(141)
    assert cluster.width == 4
    assert any(e.startswith("Resized: 3 → 4 workers: room for 4 workers for 21 s") for e in cluster.events)
