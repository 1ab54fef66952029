"""A user's entry points, as `--model user_model:build --dataset user_model:data --loss user_model:loss`."""

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
