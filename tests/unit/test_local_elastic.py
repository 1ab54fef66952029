"""`tfjob local`'s elastic view and capacity faults without a cluster: the width, the resize notes, when the node
is lost and restored, and the recovery split read from the resumed chief's `ready` line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tfjob_operator.api import constants
from tfjob_operator.client.local.chief_log import parse_log, plot_history
from tfjob_operator.client.local.elastic import CapacityFaults, Recovery, timeline_text, width_text
from tfjob_operator.client.local.view import job_line


def job(current: int = 3) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "status": {
        "state": "Running", "workers": f"{current}/{current}", "restartCount": 1, "conditions": [],
        "elastic": {"currentReplicas": current, "minReplicas": 2, "maxReplicas": 4}}}


def event(name: str, reason: str, message: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "involvedObject": {"kind": "TFJob", "name": "j"}, "reason": reason,
            "message": message}


def pod(index: int, node: str) -> dict[str, Any]:
    return {"metadata": {"name": f"j-worker-{index}", "labels": {
        constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: str(index)}},
        "spec": {"nodeName": node}, "status": {"phase": "Running"}}


class FakeCluster:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.kubelet = self

    async def lose_node(self, node: str) -> None:
        self.calls.append(f"lose {node}")

    async def restore_node(self, node: str) -> None:
        self.calls.append(f"restore {node}")

    def call(self, coro: Any) -> None:
        try:
            coro.send(None)
        except StopIteration:
            pass


def test_the_width_reads_as_current_of_max_with_min_in_the_job_line() -> None:
    assert width_text(job()) == "workers 3/4 (min 2)"
    assert "workers 3/4 (min 2)  pods 3/3" in job_line(job())
    assert width_text({"status": {}}) is None


def test_the_chief_log_gives_the_resized_width_and_the_start_up_split() -> None:
    progress = parse_log("[tfjob] resumed from backup at epoch 2 step 10 samples 1000\n"
                         "[tfjob] resized from 4 to 3 replicas at samples 1000 policy=ConstantGlobalBatch "
                         "global_batch=96 lr=0.001\n"
                         "[tfjob] ready launch=0.30s tensorflow=20.00s restore=1.10s first_step=2.00s total=23.40s "
                         "began=1000.500\n")
    assert progress.resized == (4, 3)
    assert (progress.resumed_at, progress.resumed_step) == (2, 10)
    assert progress.ready["restore"] == 1.1 and progress.ready["began"] == 1000.5 and progress.ready["total"] == 23.4


def test_the_recovery_splits_loss_to_first_step_into_detection_restart_tf_start_restore() -> None:
    rec = Recovery(lost_at=1000.0, detected_at=1006.0,
                   ready={"began": 1006.5, "restore": 1.0, "total": 20.0})
    assert rec.breakdown() == {"detection": 6.0, "restart": 0.5, "tf_start": 19.0, "restore": 1.0, "total": 26.5}
    assert Recovery(lost_at=1000.0).breakdown() is None


def test_the_timeline_says_each_step_in_seconds_since_the_loss() -> None:
    rec = Recovery(lost_at=1000.0, not_ready_at=1006.2, detected_at=1006.7, running_at=1012.0,
                   ready={"began": 1012.5, "restore": 1.0, "total": 20.0})
    assert timeline_text(rec) == ("node NotReady +6.2s, gang restarted +6.7s, new gang Running +12.0s, "
                                  "first step +32.5s")
    assert timeline_text(Recovery(lost_at=1000.0, detected_at=1006.7)) is None  # not training again yet


def test_the_node_of_the_highest_worker_is_lost_after_the_first_epoch_and_restored_later() -> None:
    notes: list[str] = []
    faults = CapacityFaults(lose_node_after=0, restore_node_after=0, preempt_worker_after=None, note=notes.append)
    cluster, pods = FakeCluster(), [pod(0, "node-0"), pod(3, "node-3"), pod(1, "node-1")]
    faults.tick(cluster, None, [], pods, parse_log(""))
    assert cluster.calls == []  # no epoch yet
    faults.tick(cluster, None, [], pods, parse_log("[tfjob] epoch 1/5 loss=1.0"))
    assert cluster.calls == ["lose node-3"]  # the node returns only once the gang trains again
    # The node's loss and the resize after it, both seen on one tick (the Restarting condition held only the last).
    events = [event("j.1", "NodeLost", "pod j-worker-3 lost its node"), event("j.0", "GangAdmitted", "admitted"),
              event("j.2", "Resized", "4 → 3 workers: node node-3 lost")]
    faults.tick(cluster, None, events, pods, parse_log("[tfjob] epoch 1/5 loss=1.0"), "Restarting")
    assert cluster.calls == ["lose node-3"]  # restarted at 3, TensorFlow still starting: however long that takes
    assert faults.resizes == ["4 → 3 workers: node node-3 lost"]
    assert notes[-2:] == ["NodeLost: pod j-worker-3 lost its node", "Resized: 4 → 3 workers: node node-3 lost"]
    assert faults.recovery is not None and faults.recovery.detected_at is not None
    faults.tick(cluster, None, events, pods, parse_log("[tfjob] epoch 1/5 loss=1.0"))
    assert faults.resizes == ["4 → 3 workers: node node-3 lost"]  # each Event once
    began = time.time() + 1
    faults.tick(cluster, None, events, pods, parse_log(
        "[tfjob] resumed from backup at epoch 2\n[tfjob] resized from 4 to 3 replicas at samples 10\n"
        f"[tfjob] ready restore=1.00s total=5.00s began={began:.3f}\n"))
    assert any(n.startswith("training again ") for n in notes)
    assert "resumed at epoch 2 with 3 replicas (the backup was saved at 4)" in notes
    assert cluster.calls == ["lose node-3", "restore node-3"]  # --restore-node-after 0 after training again
    assert notes[-1] == "node node-3 restored (--restore-node-after)"


def test_a_lost_node_returns_after_the_delay_while_the_job_waits_for_room() -> None:
    notes: list[str] = []
    faults = CapacityFaults(lose_node_after=0, restore_node_after=0, preempt_worker_after=None, note=notes.append)
    cluster = FakeCluster()
    faults.tick(cluster, None, [], [pod(0, "node-0"), pod(1, "node-1")], parse_log("[tfjob] epoch 1/5 loss=1.0"))
    faults.tick(cluster, None, [], [pod(0, "node-0")], parse_log("[tfjob] epoch 1/5 loss=1.0"), "Restarting")
    assert cluster.calls == ["lose node-1"]
    faults.tick(cluster, None, [], [], parse_log("[tfjob] epoch 1/5 loss=1.0"), "Queued")  # a gang that cannot start
    assert cluster.calls == ["lose node-1", "restore node-1"]


def test_the_plot_draws_a_history_with_resized_epochs(tmp_path: Path) -> None:
    history = [{"epoch": 1, "loss": 1.0, "accuracy": 0.5},
               {"epoch": 2, "loss": 0.5, "accuracy": 0.8, "resized_from": 4, "replicas": 3},
               {"epoch": 3, "loss": 0.3, "accuracy": 0.9}]
    out = plot_history(history, tmp_path / "p.png", "j")
    assert out.stat().st_size > 0
