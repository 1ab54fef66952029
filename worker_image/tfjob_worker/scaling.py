"""Batch and learning-rate arithmetic for data-parallel training. Pure."""

from __future__ import annotations


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
