"""Strategy choice over faked device lists; batch, LR and GPU-pinning arithmetic."""

from __future__ import annotations

import pytest

from tfjob_worker.cluster import ClusterView
from tfjob_worker.devices import gpus_for_local_rank
from tfjob_worker.scaling import global_batch_size, scaled_learning_rate, steps_per_epoch, warmup_learning_rate
from tfjob_worker.strategy_choice import StrategyChoiceError, choose_strategy, replicas_in_sync


def view(workers: int = 1, ps: int = 0, chief: int = 0) -> ClusterView:
    spec = {"chief": [f"c:{i}" for i in range(chief)], "worker": [f"w{i}:1" for i in range(workers)],
            "ps": [f"p{i}:1" for i in range(ps)]}
    spec = {k: v for k, v in spec.items() if v}
    return ClusterView(role="worker", index=0, rank=0, world_size=workers + chief, local_rank=0, local_size=1,
                       is_chief=not chief, cluster=spec)


GPU2 = ["/physical_device:GPU:0", "/physical_device:GPU:1"]


@pytest.mark.parametrize(
    ("requested", "collective", "cluster", "gpus", "devices", "kind", "expected_collective"),
    [
        ("auto", "auto", view(2), [], 1, "mwms", "RING"),
        ("auto", "auto", view(2), GPU2, 2, "mwms", "NCCL"),
        ("auto", "ring", view(2), GPU2, 2, "mwms", "RING"),
        ("auto", "nccl", view(4), GPU2[:1], 1, "mwms", "NCCL"),
        ("auto", "nccl", view(2), [], 1, "mwms", "RING"),  # falls back, with a warning
        ("auto", "auto", view(2, ps=1, chief=1), [], 1, "ps", None),
        ("auto", "auto", view(1), GPU2, 2, "mirrored", None),
        ("auto", "auto", view(1), [], 4, "mirrored", None),  # virtual CPU devices
        ("auto", "auto", view(1), GPU2[:1], 1, "default", None),
        ("auto", "auto", view(1), [], 1, "default", None),
        ("mwms", "auto", view(1), [], 1, "mwms", "RING"),
        ("central-storage", "auto", view(1), GPU2, 2, "central-storage", None),
        ("default", "auto", view(1), GPU2, 2, "default", None),
        ("independent", "auto", view(3), [], 1, "independent", None),
    ],
)
def test_strategy_choice(requested, collective, cluster, gpus, devices, kind, expected_collective):
    choice = choose_strategy(requested, collective, cluster, gpus, devices)
    assert (choice.kind, choice.collective) == (kind, expected_collective)
    assert bool(choice.warnings) == (collective == "nccl" and not gpus)


@pytest.mark.parametrize(
    ("requested", "cluster", "message"),
    [
        ("ps", view(2), "needs ps tasks"),
        ("mirrored", view(2), "runs in one process"),
        ("default", view(3), "has 3 training tasks"),
        ("horovod", view(1), "not one of"),
    ],
)
def test_impossible_strategy_requests_are_refused(requested, cluster, message):
    with pytest.raises(StrategyChoiceError, match=message):
        choose_strategy(requested, "auto", cluster, [], 1)


@pytest.mark.parametrize(
    ("kind", "workers", "devices", "replicas"),
    [("mwms", 2, 1, 2), ("mwms", 2, 4, 8), ("mirrored", 1, 4, 4), ("ps", 2, 1, 1), ("default", 1, 1, 1),
     ("independent", 3, 1, 1)],
)
def test_replicas_in_sync(kind, workers, devices, replicas):
    choice = choose_strategy(kind if kind != "ps" else "auto", "auto", view(workers, ps=int(kind == "ps"),
                             chief=int(kind == "ps")), [], devices)
    assert replicas_in_sync(choice, view(workers), devices) == replicas


@pytest.mark.parametrize(
    ("per_replica", "replicas", "base_lr", "global_batch", "lr"),
    [(32, 1, 0.001, 32, 0.001), (32, 2, 0.001, 64, 0.002), (16, 8, 0.1, 128, 0.8)],
)
def test_global_batch_and_linear_lr_scaling(per_replica, replicas, base_lr, global_batch, lr):
    assert global_batch_size(per_replica, replicas) == global_batch
    assert scaled_learning_rate(base_lr, replicas) == pytest.approx(lr)


def test_bad_batch_or_lr_is_refused():
    with pytest.raises(ValueError):
        global_batch_size(0, 2)
    with pytest.raises(ValueError, match="--learning-rate"):
        scaled_learning_rate(0.0, 2)


@pytest.mark.parametrize(("step", "lr"), [(0, 0.001), (5, 0.0025), (10, 0.004), (50, 0.004)])
def test_warmup_ramps_linearly_to_the_scaled_lr(step, lr):
    assert warmup_learning_rate(step, target_lr=0.004, base_lr=0.001, warmup_steps=10) == pytest.approx(lr)


def test_steps_per_epoch_drops_the_remainder_or_uses_the_request():
    assert steps_per_epoch(1293, 64) == 20
    assert steps_per_epoch(1293, 64, requested=7) == 7
    with pytest.raises(ValueError, match="smaller than one global batch"):
        steps_per_epoch(10, 64)


@pytest.mark.parametrize(
    ("local_rank", "local_size", "gpus", "visible"),
    [(0, 1, 4, None), (1, 2, 0, None), (0, 2, 2, [0]), (1, 2, 2, [1]), (1, 2, 4, [2, 3]), (2, 3, 2, [0]),
     (3, 4, 4, [3])],
)
def test_gpu_pinning_by_local_rank(local_rank, local_size, gpus, visible):
    assert gpus_for_local_rank(local_rank, local_size, gpus) == visible
