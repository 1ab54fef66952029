"""Graceful preemption for training loops, ours and users': stop on SIGTERM at a step every worker agrees on.

Two helpers for scripts run in TFJob pods (see docs/worker.md, "Graceful preemption"):

- Keras `fit`: `BackupAndRestore(backup_dir)`, in place of `tf.keras.callbacks.BackupAndRestore`. It backs up at
  epoch ends (or every `save_freq` steps), resumes mid-epoch at the step after the last saved one, and on SIGTERM
  stops every worker after the same step, backs up when the save fits in the grace period, and exits 143.
- Custom loops: `GracefulStop(strategy)`; call `should_stop()` after every step and, when it says so, `save(fn)`
  (your own backup: it runs only when it fits in the grace period) and `exit()`.

The agreement is one all-gather of four numbers every K steps: K is agreed at each exchange so that the exchange
costs about 1% of the steps' time and a stop waits at most 1 s of steps (or fixed: TFJOB_STOP_CHECK_EVERY_STEPS).
TensorFlow's own PreemptionCheckpointHandler is not used: it only watches GCE maintenance events.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from . import checkpoint, cluster, exit_codes, peers, preemption
from .preemption import Decision, Preempted, StopSignal
from .scaling import resume_position


def _exchanges(strategy: Any) -> bool:
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


class StopAgreement:
    """Every `every` calls of `check()`, all workers exchange (flag, grace left, last save seconds) and each gets
    the same Decision. Every worker must call `check()` after the same steps (it is a collective)."""

    def __init__(self, strategy: Any = None, signal: StopSignal | None = None, every: int | None = None) -> None:
        self.strategy = strategy or tf.distribute.get_strategy()
        self.signal = signal or preemption.process_signal()
        # TensorFlow's coordination service (MultiWorkerMirroredStrategy) installs its own SIGTERM handler, which
        # only records the signal: take SIGTERM back, now that the strategy exists.
        self.signal.install()
        self.signal.deferred = True  # this loop checks the flag: SIGTERM no longer exits at once
        if _exchanges(self.strategy):  # ...unless a peer is already gone: then nobody can agree
            preemption.LostPeerStop(peers.collective_peers(cluster.from_env()),
                                    busy=lambda: self.decision is not None).arm()
        self.hold_at: int | None = None  # fault injection: hold after this many calls until SIGTERM
        if os.environ.get(preemption.HOLD_ENV, "").strip():
            view = cluster.from_env()
            self.hold_at = preemption.hold_step(view.role, view.index, view.world_size)
        self.fixed_every = every or preemption.check_every()  # None: agreed at each exchange
        self.last_save_seconds = 0.0
        self.decision: Decision | None = None
        self.exchange_seconds = 0.0  # the last exchange's duration
        self._calls = 0
        self._next = self.fixed_every or 1  # the call that exchanges next
        self._proposal = 1  # this worker's proposed interval, sent with the next exchange
        self._last: tuple[int, float] | None = None  # (calls, perf_counter) at the end of the last exchange
        self._gather: Any = None

    def check(self) -> Decision | None:
        """The Decision once every worker agreed to stop (then on every later call), else None."""
        if self.decision is not None:
            return self.decision
        self._calls += 1
        if self._calls == self.hold_at:
            self._hold()
        if self._calls < self._next:
            return None
        started = time.perf_counter()
        step_seconds = (started - self._last[1]) / (self._calls - self._last[0]) if self._last else None
        row = (1.0 if self.signal.raised else 0.0, self.signal.remaining(), self.last_save_seconds,
               float(self._proposal))
        rows = self._exchange(row) if _exchanges(self.strategy) else [row]
        ended = time.perf_counter()
        self.exchange_seconds = ended - started
        decision = preemption.decide(rows)
        if decision.stop:
            self.decision = decision
            return decision
        self._next = self._calls + (self.fixed_every or preemption.agreed_interval(rows))
        self._proposal = preemption.next_interval(step_seconds, self.exchange_seconds)
        self._last = (self._calls, ended)
        return None

    def _hold(self) -> None:
        """Fault injection (TFJOB_FAULT_HOLD_AT_STEP): wait here, between two steps, until SIGTERM. Peers wait for
        this process in their next collective, so a stop agreed after the SIGTERM lands at a known step."""
        sys.stderr.write(f"[tfjob] fault: holding after step {self._calls} until SIGTERM "
                         f"({preemption.HOLD_ENV})\n")
        sys.stderr.flush()
        while not self.signal.raised:
            time.sleep(0.05)

    def _exchange(self, row: tuple[float, ...]) -> list[tuple[float, ...]]:
        if self._gather is None:
            strategy = self.strategy

            @tf.function
            def gather(values: Any) -> Any:
                per_replica = strategy.run(lambda v: tf.expand_dims(v, 0), args=(values,))
                return strategy.gather(per_replica, axis=0)

            self._gather = gather
        rows = self._gather(tf.constant(row, dtype=tf.float64)).numpy()
        return [tuple(float(v) for v in r) for r in rows]

    def timed_save(self, save: Callable[[], Any]) -> Any:
        """Run a save and remember how long it took (the estimate for a save in the grace period)."""
        started = time.monotonic()
        result = save()
        self.last_save_seconds = time.monotonic() - started
        return result


def announce(message: str, stream: Any = None) -> None:
    """A `[tfjob] preempted ...` line on stdout, flushed."""
    out = stream or sys.stdout
    out.write(f"[tfjob] preempted: {message}\n")
    out.flush()


class GracefulStop:
    """For custom training loops: `if stop.should_stop(): stop.save(back_up); stop.exit()` after each step."""

    def __init__(self, strategy: Any = None, every: int | None = None) -> None:
        self.agreement = StopAgreement(strategy, every=every)

    def should_stop(self) -> bool:
        """True once every worker agreed to stop; every worker must call it after the same steps."""
        return self.agreement.check() is not None

    def save(self, save: Callable[[], Any]) -> bool:
        """Run `save` (on every worker, as tf.train.Checkpoint needs) and time it; once stopping, only when it
        fits in the grace period left. True if it ran."""
        decision = self.agreement.decision
        if decision is not None and not decision.save:
            return False
        self.agreement.timed_save(save)
        return True

    def describe(self) -> str:
        decision = self.agreement.decision
        return decision.describe() if decision is not None else "not stopping"

    def exit(self, message: str = "") -> None:
        """Leave with PREEMPTED (143, retryable), skipping TensorFlow's teardown (it can block on gone peers)."""
        announce(message or self.describe())
        sys.stderr.flush()
        os._exit(exit_codes.PREEMPTED)


def _keras() -> Any:
    import tf_keras

    return tf_keras


class BackupAndRestore(_keras().callbacks.Callback):  # type: ignore[misc]
    """`tf.keras.callbacks.BackupAndRestore` with graceful preemption and progress in samples.

    Backs up model, optimizer and progress into `<backup_dir>/chief` at epoch ends (or every `save_freq` steps);
    `fit` resumes at the step after the last one saved, also mid-epoch. With `global_batch` given, progress is
    kept in samples, so a resume at another global batch (another width) continues the epoch and the LR
    schedule where they were. On an agreed stop it backs up if the save fits, then exits 143 (or raises Preempted
    with `exit_on_stop=False`).
    """

    def __init__(self, backup_dir: str, save_freq: int | str = "epoch", delete_checkpoint: bool = True,
                 global_batch: int | None = None, agreement: StopAgreement | None = None,
                 on_stop: Callable[[str], None] | None = None, exit_on_stop: bool = True) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self.backup_dir = backup_dir
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.global_batch = global_batch or 1  # unknown: progress counts steps
        self.agreement = agreement
        self.on_stop = on_stop or announce
        self.exit_on_stop = exit_on_stop  # leave the process at once (143); False: raise Preempted out of fit
        self.restored: dict[str, int] | None = None  # what the backup held, None without one
        self.epoch = 0  # 0-based epoch in progress
        self.step = 0  # steps completed in it
        self.samples = 0  # examples trained by the job, all runs and widths
        self._state: Any = None
        self._vars: dict[str, Any] = {}
        self._manager: Any = None
        self._since_save = 0

    # ---- fit's hooks --------------------------------------------------------------------------------
    def on_train_begin(self, logs: Any = None) -> None:
        model = self.model
        strategy = model.distribute_strategy
        if self.agreement is None:
            self.agreement = StopAgreement(strategy)
        optimizer = model.optimizer
        if callable(getattr(optimizer, "build", None)) and not getattr(optimizer, "_built", False):
            model.optimizer.build(model.trainable_variables)  # slots exist before the restore fills them
        self._vars = {name: tf.Variable(0, dtype=tf.int64, trainable=False)
                      for name in ("epoch", "epoch_samples", "samples", "global_batch", "replicas")}
        self._state = tf.train.Checkpoint(model=model, optimizer=model.optimizer, **self._vars)
        # The chief's CheckpointManager.save() creates this counter on first use; under the strategy's scope a
        # variable's creation is a collective, so every worker creates it now, at the same point.
        _ = self._state.save_counter
        chief_dir = os.path.join(self.backup_dir, "chief")
        if strategy.extended.should_checkpoint:
            self._manager = tf.train.CheckpointManager(self._state, chief_dir, max_to_keep=1)
        latest = tf.train.latest_checkpoint(chief_dir)
        if latest is not None:
            self._state.restore(latest)
            self.restored = {name: int(var.numpy()) for name, var in self._vars.items()}
            self.samples = self.restored["samples"]
            if self.restored["global_batch"] not in (0, self.global_batch):  # iterations count steps of this batch
                model.optimizer.iterations.assign(self.samples // self.global_batch)
        model._training_state = self  # fit asks maybe_load_initial_counters_from_ckpt where to start

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch: int, initial_epoch: int,
                                              mode: Any = None) -> tuple[int, int]:
        """Keras fit's fault-tolerance hook: (epoch, step) to start at, both 0-based."""
        if self.restored is None:
            return initial_epoch, 0
        self.epoch, first = resume_position(self.restored["epoch"], self.restored["epoch_samples"],
                                            self.global_batch, steps_per_epoch)
        self.step = first
        return self.epoch, first

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if epoch != self.epoch:
            self.step = 0
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.step = batch + 1
        self.samples += self.global_batch
        self._since_save += 1
        assert self.agreement is not None
        decision = self.agreement.check()
        if decision is not None:
            self.stop(decision)
        if isinstance(self.save_freq, int) and self._since_save >= self.save_freq:
            self.back_up()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epoch, self.step = epoch + 1, 0
        if self.save_freq == "epoch":
            self.back_up()

    def on_train_end(self, logs: Any = None) -> None:
        self.model._training_state = None
        if self.delete_checkpoint and self._manager is not None:
            tf.io.gfile.rmtree(self._manager.directory)

    # ---- saving -------------------------------------------------------------------------------------
    def back_up(self) -> None:
        """Every worker writes (reads of synced variables are collectives); only the chief's copy is kept."""
        assert self.agreement is not None
        values = {"epoch": self.epoch, "epoch_samples": self.step * self.global_batch, "samples": self.samples,
                  "global_batch": self.global_batch,
                  "replicas": int(self.model.distribute_strategy.num_replicas_in_sync)}
        for name, value in values.items():
            self._vars[name].assign(value)
        if self._manager is not None:
            self.agreement.timed_save(self._manager.save)
        else:
            self.agreement.timed_save(lambda: checkpoint.write_to_scratch(self._state.write))
        self._since_save = 0

    def stop(self, decision: Decision) -> None:
        """Back up when it fits, say so, and leave fit with Preempted."""
        if decision.save:
            self.back_up()
        where = f"epoch {self.epoch + 1} step {self.step} (samples {self.samples})"
        self.on_stop(f"stopped after {where}; {decision.describe()}")
        if self.exit_on_stop:  # skips TensorFlow's teardown, which can block on peers already gone
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_codes.PREEMPTED)
        raise Preempted(f"preempted after {where}")
