"""Training with a custom loop: `strategy.run` and `compute_average_loss` over the global batch."""

from __future__ import annotations

import os
import time
from typing import Any

from . import checkpoint
from .data import per_worker_train_fn
from .training import EpochRecorder, Job, finish, first_step_done, make_loss, make_optimizer, save_checkpoint


def run_custom_loop(job: Job, tf: Any, keras: Any) -> None:
    """Train with a hand-written loop; backups go to <backup-dir>/chief (chief) every epoch or N steps."""
    strategy = job.strategy
    if job.choice.kind == "ps":
        raise ValueError("--custom-loop is not supported with ParameterServerStrategy (use model.fit)")
    loss_fn = make_loss(job, keras)
    sparse = job.splits.train[1].ndim == 1
    with strategy.scope():
        model = job.model_fn()
        optimizer = make_optimizer(job, keras, tf)
        accuracy_cls = keras.metrics.SparseCategoricalAccuracy if sparse else keras.metrics.CategoricalAccuracy
        train_acc = accuracy_cls()
        val_loss, val_acc = keras.metrics.Mean(), accuracy_cls()
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)  # completed epochs
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False)  # completed steps in the current epoch
        state = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var, step=step_var)
    backup = tf.train.CheckpointManager(state, os.path.join(job.backup_dir, "chief"), max_to_keep=1)
    resumed = backup.latest_checkpoint is not None
    job.startup.mark("build")
    if resumed:
        state.restore(backup.latest_checkpoint)

    def back_up() -> None:
        if job.writes_outputs:
            backup.save()
        else:  # every worker must write (reads of synced variables are collectives); others throw it away
            checkpoint.write_to_scratch(state.write)

    train_ds = strategy.distribute_datasets_from_function(
        per_worker_train_fn(tf, job.splits, job.global_batch, job.cfg.seed))
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
    recorder = EpochRecorder(job, resumable=resumed)
    iterator = iter(train_ds)
    every = job.cfg.checkpoint_every_steps
    state_ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    started = time.perf_counter()
    for epoch in range(int(epoch_var.numpy()), job.cfg.epochs):
        recorder.epoch_begin(epoch + 1)
        first_step = int(step_var.numpy())  # resumed mid-epoch: run the remaining steps
        train_acc.reset_state()
        loss_sum = 0.0  # summed on the host: the step already returns the cross-replica loss
        for step in range(first_step, job.steps_per_epoch):
            loss_sum += float(train_step(iterator))
            if not job.startup.complete:
                first_step_done(job)
            job.reporter.step_end(step + 1)
            if job.reporter.due():
                recorder.live(step + 1 - first_step, {"loss": loss_sum / (step + 1 - first_step)})
            step_var.assign(step + 1)
            if every and (step + 1) % every == 0 and step + 1 < job.steps_per_epoch:
                back_up()
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
        epoch_var.assign(epoch + 1)
        step_var.assign(0)
        back_up()
        save_checkpoint(job, epoch + 1, state_ckpt.write)
    if job.writes_outputs:  # training is complete: the backup is no longer needed
        for name in os.listdir(backup.directory):
            path = os.path.join(backup.directory, name)
            if os.path.isfile(path):
                os.unlink(path)
    finish(job, keras, model.get_weights(), recorder.first_epoch, time.perf_counter() - started)
