"""The runtime's Keras callbacks in a real `Model.fit`: which ones work per step and which per epoch."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from tfjob_worker.fit_loop import fit_callbacks  # noqa: E402
from tfjob_worker.reports import Reporter  # noqa: E402
from tfjob_worker.startup import StartupClock  # noqa: E402

STEPS = 6


def fit_and_look_mid_epoch(tmp_path: Path, checkpoint_every_steps: int | None) -> tuple[bool, Reporter]:
    """Fit one epoch of STEPS steps with the runtime's callbacks; whether a backup existed after step 4."""
    reporter = Reporter(fd=None)
    reporter.describe(trains=True, rank=0, world_size=1, strategy="DefaultStrategy", collective=None,
                      device_kind="cpu", device_count=1, epochs=1, steps_per_epoch=STEPS)
    job: Any = SimpleNamespace(
        reporter=reporter, cfg=SimpleNamespace(log_every_steps=None, epochs=1,
                                               checkpoint_every_steps=checkpoint_every_steps),
        steps_per_epoch=STEPS, prints=False, backup_dir=str(tmp_path / "backup"),
        tensorboard_dir=str(tmp_path / "tb"), startup=StartupClock(time.time()), writes_outputs=True,
        checkpoint_dir=str(tmp_path / "checkpoints"))
    recorder: Any = SimpleNamespace(epoch_begin=reporter.epoch_begin, epoch_end=lambda *a, **k: None,
                                    steps_ended=lambda: None,
                                    live=lambda n, metrics: reporter.live_rate(n * 8.0, metrics))
    seen: dict[str, bool] = {}

    class LookAtBackups(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 3:
                seen["backup"] = any((tmp_path / "backup").rglob("checkpoint"))

    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = tf.ones((STEPS * 8, 4)), tf.zeros((STEPS * 8, 2))
    callbacks = fit_callbacks(job, keras, recorder, is_ps=False)
    model.fit(x, y, batch_size=8, epochs=1, callbacks=[*callbacks, LookAtBackups()], verbose=0)
    return seen["backup"], reporter


def test_step_level_backups_are_still_written_mid_epoch(tmp_path: Path):
    backup_mid_epoch, reporter = fit_and_look_mid_epoch(tmp_path, checkpoint_every_steps=2)
    assert backup_mid_epoch
    assert reporter.report.steps == STEPS  # the heartbeat counted every step


def test_epoch_level_backups_wait_for_the_epoch_end_and_tensorboard_still_gets_the_graph(tmp_path: Path):
    backup_mid_epoch, reporter = fit_and_look_mid_epoch(tmp_path, checkpoint_every_steps=None)
    assert not backup_mid_epoch
    assert reporter.report.steps == STEPS
    events = [event for path in (tmp_path / "tb" / "train").glob("events.out.tfevents.*")
              for event in tf.compat.v1.train.summary_iterator(str(path))]
    assert any(event.graph_def for event in events)  # the op graph TensorBoard writes at the first step's end
