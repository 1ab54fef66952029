"""Training with tf-keras `Model.fit`: backups and graceful stop, chief checkpoints, progress, TensorBoard."""

from __future__ import annotations

import os
import time
from typing import Any

from . import progress
from .data import eval_dataset, per_worker_train_fn, train_shares_fn
from .training import EpochRecorder, Job, finish, first_step_done, make_loss, make_optimizer, save_checkpoint


def _to_float(value: Any) -> float:
    if hasattr(value, "fetch"):  # a RemoteValue under ParameterServerStrategy
        value = value.fetch()
    return float(value)


def make_progress_callback(keras: Any, job: Job, recorder: EpochRecorder, batch_hooks: bool,
                           backup: Any = None) -> Any:
    """Keras callback: reports start-up and steps to the supervisor, prints lines, writes history and checkpoints."""

    class Progress(keras.callbacks.Callback):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # keep per-batch logs as tensors: no host sync each step
            self._epoch = 1
            self._test_started = 0.0
            self._checkpoint: Any = None
            self._first_step = True
            self._resume_told = False

        def _implements_train_batch_hooks(self) -> bool:
            # ParameterServerStrategy refuses batch-level callbacks.
            return batch_hooks

        def on_train_begin(self, logs: Any = None) -> None:
            import tensorflow as tf

            self._checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch = epoch + 1
            if backup is not None and backup.restored is not None and not self._resume_told:
                self._resume_told = True  # the first epoch of a resumed run: where, and from which width
                recorder.resumed(backup.step, backup.samples, backup.restored["replicas"])
            recorder.epoch_begin(epoch + 1)

        def _implements_test_batch_hooks(self) -> bool:
            return batch_hooks

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            # Runs every step: only counting and timing here; figures that need the loss wait for due().
            if self._first_step:  # every peer is here (ParameterServerStrategy has no hooks: on_epoch_end)
                self._first_step = False
                first_step_done(job)
            job.reporter.step_end(batch + 1)
            if job.reporter.due():  # a running loss for /metrics costs one host sync per report, not per step
                recorder.live(batch + 1, {k: _to_float(logs[k]) for k in ("loss", "accuracy") if k in (logs or {})})
            every = job.cfg.log_every_steps or 0
            if every and (batch + 1) % every == 0 and batch + 1 < job.steps_per_epoch:
                metrics = {k: float(logs[k]) for k in ("loss", "accuracy") if k in (logs or {})}
                progress.emit(progress.format_step(batch + 1, job.steps_per_epoch, self._epoch,
                                                   job.cfg.epochs, metrics), job.prints)

        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            job.reporter.eval_step_end()

        def on_test_begin(self, logs: Any = None) -> None:
            self._test_started = time.perf_counter()

        def on_test_end(self, logs: Any = None) -> None:
            recorder.eval_took(time.perf_counter() - self._test_started)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            job.reporter.done()
            metrics = {k: _to_float(v) for k, v in (logs or {}).items()}
            recorder.epoch_end(epoch + 1, metrics)
            save_checkpoint(job, epoch + 1, self._checkpoint.write)

    return Progress()


def epoch_level(base: Any) -> Any:
    """`base` (a Keras callback class) without the per-batch calls it does not ask for.

    Keras calls every callback's batch hooks as soon as one callback has them, and ours has (progress and the
    stall watchdog's heartbeat). Called per step, TensorBoard writes (unrecorded) batch summaries and
    BackupAndRestore assigns a variable, although at update_freq/save_freq "epoch" neither uses them: about
    0.14 ms a step, a sixth of the digits MLP's. This keeps their own switch (`_implements_train_batch_hooks`:
    profiling, step-level backups) and drops the calls where Keras would drop them if we had no hooks, but
    after the first step (TensorBoard writes the op graph at the first batch end).
    """

    class EpochLevel(base):  # type: ignore[misc,valid-type]
        _first_batch = True

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self._first_batch or self._implements_train_batch_hooks():
                super().on_train_batch_begin(batch, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self._first_batch or self._implements_train_batch_hooks():
                self._first_batch = False
                super().on_train_batch_end(batch, logs)

    EpochLevel.__name__ = EpochLevel.__qualname__ = base.__name__
    return EpochLevel


def make_backup(job: Job, keras: Any, is_ps: bool, agreement: Any = None) -> Any:
    """Keras's BackupAndRestore under ParameterServerStrategy (no batch hooks there, so no graceful stop);
    elsewhere ours: the same backups, plus the agreed stop on SIGTERM and progress in samples."""
    every = job.cfg.checkpoint_every_steps
    if is_ps:
        return epoch_level(keras.callbacks.BackupAndRestore)(job.backup_dir, save_freq=every or "epoch",
                                                             delete_checkpoint=True)
    from .graceful import BackupAndRestore

    def say(message: str) -> None:
        progress.emit(f"{progress.PREFIX} preempted: {message}", job.prints)

    return BackupAndRestore(job.backup_dir, save_freq=every or "epoch", global_batch=getattr(job, "global_batch", None),
                            agreement=agreement, on_stop=say, exit_on_stop=False)


def fit_callbacks(job: Job, keras: Any, recorder: EpochRecorder, is_ps: bool, agreement: Any = None) -> list[Any]:
    """A clock stop, the backup, Progress and TensorBoard, in that order.

    The backup is written before Progress prints the epoch's line, so a line seen means its backup exists (a
    kill right after it resumes at the next epoch: `tfjob local --kill-worker-after` relies on it); the clock
    stops before the backup, so an epoch's examples/s is its steps', as a plain script measures them.
    """

    class StopClock(keras.callbacks.Callback):  # type: ignore[name-defined,misc]
        def on_train_begin(self, logs: Any = None) -> None:
            job.startup.mark("build")  # before BackupAndRestore's restore, the next callback

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            recorder.steps_ended()

    backup = make_backup(job, keras, is_ps, agreement)
    return [
        StopClock(),
        backup,
        make_progress_callback(keras, job, recorder, batch_hooks=not is_ps,  # ParameterServerStrategy refuses them
                               backup=None if is_ps else backup),
        epoch_level(keras.callbacks.TensorBoard)(job.tensorboard_dir, update_freq="epoch", profile_batch=0),
    ]


def run_fit(job: Job, tf: Any, keras: Any) -> None:
    """Compile under the strategy and train with fit; then evaluate and save (chief)."""
    is_ps = job.choice.kind == "ps"
    agreement = None
    if not is_ps:  # from here a SIGTERM waits for the step every worker agrees on
        from .graceful import StopAgreement

        agreement = StopAgreement(job.strategy)
    with job.strategy.scope():
        model = job.model_fn()
        model.compile(optimizer=make_optimizer(job, keras, tf), loss=make_loss(job, keras), metrics=["accuracy"])
    if is_ps:
        train = keras.utils.experimental.DatasetCreator(
            per_worker_train_fn(tf, job.splits, job.global_batch, job.cfg.seed))
        validation = None  # evaluated on the chief at the end instead
    else:
        train = job.strategy.distribute_datasets_from_function(
            train_shares_fn(tf, job.splits, job.global_batch, job.cfg.seed, weigh=True))
        validation = eval_dataset(tf, job.splits.val, job.global_batch) if job.splits.val is not None else None
    backup_exists = tf.train.latest_checkpoint(os.path.join(job.backup_dir, "chief")) is not None
    recorder = EpochRecorder(job, resumable=backup_exists)
    callbacks = fit_callbacks(job, keras, recorder, is_ps, agreement)
    started = time.perf_counter()
    model.fit(train, epochs=job.cfg.epochs, steps_per_epoch=job.steps_per_epoch, validation_data=validation,
              callbacks=callbacks, verbose=0)
    finish(job, keras, model.get_weights(), recorder.first_epoch, time.perf_counter() - started)
