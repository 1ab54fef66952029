"""A failed container's termination message → the line that says why, and advice for well-known failures."""

from __future__ import annotations

import pytest

from tfjob_operator.diagnosis import HINTS, LINE_LIMIT, explain, failure_line, hint_for

KERAS3 = """Epoch 1/2
Traceback (most recent call last):
  File "/app/train.py", line 40, in <module>
    model.fit(dataset, epochs=2)
  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
ValueError: Attempt to convert a value (PerReplica:{
  0: <tf.Tensor: shape=(), dtype=float32, numpy=0.5>
}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.
"""
PEER = ("2026-11-24 10:00:01.1 E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
        "BaseCollectiveExecutor::StartAbort UNAVAILABLE: failed to connect to all addresses\n"
        "tensorflow.python.framework.errors_impl.UnavailableError: "
        "Collective ops is aborted by: failed to connect to all addresses\n")


@pytest.mark.parametrize(
    ("message", "line"),
    [
        pytest.param(KERAS3, "ValueError: Attempt to convert a value (PerReplica:{ … }) with an unsupported type "
                             "(<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.",
                     id="a-value-printed-over-several-lines-is-elided"),
        pytest.param("ValueError: bad (shape\nI0000 tensorflow shutting down\n", "ValueError: bad (shape",
                     id="a-bracket-never-closed-keeps-the-first-line"),
        pytest.param(PEER, "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: "
                           "failed to connect to all addresses", id="dotted-tf-error"),
        pytest.param("Traceback (most recent call last):\n  ...\nKeyError: 'label'\n"
                     "\nDuring handling of the above exception, another exception occurred:\n\n"
                     "Traceback (most recent call last):\n  ...\nRuntimeError: no labels in the dataset\n",
                     "RuntimeError: no labels in the dataset", id="chained-the-last-raised"),
        pytest.param("loading data\nloss went NaN at step 40, giving up\n\n",
                     "loss went NaN at step 40, giving up", id="no-exception-last-non-empty-line"),
        pytest.param("KeyboardInterrupt\n", "KeyboardInterrupt", id="bare-exception-name"),
        pytest.param("", "", id="empty"),
    ],
)
def test_the_failure_line_is_the_exception_or_the_last_words(message: str, line: str) -> None:
    assert failure_line(message) == line


def test_a_long_line_is_clipped() -> None:
    line = failure_line("OSError: " + "x" * 1000)
    assert (len(line), line[-1]) == (LINE_LIMIT, "…")


@pytest.mark.parametrize(
    ("message", "exit_code", "reason", "hint"),
    [
        pytest.param(KERAS3, 1, "Error", "keras3-mwms", id="keras3-under-mwms"),
        pytest.param("NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\n"
                     "tensorflow.python.framework.errors_impl.InternalError: ncclInvalidUsage", 1, "Error",
                     "nccl-duplicate-gpu", id="nccl-duplicate-gpu"),
        pytest.param("E external/local_tsl/tsl/platform/default/port.cc] Failed to add port 127.0.0.1:2222\n"
                     "OSError: [Errno 98] Address already in use", 1, "Error", "address-in-use",
                     id="address-in-use"),
        pytest.param("", 137, "OOMKilled", "out-of-memory", id="oom-killed"),
        pytest.param("Epoch 3/10", 137, "Error", "out-of-memory", id="exit-137"),
        pytest.param(PEER, 200, "Error", "peer-lost", id="unavailable-peer"),
        pytest.param("DeadlineExceededError: Collective ops timed out", 1, "Error", "peer-lost",
                     id="collective-timeout"),
        pytest.param("RuntimeError: peer task /job:worker/task:1 went away", 1, "Error", "peer-lost",
                     id="peer-went-away"),
        pytest.param("ValueError: bad input shape", 1, "Error", None, id="a-plain-user-bug-has-no-hint"),
        pytest.param("", 143, "Error", None, id="sigterm-has-no-hint"),
    ],
)
def test_well_known_tensorflow_failures_get_one_line_of_advice(message: str, exit_code: int, reason: str,
                                                               hint: str | None) -> None:
    found = hint_for(message, exit_code, reason)
    assert (found.name if found else None) == hint


def test_every_hint_is_one_line() -> None:
    assert all("\n" not in h.advice and h.advice for h in HINTS)


@pytest.mark.parametrize(
    ("message", "exit_code", "text"),
    [
        pytest.param("ValueError: bad input shape\n", 1, ": ValueError: bad input shape", id="line-only"),
        pytest.param("", 137, " (hint: killed for memory (or by SIGKILL): raise resources.limits.memory or lower "
                              "the batch size)", id="hint-only"),
        pytest.param("", 1, "", id="nothing-known"),
    ],
)
def test_explain_adds_what_is_known(message: str, exit_code: int, text: str) -> None:
    assert explain(message, exit_code) == text
