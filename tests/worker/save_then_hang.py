"""Helper process for the kill -9 test: one complete checkpoint, then a second save that never finishes."""

import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from tfjob_worker import checkpoint

directory = sys.argv[1]
weights = tf.Variable(tf.fill([256, 256], 1.0))
state = tf.train.Checkpoint(weights=weights)
checkpoint.save_atomic(directory, "epoch-0001", state.write)
weights.assign(tf.fill([256, 256], 2.0))


def write_then_hang(prefix: str) -> None:
    state.write(prefix)  # the new files are on disk under the temporary name...
    print("saving", flush=True)
    time.sleep(600)  # ...and the process dies here, before the rename


checkpoint.save_atomic(directory, "epoch-0002", write_then_hang)
