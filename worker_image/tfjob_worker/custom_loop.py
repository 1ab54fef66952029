"""Training with a custom loop: `strategy.run` and `compute_average_loss` over the global batch."""

from __future__ import annotations

import os
import time
from typing import Any

from . import checkpoint, progress
from .data import train_shares_fn
from .graceful import StopAgreement
from .preemption import Preempted
from .scaling import resume_position
from .training import EpochRecorder, Job, finish, first_step_done, make_loss, make_optimizer, save_checkpoint


def run_custom_loop(job: Job, tf: Any, keras: Any) -> None:
    """Train with a hand-written loop; backups go to <backup-dir>/chief (chief) every epoch or N steps, and on
    an agreed stop after SIGTERM when the save fits in the grace period."""
    strategy = job.strategy
    if job.choice.kind == "ps":
        raise ValueError("--custom-loop is not supported with ParameterServerStrategy (use model.fit)")
    agreement = StopAgreement(strategy)  # from here a SIGTERM waits for the step every worker agrees on
    loss_fn = make_loss(job, keras)
    sparse = job.splits.train[1].ndim == 1
    with strategy.scope():
        model = job.model_fn()
        optimizer = make_optimizer(job, keras, tf)
        accuracy_cls = keras.metrics.SparseCategoricalAccuracy if sparse else keras.metrics.CategoricalAccuracy
        train_acc = accuracy_cls()
        val_loss, val_acc = keras.metrics.Mean(), accuracy_cls()
        progress_vars = {name: tf.Variable(0, dtype=tf.int64, trainable=False)
                         for name in ("epoch", "epoch_samples", "samples", "global_batch", "replicas")}
        state = tf.train.Checkpoint(model=model, optimizer=optimizer, **progress_vars)
    backup = tf.train.CheckpointManager(state, os.path.join(job.backup_dir, "chief"), max_to_keep=1)
    resumed = backup.latest_checkpoint is not None
    job.startup.mark("build")
    batch = job.global_batch
    start_epoch, first_step, samples = 0, 0, 0
    recorder = EpochRecorder(job, resumable=resumed)
    if resumed:
        state.restore(backup.latest_checkpoint)
        saved = {name: int(var.numpy()) for name, var in progress_vars.items()}
        samples = saved["samples"]
        start_epoch, first_step = resume_position(saved["epoch"], saved["epoch_samples"], batch, job.steps_per_epoch)
        if saved["global_batch"] not in (0, batch):  # another width: iterations (the LR schedule's) in this batch
            optimizer.iterations.assign(samples // batch)
        recorder.resumed(first_step, samples, saved["replicas"])

    def back_up(epoch: int, step: int) -> None:
        values = {"epoch": epoch, "epoch_samples": step * batch, "samples": samples, "global_batch": batch,
                  "replicas": int(strategy.num_replicas_in_sync)}
        for name, value in values.items():
            progress_vars[name].assign(value)
        if job.writes_outputs:
            agreement.timed_save(backup.save)
        else:  # every worker must write (reads of synced variables are collectives); others throw it away
            agreement.timed_save(lambda: checkpoint.write_to_scratch(state.write))

    train_ds = strategy.distribute_datasets_from_function(  # each replica's share; the loss counts the global batch
        train_shares_fn(tf, job.splits, job.global_batch, job.cfg.seed))
    val_ds = None
    if job.splits.val is not None:
        val_ds = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices(job.splits.val).batch(job.global_batch))

    def train_replica(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, pred), global_batch_size=job.global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        train_acc.update_state(y, pred)
        return loss

    @tf.function
    def train_step(iterator: Any) -> Any:
        x, y = next(iterator)
        per_replica = strategy.run(train_replica, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def eval_replica(x: Any, y: Any) -> None:
        pred = model(x, training=False)
        per_example = loss_fn(y, pred)
        val_loss.update_state(per_example)
        val_acc.update_state(y, pred)

    @tf.function
    def eval_step(x: Any, y: Any) -> None:
        strategy.run(eval_replica, args=(x, y))

    summary = tf.summary.create_file_writer(os.path.join(job.tensorboard_dir, "train"))
    iterator = iter(train_ds)
    every, log_every = job.cfg.checkpoint_every_steps, job.cfg.log_every_steps
    state_ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    started = time.perf_counter()
    for epoch in range(start_epoch, job.cfg.epochs):
        recorder.epoch_begin(epoch + 1)
        first_step = first_step if epoch == start_epoch else 0  # resumed mid-epoch: run the remaining steps
        train_acc.reset_state()
        loss_sum = 0.0  # summed on the host: the step already returns the cross-replica loss
        for step in range(first_step, job.steps_per_epoch):
            loss_sum += float(train_step(iterator))
            samples += batch
            if not job.startup.complete:
                first_step_done(job)
            job.reporter.step_end(step + 1)
            if job.reporter.due():
                recorder.live(step + 1 - first_step, {"loss": loss_sum / (step + 1 - first_step)})
            if log_every and (step + 1) % log_every == 0 and step + 1 < job.steps_per_epoch:
                progress.emit(progress.format_step(step + 1, job.steps_per_epoch, epoch + 1, job.cfg.epochs,
                                                   {"loss": loss_sum / (step + 1 - first_step)}), job.prints)
            decision = agreement.check()
            if decision is not None:  # every worker stops after this same step
                if decision.save:
                    back_up(epoch, step + 1)
                where = f"epoch {epoch + 1} step {step + 1} (samples {samples})"
                progress.emit(f"{progress.PREFIX} preempted: stopped after {where}; {decision.describe()}",
                              job.prints)
                raise Preempted(f"preempted after {where}")
            if every and (step + 1) % every == 0 and step + 1 < job.steps_per_epoch:
                back_up(epoch, step + 1)
        steps_run = max(job.steps_per_epoch - first_step, 1)
        metrics = {"loss": loss_sum / steps_run, "accuracy": float(train_acc.result())}
        if val_ds is not None:
            eval_started = time.perf_counter()
            val_loss.reset_state()
            val_acc.reset_state()
            for x, y in val_ds:
                eval_step(x, y)
                job.reporter.eval_step_end()
            metrics.update(val_loss=float(val_loss.result()), val_accuracy=float(val_acc.result()))
            recorder.eval_took(time.perf_counter() - eval_started)
        recorder.epoch_end(epoch + 1, metrics, steps=job.steps_per_epoch - first_step)
        if job.writes_outputs:
            with summary.as_default(step=epoch + 1):
                for name, value in metrics.items():
                    tf.summary.scalar(name, value)
        back_up(epoch + 1, 0)
        save_checkpoint(job, epoch + 1, state_ckpt.write)
    if job.writes_outputs:  # training is complete: the backup is no longer needed
        for name in os.listdir(backup.directory):
            path = os.path.join(backup.directory, name)
            if os.path.isfile(path):
                os.unlink(path)
    finish(job, keras, model.get_weights(), recorder.first_epoch, time.perf_counter() - started)
