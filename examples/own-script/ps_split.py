"""ParameterServerStrategy, split the usual way: parameter servers and workers only serve (`server.join()`),
the chief coordinates the training and saves. Nothing here knows about tfjob: the roles and addresses
come from TF_CONFIG, which the operator sets. The PS and workers never exit by themselves; when the chief
succeeds, the operator deletes them (cleanPodPolicy: Running).

    python ps_split.py --epochs 2 --output /data/ps-split
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def serve(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    """A PS or worker: start this task's server and serve the chief until the pod is deleted."""
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True)
    print(f"{resolver.task_type} {resolver.task_id} serving", flush=True)
    server.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--output", default="/tmp/ps-split", help="where the chief saves the model")
    args = parser.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
        return

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    data = load_digits()
    x = (data.images / 16.0).reshape(-1, 64).astype("float32")
    y = data.target.astype("int64")

    def dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Runs on each worker: its own shard, batches of its share of the global batch.
        ds = tf.data.Dataset.from_tensor_slices((x[:1500], y[:1500])).shard(
            context.num_input_pipelines, context.input_pipeline_id)
        return ds.shuffle(1500, seed=1).repeat().batch(context.get_per_replica_batch_size(64)).prefetch(2)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(tf.keras.utils.experimental.DatasetCreator(dataset), epochs=args.epochs,
              steps_per_epoch=args.steps_per_epoch, verbose=2)

    predicted = np.argmax(model(x[1500:], training=False).numpy(), axis=1)
    print(f"held-out accuracy {(predicted == y[1500:]).mean():.4f}", flush=True)
    model.save(args.output)  # only the chief runs this code: it alone saves
    print(f"saved the model to {args.output}", flush=True)


if __name__ == "__main__":
    main()
