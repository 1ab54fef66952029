"""The pure rules of graceful preemption and resume at another width: the stop decision, the batch plan."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfjob_worker import cluster, exit_codes, peers, preemption
from tfjob_worker.elastic import check_widths, epoch_steps, job_widths
from tfjob_worker.preemption import NO_DEADLINE, decide
from tfjob_worker.scaling import plan_batch, replica_batches, resume_position


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


@pytest.mark.parametrize(("policy", "replicas", "reference", "shares", "global_batch", "lr"), [
    ("ConstantGlobalBatch", 4, 4, (32,) * 4, 128, 0.004),  # at the reference width: today's linear scaling rule
    ("ScaleLearningRate", 4, 4, (32,) * 4, 128, 0.004),
    ("ConstantGlobalBatch", 2, 4, (64, 64), 128, 0.004),  # narrower: same global batch and LR, bigger share each
    ("ConstantGlobalBatch", 3, 4, (43, 43, 42), 128, 0.004),  # uneven: the shares differ by one, sum 128
    ("ScaleLearningRate", 2, 4, (32, 32), 64, 0.002),  # narrower: same share each, LR x 2/4
    ("ScaleLearningRate", 3, 4, (32,) * 3, 96, 0.003),
    ("ScaleLearningRate", 8, 4, (32,) * 8, 256, 0.008),
])
def test_the_scaling_policy_sets_batch_and_learning_rate_at_each_width(policy, replicas, reference, shares,
                                                                        global_batch, lr):
    plan = plan_batch(policy, 32, 0.001, replicas, reference)
    assert (plan.shares, plan.global_batch) == (shares, global_batch)
    assert plan.learning_rate == pytest.approx(lr)


@pytest.mark.parametrize("per_replica", [16, 10, 7, 1])
@pytest.mark.parametrize("reference", [4, 5])  # 4 workers, or a chief and 4 workers
def test_every_width_of_an_elastic_job_splits_its_global_batch_exactly_and_as_evenly_as_it_can(per_replica,
                                                                                               reference):
    total = per_replica * reference
    for replicas in range(1, total + 1):
        shares = plan_batch("ConstantGlobalBatch", per_replica, 0.001, replicas, reference).shares
        assert len(shares) == replicas and sum(shares) == total  # every replica trains, the global batch exact
        assert max(shares) - min(shares) == (0 if total % replicas == 0 else 1) and min(shares) >= 1
        assert list(shares) == sorted(shares, reverse=True)  # the larger shares first, as the data pipeline cuts


def test_a_width_with_more_replicas_than_examples_and_an_unknown_policy_name_the_variable():
    assert replica_batches(64, 3) == (22, 21, 21)
    with pytest.raises(ValueError, match=r"TFJOB_ELASTIC_SCALING=ConstantGlobalBatch: the global batch 4 "
                                         r"\(--batch-size-per-replica 2 x 2 reference replicas\) leaves some of 5 "
                                         r"replicas without an example; raise --batch-size-per-replica to at least 3"):
        plan_batch("ConstantGlobalBatch", 2, 0.001, 5, 2)
    assert plan_batch("ScaleLearningRate", 2, 0.001, 5, 2).shares == (2,) * 5  # nothing to split
    with pytest.raises(ValueError, match="TFJOB_ELASTIC_SCALING='Constant'"):
        plan_batch("Constant", 32, 0.001, 3, 4)


ELASTIC = {"TFJOB_ELASTIC_SCALING": "ConstantGlobalBatch", "TFJOB_ELASTIC_REFERENCE_WORKERS": "4",
           "TFJOB_ELASTIC_MIN_WORKERS": "2", "TFJOB_ELASTIC_MAX_WORKERS": "6"}


def test_every_width_an_elastic_job_may_run_at_is_checked_at_start():
    assert job_widths(ELASTIC) == [2, 3, 4, 5, 6] and job_widths({}) == []
    check_widths(ELASTIC, 2, 0.001)  # 8 examples: one or more for each of up to 6 replicas
    with pytest.raises(ValueError, match=r"cannot train at 5 training processes, one of the widths 2-6 .*: "
                                         r"TFJOB_ELASTIC_SCALING=ConstantGlobalBatch: the global batch 4"):
        check_widths(ELASTIC, 1, 0.001)
    check_widths({**ELASTIC, "TFJOB_ELASTIC_SCALING": "ScaleLearningRate"}, 1, 0.001)
    check_widths({}, 1, 0.001)  # not elastic: nothing to check
    with pytest.raises(ValueError, match=r"TFJOB_ELASTIC_MAX_WORKERS='four': expected a whole number >= 1"):
        check_widths({**ELASTIC, "TFJOB_ELASTIC_MAX_WORKERS": "four"}, 2, 0.001)


@pytest.mark.parametrize(("value", "role", "index", "world_size", "step"), [
    ("", "worker", 0, 2, None),
    ("40", "worker", 1, 2, 40),  # every process
    ("40 task=worker:1", "worker", 1, 2, 40),
    ("40 task=worker:1", "worker", 0, 2, None),
    ("40 task=chief:0", "worker", 0, 2, None),
    ("25 world_size=3", "worker", 2, 3, 25),
    ("25 world_size=3 task=worker:0", "worker", 0, 4, None),
    ("40 attempt=0", "worker", 0, 2, 40),  # TFJOB_ATTEMPT 0, set by the operator
    ("40 attempt=1", "worker", 0, 2, None),
    ("25 attempt=1; 30 world_size=3", "worker", 0, 3, 30),  # the first clause that applies
    ("25 attempt=0; 30 world_size=3", "worker", 0, 3, 25),
])
def test_a_hold_at_a_step_applies_to_the_tasks_and_width_it_names(value, role, index, world_size, step):
    env = {preemption.HOLD_ENV: value, "TFJOB_ATTEMPT": "0"}
    assert preemption.hold_step(role, index, world_size, env) == step


@pytest.mark.parametrize("value", ["soon", "0", "40 worker:1", "40 rank=1", "40; 30 worker"])
def test_a_bad_hold_names_the_variable_and_its_form(value):
    with pytest.raises(ValueError, match=r"TFJOB_FAULT_HOLD_AT_STEP=.*expected STEP \[task=TYPE:INDEX\]"):
        preemption.hold_step("worker", 0, 2, {preemption.HOLD_ENV: value})


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


def test_peers_are_the_other_trainers_resolved_and_one_whose_port_refuses_is_lost() -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: a connect is refused, as to a killed process
    live, dead = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed))
    try:
        view = cluster.from_tf_config(json.dumps({
            "cluster": {"chief": [live], "worker": ["127.0.0.1:1", dead], "ps": ["127.0.0.1:2"]},
            "task": {"type": "worker", "index": 0}}))
        found = peers.collective_peers(view)
        assert [(p.name, p.address) for p in found] == [("chief-0", live), ("worker-1", dead)]  # not itself, not ps
        lost = peers.lost_peers(found, timeout=0.5)
        assert [(peer.name, reason) for peer, reason in lost] == [("worker-1", "connection refused")]
    finally:
        listening.close()
        closed.close()


LOST_PEER_SCRIPT = """
import socket, sys, time
from tfjob_worker import peers, preemption
port, busy = int(sys.argv[1]), sys.argv[2] == "busy"
flag = preemption.StopSignal(30.0).install()
flag.deferred = True  # as a training loop does: SIGTERM only raises the flag
peer = peers.Peer("worker-1", f"127.0.0.1:{port}", ("127.0.0.1", port), socket.AF_INET)
print("armed", preemption.LostPeerStop([peer], busy=lambda: busy).arm(), flush=True)
time.sleep(2)  # the probe takes milliseconds
print("still running", flag.raised, flush=True)
"""


@pytest.mark.parametrize(("peer", "busy", "code"), [
    ("gone", False, exit_codes.PREEMPTED),  # nobody can agree without it: stop now
    ("listening", False, 0),  # the peer is there: the agreement decides, the process goes on
    ("gone", True, 0),  # already agreed (stopping and saving by itself): left alone
])
def test_on_sigterm_a_process_whose_peer_is_gone_exits_143_at_once_naming_it(tmp_path, peer, busy, code):
    server = socket.create_server(("127.0.0.1", 0)) if peer == "listening" else socket.socket()
    if peer == "gone":
        server.bind(("127.0.0.1", 0))  # bound, not listening: refused, as a killed worker's port
    env = {**os.environ, "PYTHONPATH": str(Path(preemption.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", LOST_PEER_SCRIPT, str(server.getsockname()[1]),
                             "busy" if busy else "-"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "armed True\n"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        if code == exit_codes.PREEMPTED:
            assert proc.wait(5) == code
            assert time.monotonic() - sent < 2
            err = proc.stderr.read() if proc.stderr else ""
            assert "a peer is gone: worker-1 (127.0.0.1:" in err and "connection refused" in err, err
        else:
            out, _ = proc.communicate(timeout=20)
            assert proc.returncode == 0 and "still running True" in out
    finally:
        proc.kill()
        proc.wait()
        server.close()
