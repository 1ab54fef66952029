"""Resume at another width, the runtime's side: the width the batch flags refer to, and this run's batch plan.

A backup saved by N replicas restores on M (MultiWorkerMirroredStrategy saves each variable once). What must
follow the width is the global batch and the learning rate (`scaling.plan_batch`, by TFJOB_ELASTIC_SCALING), and
the epoch's length in steps, so an epoch stays the same number of examples. The reference width (what
--batch-size-per-replica and --learning-rate were written for) comes from the operator, or else from the job's
first run, recorded next to the backup so every later run at any width reads the same one. No TensorFlow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from .progress import write_json_atomic
from .scaling import (
    CONSTANT_GLOBAL_BATCH,
    MAX_WORKERS_ENV,
    MIN_WORKERS_ENV,
    REFERENCE_WORKERS_ENV,
    SCALING_ENV,
    BatchPlan,
    plan_batch,
    steps_per_epoch,
)

#: In the backup directory: {"replicas": N}, the reference width, written by the chief of the first run.
REFERENCE_FILE = "reference-width.json"


def recorded_reference(backup_dir: str) -> int | None:
    """The reference width a previous run recorded, or None."""
    try:
        with open(os.path.join(backup_dir, REFERENCE_FILE)) as f:
            value = json.load(f).get("replicas")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value >= 1 else None


def record_reference(backup_dir: str, replicas: int) -> None:
    """Chief: record the reference width once (a later run at another width must not overwrite it)."""
    if recorded_reference(backup_dir) is None:
        write_json_atomic(os.path.join(backup_dir, REFERENCE_FILE), {"replicas": replicas})


def forget_reference(backup_dir: str) -> None:
    """Chief, once training is complete (the backup is gone too)."""
    try:
        os.unlink(os.path.join(backup_dir, REFERENCE_FILE))
    except FileNotFoundError:
        pass


def reference_replicas(env: Mapping[str, str], backup_dir: str, replicas: int, workers: int) -> int:
    """Replicas the flags refer to: TFJOB_ELASTIC_REFERENCE_WORKERS x replicas per worker, else the recorded
    width, else this run's."""
    reference = _whole(env, REFERENCE_WORKERS_ENV)
    if reference is not None:
        return reference * max(replicas // max(workers, 1), 1)
    return recorded_reference(backup_dir) or replicas


def _whole(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"environment variable {name}={text!r}: expected a whole number >= 1")
    return int(text)


def job_widths(env: Mapping[str, str] = os.environ) -> list[int]:
    """The widths (training processes: chief + workers) an elastic job may run at, narrowest first, from
    TFJOB_ELASTIC_MIN_WORKERS and TFJOB_ELASTIC_MAX_WORKERS (the operator sets them from spec.elasticPolicy);
    [] for a job that is not elastic. A script of your own checks each of them when it starts."""
    low, high = _whole(env, MIN_WORKERS_ENV), _whole(env, MAX_WORKERS_ENV)
    if low is None or high is None:
        return []
    return list(range(low, high + 1))


def check_widths(env: Mapping[str, str], per_replica: int, base_lr: float) -> None:
    """At start, before anything trains: every width the job may run at gets a batch plan, or ValueError names
    the first that cannot (a resize hours later would otherwise find it). Training processes stand for replicas:
    the plan's only refusal (a global batch smaller than the replicas) is the same with any devices per process."""
    reference = _whole(env, REFERENCE_WORKERS_ENV)
    widths = job_widths(env)
    if reference is None or not widths:
        return
    policy = env.get(SCALING_ENV, "").strip() or CONSTANT_GLOBAL_BATCH
    for width in widths:
        try:
            plan_batch(policy, per_replica, base_lr, width, reference)
        except ValueError as exc:
            raise ValueError(f"this elastic job cannot train at {width} training processes, one of the widths "
                             f"{widths[0]}-{widths[-1]} it may run at ({MIN_WORKERS_ENV}, {MAX_WORKERS_ENV}: "
                             f"spec.elasticPolicy): {exc}") from None


def plan(env: Mapping[str, str], backup_dir: str, per_replica: int, base_lr: float, replicas: int,
         workers: int) -> BatchPlan:
    """This run's batch and learning rate (a bad TFJOB_ELASTIC_SCALING or a global batch smaller than the
    replicas raises ValueError naming the variable)."""
    policy = env.get(SCALING_ENV, "").strip() or CONSTANT_GLOBAL_BATCH
    reference = reference_replicas(env, backup_dir, replicas, workers)
    return plan_batch(policy, per_replica, base_lr, replicas, reference)


def epoch_steps(num_examples: int, batch: BatchPlan, requested: int | None) -> int:
    """Steps of one epoch at this run's global batch: the epoch is as many examples as at the reference width
    (--steps-per-epoch counts steps of the reference's global batch)."""
    reference_batch = batch.global_batch if batch.policy == CONSTANT_GLOBAL_BATCH \
        else batch.per_replica * batch.reference
    examples = steps_per_epoch(num_examples, reference_batch, requested) * reference_batch
    return max(examples // batch.global_batch, 1)
