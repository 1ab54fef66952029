"""A custom training loop on every worker of a TFJob, under MultiWorkerMirroredStrategy.

`experimental_distribute_dataset` splits each global batch between the workers, `strategy.run` takes
one step on each, `strategy.reduce` sums the loss. Nothing here knows about tfjob: TensorFlow reads the
cluster and this process's task from TF_CONFIG, which the operator sets.

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

    for epoch in range(1, args.epochs + 1):
        total = sum(float(train_step(batches)) for _ in range(steps))
        print(f"epoch {epoch}/{args.epochs} loss {total / steps:.4f}", flush=True)

    # The weights are the same on every worker (mirrored), so each can score the held-out digits alone.
    predicted = np.argmax(model(x[1500:], training=False).numpy(), axis=1)
    print(f"held-out accuracy {(predicted == y[1500:]).mean():.4f}", flush=True)

    chief = is_chief(tf_config)
    path = args.output if chief else os.path.join(tempfile.mkdtemp(), "model")
    model.save(path)  # a collective under MultiWorkerMirroredStrategy: every worker saves, the chief's is kept
    if chief:
        print(f"saved the model to {path}", flush=True)
    else:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    main()
