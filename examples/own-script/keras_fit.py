"""Keras `fit` on every worker of a TFJob, under MultiWorkerMirroredStrategy: an ordinary TensorFlow script.

TensorFlow reads the cluster and this process's task from TF_CONFIG, which the operator sets in each pod.
`tf.keras` must be Keras 2 (tf-keras): Keras 3 cannot `fit` under MultiWorkerMirroredStrategy; the worker image
sets TF_USE_LEGACY_KERAS=1 for that. The one tfjob piece is `tfjob_worker.graceful.BackupAndRestore` (in the worker
image), in place of Keras's: on SIGTERM (pod deleted, evicted, node drained) every worker stops after the same step,
the chief backs up if the save fits in the grace period, and all exit 143, so the restarted job loses no step.

    python keras_fit.py --epochs 2 --output /data/keras-fit    # alone (no TF_CONFIG) it trains on one worker
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

import tensorflow as tf
from sklearn.datasets import load_digits

from tfjob_worker.graceful import BackupAndRestore


def is_chief(tf_config: dict) -> bool:
    """The chief saves: the `chief` task, or worker 0 when the cluster has no chief (or no TF_CONFIG at all)."""
    task = tf_config.get("task") or {"type": "worker", "index": 0}
    if task["type"] == "chief":
        return True
    return task["type"] == "worker" and task["index"] == 0 and "chief" not in tf_config.get("cluster", {})


def digits(global_batch: int) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    """scikit-learn's bundled 8x8 digits (no download): 1,500 to train on, the rest held out."""
    data = load_digits()
    x = (data.images / 16.0).reshape(-1, 64).astype("float32")
    y = data.target.astype("int64")
    # Each worker reads every record and keeps its share of each batch (DATA sharding).
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = tf.data.Dataset.from_tensor_slices((x[:1500], y[:1500])).shuffle(1500, seed=1).repeat()
    test = tf.data.Dataset.from_tensor_slices((x[1500:], y[1500:]))
    return train.batch(global_batch).with_options(options), test.batch(global_batch).with_options(options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-per-worker", type=int, default=32)
    parser.add_argument("--output", default="/tmp/keras-fit", help="where the chief saves the model")
    parser.add_argument("--backup", default=None, help="backup directory shared by the workers "
                                                      "(default: <output>-backup)")
    args = parser.parse_args()

    # First, before any other TensorFlow call: it connects this process to its peers.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    global_batch = args.batch_per_worker * strategy.num_replicas_in_sync
    train, test = digits(global_batch)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    # Backs up every epoch, resumes where the last backup was (mid-epoch too), stops gracefully on SIGTERM.
    backup = BackupAndRestore(args.backup or f"{args.output}-backup", global_batch=global_batch)
    model.fit(train, epochs=args.epochs, steps_per_epoch=1500 // global_batch, verbose=2, callbacks=[backup])
    _, accuracy = model.evaluate(test, verbose=0)
    print(f"held-out accuracy {accuracy:.4f}", flush=True)

    # Every worker takes part in saving (it is a collective); only the chief's copy is kept.
    chief = is_chief(tf_config)
    path = args.output if chief else os.path.join(tempfile.mkdtemp(), "model")
    model.save(path)
    if chief:
        print(f"saved the model to {path}", flush=True)
    else:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    main()
