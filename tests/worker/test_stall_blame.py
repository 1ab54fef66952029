"""Where a stalled trainer was blocked (tfjob_worker.blocked), the record its supervisor leaves for the operator
(tfjob_worker.stall.StallRecord), and the reporter saying it without counting it as progress. No TensorFlow: the
stacks are those of the stack dumps of a real two-worker gang whose worker 1 hung (its py_function in the forward
pass, and --stall-worker-after's SIGUSR2), with this machine's paths shortened."""

from __future__ import annotations

import os
import sysconfig
import time

import pytest

from tfjob_worker import blocked
from tfjob_worker.reports import IDLE_LOOK, Reporter
from tfjob_worker.stall import RECORD_PREFIX, StallRecord

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = sysconfig.get_paths()["stdlib"]
WORKER = os.path.dirname(blocked.__file__)
TF_CALL = [  # the main thread of a trainer inside model.fit's train_function (the graph: steps and collectives)
    ("<frozen runpy>", 198, "_run_module_as_main"),
    (f"{WORKER}/runtime.py", 141, "run"),
    (f"{WORKER}/fit_loop.py", 175, "run_fit"),
    (f"{SITE}/tf_keras/src/engine/training.py", 1804, "fit"),
    (f"{SITE}/tensorflow/python/eager/polymorphic_function/polymorphic_function.py", 833, "__call__"),
    (f"{SITE}/tensorflow/python/eager/execute.py", 53, "quick_execute"),
]
REPORTER = [(f"{STDLIB}/threading.py", 1002, "_bootstrap"), (f"{WORKER}/reports.py", 184, "_send_changes")]
PY_FUNCTION = [  # a TensorFlow thread running the user's py_function, waiting forever
    (f"{SITE}/tensorflow/python/ops/script_ops.py", 267, "__call__"),
    (f"{SITE}/tensorflow/python/autograph/impl/api.py", 643, "wrapper"),
    ("/repo/tests/worker/user_model.py", 47, "stall_here"),
    (f"{STDLIB}/threading.py", 629, "wait"),
    (f"{STDLIB}/threading.py", 327, "wait"),
]
SIGUSR2_HANG = [  # the main thread in --stall-worker-after's signal handler, between two steps
    *TF_CALL[:4],
    (f"{SITE}/tf_keras/src/callbacks.py", 470, "on_train_batch_end"),
    (f"{WORKER}/lifecycle.py", 218, "hang"),
    (f"{STDLIB}/threading.py", 629, "wait"),
]


@pytest.mark.parametrize(("stacks", "verdict"), [
    pytest.param({1: TF_CALL, 2: REPORTER}, ("tensorflow", ""), id="waiting-in-a-collective"),
    pytest.param({1: TF_CALL, 2: REPORTER, 3: PY_FUNCTION}, ("own", "worker/user_model.py:47 in stall_here"),
                 id="its-py-function-hangs-while-the-graph-waits-for-it"),
    pytest.param({1: SIGUSR2_HANG, 2: REPORTER}, ("own", "tfjob_worker/lifecycle.py:218 in hang"),
                 id="its-training-loop-hangs-between-steps"),
    pytest.param({1: [*TF_CALL[:4], ("/repo/callbacks.py", 9, "on_epoch_end")]},
                 ("own", "repo/callbacks.py:9 in on_epoch_end"), id="a-user-callback"),
    pytest.param({2: REPORTER}, ("", ""), id="no-main-thread"),
])
def test_where_a_trainer_is_blocked(stacks: dict[int, list[blocked.Frame]], verdict: tuple[str, str]) -> None:
    assert blocked.classify(stacks, 1) == verdict


def test_this_process_sampled_is_in_its_own_code() -> None:
    assert blocked.sample()[0] == blocked.OWN


def test_the_record_round_trips_through_the_termination_message() -> None:
    record = StallRecord("own", "worker/user_model.py:47 in stall_here", 15, 1795860200.49, 2)
    message = f"[tfjob] error: training stalled ...\n{record.line()}\n"
    assert record.line().startswith(RECORD_PREFIX) and "\n" not in record.line()
    assert StallRecord.parse(message) == record
    assert StallRecord.parse("[tfjob] error: training stalled: no training progress for 8s\n") is None
    assert StallRecord.parse(RECORD_PREFIX + "{not json\n") is None
    assert record.describe() == "in its own code at worker/user_model.py:47 in stall_here"
    assert StallRecord("tensorflow", "", 15, None, 2).describe().startswith("waiting inside TensorFlow")


def test_an_idle_trainer_says_where_it_waits_without_that_counting_as_progress() -> None:
    reporter = Reporter(fd=None)
    reporter.describe(trains=True, rank=0, world_size=2, strategy="MWMS", collective="RING", device_kind="cpu",
                      device_count=1, epochs=1, steps_per_epoch=10)
    reporter.done()
    reporter.step_end(1)
    reporter.look_where_blocked()
    assert reporter.report.blocked == ""  # not idle long enough yet
    activity = reporter.report.activity
    reporter.look_where_blocked(now=time.monotonic() + IDLE_LOOK)  # the main thread here is this test: own code
    assert (reporter.report.blocked, reporter.report.activity) == (blocked.OWN, activity)
    reporter.step_end(2)
    assert reporter.report.blocked == "" and reporter.report.blocked_at == ""
