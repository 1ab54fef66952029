"""A custom training loop on every worker of a TFJob, under MultiWorkerMirroredStrategy.

`experimental_distribute_dataset` splits each global batch between the workers, `strategy.run` takes
one step on each, `strategy.reduce` sums the loss. TensorFlow reads the cluster and this process's task from
TF_CONFIG, which the operator sets. The one tfjob piece is `tfjob_worker.graceful.GracefulStop` (in the worker
image): after each step `should_stop()` says whether every worker agreed to stop (one got SIGTERM); then
`save()` backs up if it fits in the grace period and `exit()` leaves with 143, so the restart loses no step.

    python custom_loop.py --epochs 2 --output /data/custom-loop
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

from tfjob_worker.graceful import GracefulStop


def is_chief(tf_config: dict) -> bool:
    """The chief saves: the `chief` task, or worker 0 when the cluster has no chief (or no TF_CONFIG at all)."""
    task = tf_config.get("task") or {"type": "worker", "index": 0}
    if task["type"] == "chief":
        return True
    return task["type"] == "worker" and task["index"] == 0 and "chief" not in tf_config.get("cluster", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-per-worker", type=int, default=32)
    parser.add_argument("--output", default="/tmp/custom-loop", help="where the chief saves the model")
    parser.add_argument("--backup", default=None, help="backup directory shared by the workers "
                                                      "(default: <output>-backup)")
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    global_batch = args.batch_per_worker * strategy.num_replicas_in_sync
    steps = 1500 // global_batch

    data = load_digits()
    x = (data.images / 16.0).reshape(-1, 64).astype("float32")
    y = data.target.astype("int64")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (tf.data.Dataset.from_tensor_slices((x[:1500], y[:1500])).shuffle(1500, seed=1).repeat()
             .batch(global_batch).with_options(options))
    batches = iter(strategy.experimental_distribute_dataset(train))

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        optimizer = tf.keras.optimizers.Adam(0.01)
        done = tf.Variable(0, dtype=tf.int64, trainable=False)  # steps completed: where a restart resumes
    stop = GracefulStop(strategy)
    # Every worker writes a backup (it is a collective); all restore the chief's.
    chief = is_chief(tf_config)
    backup_dir = os.path.join(args.backup or f"{args.output}-backup", "chief")
    state = tf.train.Checkpoint(model=model, optimizer=optimizer, done=done)
    manager = tf.train.CheckpointManager(state, backup_dir if chief else tempfile.mkdtemp(), max_to_keep=1)
    if tf.train.latest_checkpoint(backup_dir):
        state.restore(tf.train.latest_checkpoint(backup_dir))
        print(f"resumed after step {int(done.numpy())}", flush=True)
    per_example = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

    def replica_step(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(labels, model(features, training=True)),
                                              global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        features, labels = next(iterator)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(features, labels)),
                               axis=None)

    total = 0.0
    for step in range(int(done.numpy()), args.epochs * steps):
        total += float(train_step(batches))
        done.assign(step + 1)
        if stop.should_stop():  # every worker asks after every step: the answer is the same on all
            stop.save(manager.save)
            stop.exit()
        if (step + 1) % steps == 0:
            print(f"epoch {(step + 1) // steps}/{args.epochs} loss {total / steps:.4f}", flush=True)
            stop.save(manager.save)  # timed: the estimate for a save in the grace period
            total = 0.0

    # The weights are the same on every worker (mirrored), so each can score the held-out digits alone.
    predicted = np.argmax(model(x[1500:], training=False).numpy(), axis=1)
    print(f"held-out accuracy {(predicted == y[1500:]).mean():.4f}", flush=True)

    if chief:  # trained to the end: a new run starts afresh
        shutil.rmtree(os.path.dirname(backup_dir), ignore_errors=True)
    path = args.output if chief else os.path.join(tempfile.mkdtemp(), "model")
    model.save(path)  # a collective under MultiWorkerMirroredStrategy: every worker saves, the chief's is kept
    if chief:
        print(f"saved the model to {path}", flush=True)
    else:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    main()
