"""The pure rules of graceful preemption and resume at another width: the stop decision, the batch plan."""

from __future__ import annotations

import pytest

from tfjob_worker import preemption
from tfjob_worker.elastic import epoch_steps
from tfjob_worker.preemption import NO_DEADLINE, decide
from tfjob_worker.scaling import plan_batch, resume_position


@pytest.mark.parametrize(("rows", "stop", "save"), [
    ([(0, NO_DEADLINE, 0.1), (0, NO_DEADLINE, 0.2)], False, False),  # nobody signalled
    ([(0, NO_DEADLINE, 0.1), (1, 29.5, 0.2)], True, True),  # one worker's SIGTERM stops both; the save fits
    ([(1, 29.5, 0.1), (0, NO_DEADLINE, 14.0)], True, False),  # the slowest save (x2) + 2 s exit > 29.5 s
    ([(1, 1.9, 0.0), (0, NO_DEADLINE, 0.0)], True, False),  # less than the 2 s an exit needs
    ([(1, 25.0, 0.1), (1, 3.0, 0.1)], True, True),  # the tightest grace decides: 3 >= 2 + 0.2
])
def test_any_flag_stops_every_worker_and_the_save_must_fit_the_tightest_grace(rows, stop, save):
    decision = decide(rows)
    assert (decision.stop, decision.save) == (stop, save)


def test_the_grace_and_the_check_interval_come_from_the_environment_and_bad_values_name_the_variable():
    assert preemption.grace_seconds({}) == 30.0
    assert preemption.grace_seconds({"TFJOB_TERMINATION_GRACE_SECONDS": "120"}) == 120.0
    assert preemption.check_every({"TFJOB_STOP_CHECK_EVERY_STEPS": "10"}) == 10
    assert preemption.check_every({}) is None  # adaptive
    with pytest.raises(ValueError, match="TFJOB_TERMINATION_GRACE_SECONDS='soon'"):
        preemption.grace_seconds({"TFJOB_TERMINATION_GRACE_SECONDS": "soon"})
    with pytest.raises(ValueError, match="TFJOB_STOP_CHECK_EVERY_STEPS"):
        preemption.check_every({"TFJOB_STOP_CHECK_EVERY_STEPS": "0"})


def test_a_stop_signal_counts_the_grace_from_its_arrival():
    signal = preemption.StopSignal(grace=30.0)
    assert not signal.raised and signal.remaining() == NO_DEADLINE
    signal.raise_flag(now=100.0)
    assert signal.remaining(now=110.0) == 20.0


@pytest.mark.parametrize(("policy", "replicas", "reference", "per_replica", "global_batch", "lr"), [
    ("ConstantGlobalBatch", 4, 4, 32, 128, 0.004),  # at the reference width: today's linear scaling rule
    ("ScaleLearningRate", 4, 4, 32, 128, 0.004),
    ("ConstantGlobalBatch", 2, 4, 64, 128, 0.004),  # narrower: same global batch and LR, bigger share each
    ("ScaleLearningRate", 2, 4, 32, 64, 0.002),  # narrower: same share each, LR x 2/4
    ("ScaleLearningRate", 8, 4, 32, 256, 0.008),
])
def test_the_scaling_policy_sets_batch_and_learning_rate_at_each_width(policy, replicas, reference, per_replica,
                                                                        global_batch, lr):
    plan = plan_batch(policy, 32, 0.001, replicas, reference)
    assert (plan.per_replica, plan.global_batch) == (per_replica, global_batch)
    assert plan.learning_rate == pytest.approx(lr)


def test_a_global_batch_that_does_not_divide_and_an_unknown_policy_name_the_variable():
    with pytest.raises(ValueError, match=r"TFJOB_ELASTIC_SCALING=ConstantGlobalBatch: the global batch 128 .* "
                                         r"does not divide among 3 replicas"):
        plan_batch("ConstantGlobalBatch", 32, 0.001, 3, 4)
    with pytest.raises(ValueError, match="TFJOB_ELASTIC_SCALING='Constant'"):
        plan_batch("Constant", 32, 0.001, 3, 4)


@pytest.mark.parametrize(("epoch", "samples", "batch", "steps", "where"), [
    (0, 0, 64, 100, (0, 0)),
    (1, 640, 64, 100, (1, 10)),  # same batch: the step after the last saved
    (1, 640, 128, 50, (1, 5)),  # twice the batch: half the steps
    (1, 640, 96, 66, (1, 6)),  # a partial batch is trained again, never skipped
    (1, 6400, 64, 100, (2, 0)),  # the epoch was complete
])
def test_resume_position_counts_samples_at_the_new_batch(epoch, samples, batch, steps, where):
    assert resume_position(epoch, samples, batch, steps) == where


def test_an_epoch_keeps_its_examples_at_another_width():
    narrow = plan_batch("ScaleLearningRate", 32, 0.001, 1, 2)
    assert epoch_steps(1164, plan_batch("ScaleLearningRate", 32, 0.001, 2, 2), None) == 18  # 1164 // 64
    assert epoch_steps(1164, narrow, None) == 36  # 18 x 64 examples at 32 a step
    assert epoch_steps(1164, narrow, 300) == 600  # --steps-per-epoch counts the reference's batches


@pytest.mark.parametrize(("step", "exchange", "interval"), [
    (None, 0.003, 1),  # no step timed yet: exchange after the next one
    (0.080, 0.003, 4),  # conv net on 2 workers: 3 ms every 4 steps of 80 ms is under 1%
    (0.005, 0.003, 60),  # 5 ms steps: 60 steps for 1%, 0.3 s of steps to wait at a stop
    (0.002, 0.003, 100),  # at most 100 steps
    (0.600, 0.003, 1),  # slow steps: every step
    (0.300, 0.100, 3),  # a slow exchange: bounded by 1 s of steps (1% would want 34)
])
def test_the_exchange_interval_keeps_its_cost_near_one_percent_and_a_stop_within_a_second(step, exchange, interval):
    assert preemption.next_interval(step, exchange) == interval


def test_every_worker_takes_the_largest_proposed_interval():
    assert preemption.agreed_interval([(0, NO_DEADLINE, 0.1, 4), (0, NO_DEADLINE, 0.1, 9)]) == 9
    assert preemption.agreed_interval([(0, NO_DEADLINE, 0.1)]) == 1
