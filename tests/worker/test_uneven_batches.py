"""An elastic job at a width its global batch does not divide, with real TensorFlow processes on loopback.

A job written for 4 workers at batch 10 (or 7) a worker resumes its backup at 3 workers. At 3 the global batch stays
40 (28): the replicas' shares differ by one, and every example still counts 1 / global batch in the loss, so the
epoch trained at 3 gives the model one worker gives on the same global batches from the same backup. The backup is
one worker's (the cheapest gang that saves one); the cycle a user sees, 4 workers losing a node, training at 3 on
64 = 22 + 21 + 21 and widening back to 4, is tests/e2e/test_elastic_local.py's (fit); a custom loop's resume at
another width, mid-epoch, is tests/worker/test_preemption.py's, and a real peer loss's exit code
tests/worker/test_training_processes.py's. The step at which the first run is killed is chosen with
TFJOB_FAULT_HOLD_AT_STEP, not by the machine's speed.
"""

from __future__ import annotations

import json
import os
import shutil
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


def model_weights(out: Path, epoch: int) -> dict[str, np.ndarray]:
    """The model's variables in the chief's checkpoint of `epoch` (the optimizer's slots left out)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(out / "checkpoints" / f"epoch-{epoch:04d}" / "ckpt"))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/") and "OPTIMIZER_SLOT" not in n]
    return {n: reader.get_tensor(n) for n in names}


@pytest.mark.parametrize(("loop", "batch"), [("fit", 10), ("custom-loop", 7)])
def test_a_backup_resumed_at_3_workers_which_the_batch_does_not_divide_trains_as_one_worker_does(
        launcher: Launcher, tmp_path: Path, loop: str, batch: int) -> None:
    out = tmp_path / "out"
    steps = 12  # a reference epoch: 12 global batches of batch x 4
    # Plain SGD: the model after an epoch follows from its gradients alone, so two runs compare to 1e-5.
    args = ["--epochs", "3", "--steps-per-epoch", str(steps), "--batch-size-per-replica", str(batch),
            "--optimizer", "sgd", "--learning-rate", "0.05", *(["--custom-loop"] if loop == "custom-loop" else [])]
    global_batch = str(batch * 4)

    # One worker trains epoch 1 (the whole global batch) and is killed mid-epoch 2, as a node loss kills it.
    first = launcher.start_cluster(loopback_cluster(worker=1), [*args, "--output-dir", str(out)], tag="a-",
                                   env={**elastic_env(), HOLD: str(steps + 5)})
    wait_for(lambda: HOLDING in first["worker0"].stderr or first["worker0"].popen.poll() is not None,
             timeout=240, what="worker 0 holding in epoch 2")
    os.killpg(first["worker0"].popen.pid, signal.SIGKILL)
    first["worker0"].wait(60)

    # 3 workers resume epoch 2 from its backup and finish the job. Beside them, one worker resumes the same backup
    # for epoch 2 alone: the same global batches, unsplit.
    alone_out = tmp_path / "alone"
    shutil.copytree(out, alone_out)
    second = launcher.start_cluster(loopback_cluster(worker=3), [*args, "--output-dir", str(out)], tag="b-",
                                    env=elastic_env())
    alone = launcher.start_cluster(loopback_cluster(worker=1), [*args, "--epochs", "2", "--output-dir",
                                                                str(alone_out)], tag="alone-", env=elastic_env())
    assert set(codes(second).values()) == {0}, launcher.dump()
    assert codes(alone) == {"worker0": 0}, launcher.dump()
    chief = second["worker0"].stdout
    start = fields(line(chief, "[tfjob] start") or "")
    assert (start["world_size"], start["global_batch"]) == ("3", global_batch), chief
    assert "[tfjob] resized from 1 to 3 replicas" in chief and "[tfjob] epoch 3/3" in chief, chief
    # Shares of 14, 13, 13 (10, 9, 9) each weigh an example 1/40 (1/28), as one replica's mean over the batch
    # does. (Averaging each replica's own mean instead, fit's default, moves them by up to 3e-3 here.)
    at3, at1 = model_weights(out, 2), model_weights(alone_out, 2)
    assert at3.keys() == at1.keys() and at3
    for name in at3:
        np.testing.assert_allclose(at3[name], at1[name], atol=2e-5, err_msg=name)

    history = json.loads((out / "history.json").read_text())
    assert [(row["epoch"], row.get("resized_from"), row.get("replicas")) for row in history] == [
        (1, None, None), (2, 1, 3), (3, None, None)]
    result = json.loads((out / "result.json").read_text())
    assert (result["world_size"], result["global_batch"]) == (3, int(global_batch))
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
