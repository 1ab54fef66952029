"""Side-car evaluator: evaluates each new chief checkpoint; exits once training is done and all are seen."""

from __future__ import annotations

import os
import time
from typing import Any

from . import checkpoint, progress
from .data import Splits
from .training import Job, make_loss


def run_evaluator(job: Job, tf: Any, keras: Any) -> None:
    """Poll <output-dir>/checkpoints/latest.json; evaluate on val (else test); write eval.json and TensorBoard."""
    pair = job.splits.val if job.splits.val is not None else job.splits.test
    if pair is None:
        raise ValueError("the evaluator needs validation or test data from the --dataset function")
    prefix = "val" if job.splits.val is not None else "test"
    model = job.model_fn()
    model.compile(loss=make_loss(job, keras), metrics=["accuracy"])
    reader = job.model_fn()  # never compiled: the checkpoint's optimizer slots are not restored into it
    ckpt = tf.train.Checkpoint(model=reader)
    writer = tf.summary.create_file_writer(os.path.join(job.output_dir, "tensorboard", "eval"))
    seen: str | None = None
    results: list[dict[str, Any]] = []
    while True:
        done = os.path.exists(os.path.join(job.output_dir, "result.json"))
        latest = checkpoint.latest(job.checkpoint_dir)
        if latest is not None and latest != seen:
            seen = latest
            ckpt.read(latest).expect_partial()
            model.set_weights(reader.get_weights())
            loss, accuracy = (float(v) for v in model.evaluate(*pair, verbose=0)[:2])
            epoch = int(os.path.basename(os.path.dirname(latest)).split("-")[-1])
            row = {"epoch": epoch, f"{prefix}_loss": loss, f"{prefix}_accuracy": accuracy}
            results = [r for r in results if r["epoch"] != epoch] + [row]
            progress.emit(f"{progress.PREFIX} eval epoch={epoch} {prefix}_loss={loss:.4f} "
                          f"{prefix}_accuracy={accuracy:.4f}")
            with writer.as_default(step=epoch):
                tf.summary.scalar(f"{prefix}_loss", loss)
                tf.summary.scalar(f"{prefix}_accuracy", accuracy)
            writer.flush()
            progress.write_json_atomic(os.path.join(job.output_dir, "eval.json"), results)
            continue  # look again at once: a newer one may already be there
        if done:
            progress.emit(f"{progress.PREFIX} evaluator done evaluations={len(results)}")
            return
        time.sleep(job.cfg.evaluator_poll_seconds)


__all__ = ["Splits", "run_evaluator"]
