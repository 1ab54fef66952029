"""Built-in example models for the digits data, and loading user entry points."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def digits_mlp() -> Any:
    """64 -> 128 -> 64 -> 10 dense network for flattened 8x8 digits."""
    import tf_keras as keras

    return keras.Sequential([
        keras.layers.Input(shape=(64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ], name="digits_mlp")


def digits_cnn() -> Any:
    """Small convolutional network for 8x8x1 digits."""
    import tf_keras as keras

    return keras.Sequential([
        keras.layers.Input(shape=(8, 8, 1)),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, activation="relu", padding="same"),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ], name="digits_cnn")


BUILTIN = {"digits-mlp": digits_mlp, "digits-cnn": digits_cnn}


class EntryPointError(ValueError):
    """A module:function entry point could not be loaded."""


def load_entry_point(spec: str, flag: str) -> Callable[..., Any]:
    """Import `module:function` (dots allowed in function for attributes); errors name the flag."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise EntryPointError(f"{flag} {spec!r}: expected module:function")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise EntryPointError(f"{flag} {spec!r}: cannot import module {module_name!r} ({exc}); "
                              "is it on PYTHONPATH?") from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise EntryPointError(f"{flag} {spec!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise EntryPointError(f"{flag} {spec!r}: {attr!r} is not callable")
    return target  # type: ignore[no-any-return]
