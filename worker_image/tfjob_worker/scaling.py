"""Batch and learning-rate arithmetic for data-parallel training. Pure."""

from __future__ import annotations

from dataclasses import dataclass


def global_batch_size(per_replica: int, replicas: int) -> int:
    """Global batch = per-replica batch x number of replicas in sync."""
    if per_replica < 1 or replicas < 1:
        raise ValueError(f"batch size per replica ({per_replica}) and replicas ({replicas}) must be >= 1")
    return per_replica * replicas


def scaled_learning_rate(base_lr: float, replicas: int) -> float:
    """Linear scaling rule (Goyal et al. 2017): the base LR is for one replica."""
    if base_lr <= 0:
        raise ValueError(f"--learning-rate must be > 0, got {base_lr}")
    return base_lr * replicas


def warmup_learning_rate(step: int, target_lr: float, base_lr: float, warmup_steps: int) -> float:
    """LR at `step`: linear ramp from base_lr to target_lr over warmup_steps, then target_lr."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return target_lr
    return base_lr + (target_lr - base_lr) * step / warmup_steps


def steps_per_epoch(num_examples: int, global_batch: int, requested: int | None = None) -> int:
    """Steps in one epoch: the requested number, else full global batches (remainder dropped)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--steps-per-epoch must be >= 1, got {requested}")
        return requested
    steps = num_examples // global_batch
    if steps < 1:
        raise ValueError(
            f"the training set ({num_examples} examples) is smaller than one global batch ({global_batch}); "
            "lower --batch-size-per-replica"
        )
    return steps


#: How the global batch and the learning rate follow the width on a resume at another width.
SCALING_ENV = "TFJOB_ELASTIC_SCALING"
#: The width (workers) that --batch-size-per-replica and --learning-rate refer to; the operator sets it from the
#: spec's replicas. Unset: the width of the job's first run, recorded in the backup directory.
REFERENCE_WORKERS_ENV = "TFJOB_ELASTIC_REFERENCE_WORKERS"
#: The narrowest and widest widths (training processes) an elastic job may run at: spec.elasticPolicy's bounds
#: (+ the chief). The runtime plans every width between them at start (elastic.check_widths).
MIN_WORKERS_ENV = "TFJOB_ELASTIC_MIN_WORKERS"
MAX_WORKERS_ENV = "TFJOB_ELASTIC_MAX_WORKERS"
CONSTANT_GLOBAL_BATCH = "ConstantGlobalBatch"
SCALE_LEARNING_RATE = "ScaleLearningRate"
POLICIES = (CONSTANT_GLOBAL_BATCH, SCALE_LEARNING_RATE)


def replica_batches(global_batch: int, replicas: int) -> tuple[int, ...]:
    """Each replica's share of one global batch, in replica order: as even as can be, the first
    `global_batch % replicas` one example larger (64 over 3: 22, 21, 21). The global batch stays exact."""
    if replicas < 1 or global_batch < replicas:
        raise ValueError(f"a global batch of {global_batch} cannot give each of {replicas} replicas an example")
    small, extra = divmod(global_batch, replicas)
    return tuple(small + 1 if i < extra else small for i in range(replicas))


@dataclass(frozen=True)
class BatchPlan:
    """The batch and learning rate of a run at `replicas`, for a job whose flags refer to `reference`."""

    policy: str
    replicas: int
    reference: int
    per_replica: int  # --batch-size-per-replica: what the flags say, at the reference width
    global_batch: int
    learning_rate: float  # the target LR (after warm-up)

    @property
    def shares(self) -> tuple[int, ...]:
        """Each replica's batch at this width (they differ by one where the global batch does not divide)."""
        return replica_batches(self.global_batch, self.replicas)


def plan_batch(policy: str, per_replica: int, base_lr: float, replicas: int, reference: int) -> BatchPlan:
    """ConstantGlobalBatch: global batch = per_replica x reference, split over `replicas` (unevenly where it does
    not divide: `replica_batches`), LR = base x reference.
    ScaleLearningRate: per-replica batch fixed, LR = base x replicas (the reference's LR x replicas / reference).
    At the reference width both are the linear scaling rule of global_batch_size and scaled_learning_rate.
    Raises ValueError only where a width cannot train: a global batch smaller than the replicas."""
    if policy not in POLICIES:
        raise ValueError(f"environment variable {SCALING_ENV}={policy!r}: expected one of {', '.join(POLICIES)}")
    if reference < 1:
        raise ValueError(f"environment variable {REFERENCE_WORKERS_ENV}: the reference width must be >= 1, "
                         f"got {reference}")
    if policy == SCALE_LEARNING_RATE:
        return BatchPlan(policy, replicas, reference, per_replica, global_batch_size(per_replica, replicas),
                         scaled_learning_rate(base_lr, replicas))
    total = global_batch_size(per_replica, reference)
    if total < replicas:
        raise ValueError(
            f"{SCALING_ENV}={CONSTANT_GLOBAL_BATCH}: the global batch {total} (--batch-size-per-replica "
            f"{per_replica} x {reference} reference replicas) leaves some of {replicas} replicas without an "
            f"example; raise --batch-size-per-replica to at least {-(-replicas // reference)}, lower the widest "
            f"width the job may run at, or set {SCALING_ENV}={SCALE_LEARNING_RATE}")
    return BatchPlan(policy, replicas, reference, per_replica, total, scaled_learning_rate(base_lr, reference))


def resume_position(epoch: int, epoch_samples: int, global_batch: int, steps: int) -> tuple[int, int]:
    """(epoch, first step) to resume at, both 0-based, from the examples already trained in `epoch`.

    A width change can leave a part of a batch over: it is trained again (rounded down), never skipped."""
    step = epoch_samples // global_batch
    return (epoch + 1, 0) if step >= steps else (epoch, step)
