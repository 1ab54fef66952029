"""A user's entry points, as `--model user_model:build --dataset user_model:data --loss user_model:loss`."""

import threading

import tf_keras as keras
from sklearn.datasets import load_digits

from tfjob_worker.data import Splits


def build() -> keras.Model:
    inputs = keras.Input(shape=(64,))
    hidden = keras.layers.Dense(32, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(hidden))


def data() -> Splits:
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    return Splits(train=(x[:1400], y[:1400]), val=(x[1400:1600], y[1400:1600]), test=(x[1600:], y[1600:]))


def loss(y_true, y_pred):  # type: ignore[no-untyped-def]
    return keras.losses.sparse_categorical_crossentropy(y_true, y_pred)


def build_stalling() -> keras.Model:
    """`build`, except that worker $STALL_WORKER_INDEX blocks forever in its forward pass after $STALL_AFTER_STEPS
    training steps: a hung input pipeline or collective, as the stall watchdog sees it. With $STALL_ATTEMPT set,
    only in that gang attempt (TFJOB_ATTEMPT, set by the operator), so the restarted gang trains through.
    Every other process gets the plain model (the pass-through layer has no weights, so the gang agrees)."""
    import json
    import os

    import tensorflow as tf

    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    attempt = os.environ.get("TFJOB_ATTEMPT")
    if str(task.get("index")) != os.environ.get("STALL_WORKER_INDEX") or os.environ.get("STALL_ATTEMPT",
                                                                                        attempt) != attempt:
        return build()
    after, calls = int(os.environ.get("STALL_AFTER_STEPS", "0")), [0]

    def stall_here(x):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] > after:
            threading.Event().wait()  # forever; the supervisor's SIGUSR1 stack dump shows this frame
        return x

    def passthrough(x):  # type: ignore[no-untyped-def]
        y = tf.py_function(stall_here, [x], Tout=x.dtype)
        y.set_shape(x.shape)
        return y

    inputs = keras.Input(shape=(64,))
    hidden = keras.layers.Dense(32, activation="tanh")(keras.layers.Lambda(passthrough)(inputs))
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(hidden))


def data_without_validation() -> Splits:
    """`data` without the validation split: every forward pass is a training step (build_stalling counts them)."""
    splits = data()
    return Splits(train=splits.train, val=None, test=splits.test)


def build_hungry() -> keras.Model:
    """`build`, except that worker $HOG_WORKER_INDEX first fills $HOG_MIB MiB of memory, 64 MiB at a time, and
    keeps it: a model or input pipeline too big for its container's memory limit, as the OOM killer sees it."""
    import json
    import os

    import numpy as np

    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    if str(task.get("index")) == os.environ.get("HOG_WORKER_INDEX"):
        print(f"[user_model] filling {os.environ['HOG_MIB']} MiB", flush=True)
        kept = [np.ones(64 << 20, dtype=np.uint8) for _ in range(int(os.environ["HOG_MIB"]) // 64)]
        print(f"[user_model] kept {len(kept) * 64} MiB", flush=True)
    return build()
