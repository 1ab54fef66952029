"""An elastic job at a width its global batch does not divide, with real TensorFlow processes on loopback.

A job written for 4 workers keeps its global batch at 3: the replicas' shares differ by one, and every example
still counts 1 / global batch in the loss, so the model is the one a single worker trains on the same global
batches. The resize cycle of a lost node (4 → 3 → 4) finishes with batches 10 and 7 a worker, as with 16 (the
e2e test). The steps at which runs stop are chosen with TFJOB_FAULT_HOLD_AT_STEP, not by the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from polling import wait_for
from procs import Launcher, Proc, fields, line, loopback_cluster

from tfjob_worker import exit_codes

pytestmark = pytest.mark.timeout(420)

HOLD = "TFJOB_FAULT_HOLD_AT_STEP"
HOLDING = "[tfjob] fault: holding after step"


def elastic_env(reference: int = 4) -> dict[str, str]:
    """What the operator renders for `elasticPolicy {minReplicas: 2, maxReplicas: 4}` and Worker.replicas 4."""
    return {"TFJOB_ELASTIC_SCALING": "ConstantGlobalBatch", "TFJOB_ELASTIC_REFERENCE_WORKERS": str(reference),
            "TFJOB_ELASTIC_MIN_WORKERS": "2", "TFJOB_ELASTIC_MAX_WORKERS": "4"}


def codes(procs: dict[str, Proc], timeout: float = 240) -> dict[str, int]:
    return {name: p.wait(timeout) for name, p in procs.items()}


def model_weights(out: Path) -> dict[str, np.ndarray]:
    """The model's variables in the chief's epoch-1 checkpoint (the optimizer's slots left out)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(out / "checkpoints" / "epoch-0001" / "ckpt"))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/") and "OPTIMIZER_SLOT" not in n]
    return {n: reader.get_tensor(n) for n in names}


def test_at_3_workers_a_global_batch_of_28_trains_the_model_one_worker_trains_on_the_same_batches(
        launcher: Launcher, tmp_path: Path) -> None:
    args = ["--epochs", "1", "--steps-per-epoch", "30", "--batch-size-per-replica", "7", "--optimizer", "sgd",
            "--learning-rate", "0.05"]
    wide = launcher.start_cluster(loopback_cluster(worker=3), [*args, "--output-dir", str(tmp_path / "at3")],
                                  tag="at3-", env=elastic_env())
    alone = launcher.start_cluster(loopback_cluster(worker=1), [*args, "--output-dir", str(tmp_path / "at1")],
                                   tag="at1-", env=elastic_env())
    assert set(codes(wide).values()) == {0} and codes(alone) == {"worker0": 0}, launcher.dump()
    for procs, width in ((wide, "3"), (alone, "1")):
        start = fields(line(procs["worker0"].stdout, "[tfjob] start") or "")
        assert (start["world_size"], start["global_batch"], start["lr"]) == (width, "28", "0.2")  # 7 x 4; 0.05 x 4
    at3, at1 = model_weights(tmp_path / "at3"), model_weights(tmp_path / "at1")
    assert at3.keys() == at1.keys() and at3
    # The shares 10, 9, 9 each weigh their examples 1/28: the same gradient as one replica's mean over 28.
    # (Averaging each replica's mean instead, as Keras does unweighted, moves the weights by about 1e-3 here.)
    for name in at3:
        np.testing.assert_allclose(at3[name], at1[name], atol=2e-5, err_msg=name)


@pytest.mark.parametrize(("loop", "batch"), [("fit", 10), ("custom-loop", 7)])
def test_a_lost_worker_shrinks_the_job_to_3_it_trains_on_and_widens_back_to_4(
        launcher: Launcher, tmp_path: Path, loop: str, batch: int) -> None:
    out = tmp_path / "out"
    steps = 12  # a reference epoch: 12 global batches of batch x 4
    args = ["--epochs", "3", "--steps-per-epoch", str(steps), "--batch-size-per-replica", str(batch),
            "--output-dir", str(out), *(["--custom-loop"] if loop == "custom-loop" else [])]
    global_batch = str(batch * 4)

    # 4 workers: worker 3 holds mid-epoch 2 and is killed there, as a node loss kills it.
    first = launcher.start_cluster(loopback_cluster(worker=4), args, tag="a-",
                                   env={**elastic_env(), HOLD: f"{steps + 5} task=worker:3"})
    print("T start", __import__("time").monotonic())
    wait_for(lambda: HOLDING in first["worker3"].stderr or first["worker3"].popen.poll() is not None,
             timeout=240, what="worker 3 holding in epoch 2")
    os.killpg(first["worker3"].popen.pid, signal.SIGKILL)
    print("T killed", __import__("time").monotonic())
    survivors = {name: p.wait(120) for name, p in first.items() if name != "worker3"}
    print("T survivors", __import__("time").monotonic())
    assert set(survivors.values()) == {exit_codes.PEER_LOST}, launcher.dump()

    # 3 workers resume epoch 2 from its backup, train, and are stopped mid-epoch 3 for the widen (SIGTERM to all;
    # the flags exchanged after every step, so the stop comes before the epoch's end however fast the steps are).
    second = launcher.start_cluster(loopback_cluster(worker=3), args, tag="b-",
                                    env={**elastic_env(), HOLD: f"{steps + 3} task=worker:0",
                                         "TFJOB_STOP_CHECK_EVERY_STEPS": "1"})
    wait_for(lambda: HOLDING in second["worker0"].stderr or second["worker0"].popen.poll() is not None,
             timeout=240, what="3 workers training")
    print("T held2", __import__("time").monotonic())
    for proc in second.values():
        proc.popen.send_signal(signal.SIGTERM)
    assert set(codes(second).values()) == {exit_codes.PREEMPTED}, launcher.dump()
    chief = second["worker0"].stdout
    start = fields(line(chief, "[tfjob] start") or "")
    assert (start["world_size"], start["global_batch"]) == ("3", global_batch), chief
    assert "[tfjob] resized from 4 to 3 replicas" in chief and "[tfjob] epoch 2/3" in chief, chief
    assert "preempted: stopped after epoch 3 step" in chief and "; saving" in chief, chief

    print("T stopped2", __import__("time").monotonic())
    third = launcher.start_cluster(loopback_cluster(worker=4), args, tag="c-", env=elastic_env())
    assert set(codes(third).values()) == {0}, launcher.dump()
    print("T done", __import__("time").monotonic())
    chief = third["worker0"].stdout
    assert "[tfjob] resized from 3 to 4 replicas" in chief and "[tfjob] epoch 3/3" in chief, chief
    history = json.loads((out / "history.json").read_text())
    assert [(row["epoch"], row.get("resized_from"), row.get("replicas")) for row in history] == [
        (1, None, None), (2, 4, 3), (3, 3, 4)]
    result = json.loads((out / "result.json").read_text())
    assert (result["world_size"], result["global_batch"]) == (4, int(global_batch))
    assert result["test_accuracy"] > 0.5  # 36 steps of digits-mlp: well past chance (0.1)


def test_a_width_that_cannot_train_is_refused_at_start_before_tensorflow(launcher: Launcher, tmp_path: Path) -> None:
    # A global batch of 1 x 2 cannot give each of 3 or 4 replicas an example: found at start, not at a resize.
    env = {**elastic_env(reference=2)}
    procs = launcher.start_cluster(loopback_cluster(worker=2), ["--batch-size-per-replica", "1",
                                                                "--output-dir", str(tmp_path / "out")], env=env)
    assert codes(procs, 60) == {"worker0": exit_codes.USER_ERROR, "worker1": exit_codes.USER_ERROR}
    stderr = procs["worker0"].stderr
    assert ("this elastic job cannot train at 3 training processes, one of the widths 2-4 it may run at "
            "(TFJOB_ELASTIC_MIN_WORKERS, TFJOB_ELASTIC_MAX_WORKERS: spec.elasticPolicy)") in stderr, stderr
    assert "raise --batch-size-per-replica to at least 2" in stderr
    assert "[tfjob] start" not in procs["worker0"].stdout
