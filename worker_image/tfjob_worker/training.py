"""What every training path shares: the job description, optimizer, schedule, outputs and final evaluation."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from . import checkpoint, progress
from .cluster import ClusterView
from .config import RunConfig
from .data import Splits
from .reports import Reporter
from .scaling import BatchPlan
from .startup import StartupClock, split
from .strategy_choice import StrategyChoice


@dataclass
class Job:
    """One training run as this process does it."""

    cfg: RunConfig
    view: ClusterView
    choice: StrategyChoice
    strategy: Any
    model_fn: Any
    splits: Splits
    global_batch: int
    steps_per_epoch: int
    base_lr: float
    target_lr: float
    reporter: Reporter  # start-up done, steps, epochs, checkpoints → the supervisor
    writes_outputs: bool  # chief (or every rank in independent mode): writes output_dir
    output_dir: str
    backup_dir: str
    prints: bool
    startup: StartupClock = field(default_factory=StartupClock.from_env)
    scratch: list[str] = field(default_factory=list)
    batch: BatchPlan | None = None  # the width's batch and LR plan (elastic resume); None: fixed width

    def scratch_dir(self, name: str) -> str:
        """A directory for writes this process must do but nobody reads (non-chief workers)."""
        path = tempfile.mkdtemp(prefix=f"tfjob-{name}-")
        self.scratch.append(path)
        return path

    def cleanup(self) -> None:
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)

    @property
    def history_path(self) -> str:
        return os.path.join(self.output_dir, "history.json")

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.output_dir, "checkpoints")

    @property
    def tensorboard_dir(self) -> str:
        return os.path.join(self.output_dir, "tensorboard") if self.writes_outputs else self.scratch_dir("tb")


def warmup_schedule(keras: Any, tf: Any, base_lr: float, target_lr: float, warmup_steps: int) -> Any:
    """A serialisable LR schedule ramping linearly from base_lr to target_lr over warmup_steps."""

    class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[name-defined,misc]
        def __init__(self, base: float, target: float, steps: int) -> None:
            self.base, self.target, self.steps = base, target, steps

        def __call__(self, step: Any) -> Any:
            fraction = tf.minimum(tf.cast(step, tf.float32) / float(self.steps), 1.0)
            return self.base + (self.target - self.base) * fraction

        def get_config(self) -> dict[str, Any]:
            return {"base": self.base, "target": self.target, "steps": self.steps}

    return LinearWarmup(base_lr, target_lr, warmup_steps)


def make_optimizer(job: Job, keras: Any, tf: Any) -> Any:
    """The --optimizer (name or module:function(learning_rate)) with the scaled, warmed-up LR."""
    from .models import load_entry_point

    warmup_steps = round(job.cfg.warmup_epochs * job.steps_per_epoch)
    lr: Any = job.target_lr
    if warmup_steps > 0 and job.target_lr != job.base_lr:
        lr = warmup_schedule(keras, tf, job.base_lr, job.target_lr, warmup_steps)
    if ":" in job.cfg.optimizer:
        return load_entry_point(job.cfg.optimizer, "--optimizer")(learning_rate=lr)
    try:
        return keras.optimizers.get({"class_name": job.cfg.optimizer, "config": {"learning_rate": lr}})
    except ValueError as exc:
        raise ValueError(f"--optimizer {job.cfg.optimizer!r}: not a tf_keras optimizer ({exc})") from exc


def make_loss(job: Job, keras: Any) -> Any:
    """The --loss as a per-example function (name or module:function)."""
    from .models import load_entry_point

    if ":" in job.cfg.loss:
        return load_entry_point(job.cfg.loss, "--loss")
    try:
        return keras.losses.get(job.cfg.loss)
    except ValueError as exc:
        raise ValueError(f"--loss {job.cfg.loss!r}: not a tf_keras loss ({exc})") from exc


def weights_digest(weights: list[Any]) -> str:
    """Short SHA-256 of the weights: equal on every worker after synchronous training."""
    digest = hashlib.sha256()
    for w in weights:
        digest.update(w.tobytes())
    return digest.hexdigest()[:16]


def local_copy(job: Job, keras: Any, weights: list[Any]) -> Any:
    """The trained model outside any strategy: evaluated and saved without collectives."""
    model = job.model_fn()
    model.set_weights(weights)
    model.compile(loss=make_loss(job, keras), metrics=["accuracy"])
    return model


def finish(job: Job, keras: Any, weights: list[Any], first_epoch: int | None, seconds: float) -> None:
    """Evaluate on the test split, save the SavedModel and result.json (chief), print the done line."""
    job.reporter.training_over()
    digest = weights_digest(weights)
    model = local_copy(job, keras, weights)
    test_loss = test_accuracy = None
    if job.splits.test is not None:
        test_loss, test_accuracy = (float(v) for v in model.evaluate(*job.splits.test, verbose=0)[:2])
    saved_model = None
    if job.writes_outputs:
        saved_model = checkpoint.save_dir_atomic(
            os.path.join(job.output_dir, "saved_model"), lambda path: model.save(path, save_format="tf")
        )
        progress.write_json_atomic(os.path.join(job.output_dir, "result.json"), {
            "test_accuracy": test_accuracy,
            "test_loss": test_loss,
            "epochs": job.cfg.epochs,
            "resumed_from_epoch": first_epoch if first_epoch and first_epoch > 1 else None,
            "saved_model": saved_model,
            "weights_digest": digest,
            "strategy": job.choice.class_name,
            "world_size": job.view.world_size,
            "global_batch": job.global_batch,
            "learning_rate": job.target_lr,
            "train_seconds": round(seconds, 3),
            "history": progress.read_history(job.history_path),
        })
    progress.emit(progress.format_done(test_accuracy, saved_model, weights_digest=digest), job.prints)


class EpochRecorder:
    """Epoch bookkeeping shared by the fit callback and the custom loop: lines and history.json."""

    def __init__(self, job: Job, resumable: bool) -> None:
        self.job = job
        self.resumable = resumable
        self.first_epoch: int | None = None  # 1-based first epoch this process ran
        self.history: list[dict[str, Any]] = []
        self._started = 0.0
        self._stopped: float | None = None
        self._eval_seconds = 0.0
        self._resume: tuple[int, int | None] | None = None
        self.resized_from: int | None = None  # the width of the backup this run resumed, when another

    def resumed(self, step: int, samples: int, saved_replicas: int) -> None:
        """The backup restored held `samples` examples trained, saved at `saved_replicas`; `step` steps of the
        first epoch are done. Called before the first epoch_begin."""
        self._resume = (step, samples)
        batch = self.job.batch
        if batch is not None and saved_replicas and saved_replicas != batch.replicas:
            self.resized_from = saved_replicas
            progress.emit(progress.format_resized(saved_replicas, batch.replicas, samples, batch.global_batch,
                                                  batch.learning_rate, batch.policy), self.job.prints)
            self.job.reporter.resized(saved_replicas, batch.replicas)

    def epoch_begin(self, epoch: int) -> None:
        """`epoch` is 1-based."""
        if self.first_epoch is None:
            self.first_epoch = epoch
            self.job.startup.mark("restore")  # the backup restored, the epoch's input iterator made
            step, samples = self._resume or (0, None)
            if self.resumable and (epoch > 1 or step):
                progress.emit(progress.format_resumed(epoch, step, samples), self.job.prints)
            earlier = progress.read_history(self.job.history_path) if self.resumable else []
            self.history = progress.merge_history(earlier, epoch)
        self._started = time.perf_counter()
        self._stopped = None
        self._eval_seconds = 0.0
        self.job.reporter.epoch_begin(epoch)

    def live(self, steps_done: int, metrics: dict[str, float]) -> None:
        """Mid-epoch figures for the supervisor's /metrics: throughput so far this epoch, running loss."""
        seconds = max(time.perf_counter() - self._started - self._eval_seconds, 1e-9)
        self.job.reporter.live_rate(steps_done * self.job.global_batch / seconds, metrics)

    def eval_took(self, seconds: float) -> None:
        self._eval_seconds += seconds

    def steps_ended(self) -> None:
        """The epoch's training (and validation) is over; what follows (the backup) is not training time."""
        self._stopped = time.perf_counter()

    def epoch_end(self, epoch: int, metrics: dict[str, Any], steps: int | None = None) -> None:
        ended = self._stopped if self._stopped is not None else time.perf_counter()
        train_seconds = max(ended - self._started - self._eval_seconds, 1e-9)
        metrics = dict(metrics)
        metrics["examples_per_sec"] = (steps or self.job.steps_per_epoch) * self.job.global_batch / train_seconds
        progress.emit(progress.format_epoch(epoch, self.job.cfg.epochs, metrics), self.job.prints)
        self.job.reporter.epoch_end(metrics, metrics["examples_per_sec"])
        if self.job.writes_outputs:
            self.history = [row for row in self.history if row["epoch"] < epoch]
            mark = self.resized_from if epoch == self.first_epoch else None
            replicas = self.job.batch.replicas if self.job.batch is not None else None
            self.history.append(progress.history_row(epoch, metrics, mark, replicas))
            progress.write_json_atomic(self.job.history_path, self.history)


def first_step_done(job: Job) -> None:
    """The first training step of this process ran: every peer is here, and start-up is over (its split printed)."""
    job.reporter.done()
    job.startup.mark("first_step")
    progress.emit(progress.format_startup(split(job.startup.began, job.startup.marks), job.startup.began),
                  job.prints)


def save_checkpoint(job: Job, epoch: int, write: Any) -> None:
    """Chief: atomic checkpoint under checkpoints/. Others: same write into a scratch dir, deleted."""
    if job.writes_outputs:
        checkpoint.save_atomic(job.checkpoint_dir, f"epoch-{epoch:04d}", write)
    else:
        checkpoint.write_to_scratch(write)
    job.reporter.checkpoint_saved()
