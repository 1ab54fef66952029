"""A failed container's termination message → the line that says why, and advice for well-known failures."""

from __future__ import annotations

import pytest

from tfjob_operator.reconcile.diagnosis import HINTS, LINE_LIMIT, explain, failure_line, hint_for

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
# The start of every CPU-only worker (captured from one: tests/unit/test_log_noise.py), then what a worker printed.
START = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
         "I0000 00:00:1795857975.841519   12384 port.cc:153] oneDNN custom operations are on. You may see slightly "
         "different numerical results due to floating-point round-off errors from different computation orders.\n"
         "I0000 00:00:1795857975.842044   12384 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
         "will not be used.\n"
         "E0000 00:00:1795857979.960265   12384 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
         "Failed call to cuInit: UNKNOWN ERROR (303)\n")
STARTED = START + "[tfjob] start role=worker index=1 world_size=2 strategy=MultiWorkerMirroredStrategy\n"
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
        pytest.param(START, "", id="start-up-noise-alone-says-nothing"),
        pytest.param("ValueError: bad layer size\n" + START, "ValueError: bad layer size",
                     id="noise-after-the-exception-never-hides-it"),
        pytest.param(START + "[tfjob] error: training stalled: no training progress for 21s\n"
                     "I0000 00:00:1795858017.521137   14549 coordination_service.cc:1472] Barrier passed\n",
                     "[tfjob] error: training stalled: no training progress for 21s", id="an-error-of-our-runtime"),
        pytest.param(START + PEER.splitlines()[0] + "\n[tfjob] epoch 1/6 loss=0.5\n", PEER.splitlines()[0],
                     id="a-tensorflow-error-line-that-is-not-noise"),
        pytest.param(STARTED + "loss went NaN\n", "loss went NaN", id="last-words-after-the-noise"),
    ],
)
def test_the_failure_line_is_the_exception_or_the_last_words(message: str, line: str) -> None:
    assert failure_line(message) == line


@pytest.mark.parametrize(
    ("message", "line"),
    [
        pytest.param(STARTED + "[tfjob] epoch 1/6 loss=0.5\n", "", id="a-progress-line-is-no-cause"),
        pytest.param(START, "", id="noise-is-no-cause"),
        pytest.param(STARTED + "MemoryError\n", "MemoryError", id="an-exception-still-is"),
    ],
)
def test_a_process_ended_by_a_signal_is_quoted_only_for_an_error_line(message: str, line: str) -> None:
    assert failure_line(message, ended_itself=False) == line


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
        pytest.param(STARTED, 137, "OOMKilled", "out-of-memory", id="oom-killed-after-the-cuda-noise"),
        pytest.param("Epoch 3/10", 137, "Error", "sigkill", id="exit-137-is-no-oom"),
        pytest.param("Killed with SIGKILL by the kubelet: still running when the 30s grace period after SIGTERM ended",
                     137, "Killed", None, id="a-kill-the-kubelet-says-needs-no-hint"),
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
        pytest.param("", 137, " (hint: a SIGKILL from outside the program, not reported as OOMKilled: the pod's "
                              "events say who sent it (the kubelet when the grace period ran out, an eviction, "
                              "kill -9))", id="hint-only"),
        pytest.param(STARTED + "[tfjob] epoch 1/6 loss=0.5\n", 137, " (hint: a SIGKILL from outside the program, not "
                     "reported as OOMKilled: the pod's events say who sent it (the kubelet when the grace period ran "
                     "out, an eviction, kill -9))", id="a-killed-worker-quotes-no-cuda-line-nor-progress"),
        pytest.param("", 1, "", id="nothing-known"),
    ],
)
def test_explain_adds_what_is_known(message: str, exit_code: int, text: str) -> None:
    assert explain(message, exit_code) == text


@pytest.mark.parametrize(
    ("message", "exit_code", "reason", "text"),
    [
        pytest.param("Killed with SIGKILL by a fault injection (tfjob local --kill-worker-after)", 137, "Killed",
                     ": Killed with SIGKILL by a fault injection (tfjob local --kill-worker-after)",
                     id="the-kubelet-says-who-killed-it"),
        pytest.param("failed to start container process: exec: 'trainer': no such file or directory", 128,
                     "StartError", ": failed to start container process: exec: 'trainer': no such file or directory",
                     id="a-start-error-is-the-runtime-s-statement"),
        pytest.param(STARTED, 137, "OOMKilled", " (hint: the kernel's OOM killer stopped it at its memory limit: "
                     "raise resources.limits.memory or lower the batch size)", id="oom-without-noise"),
    ],
)
def test_a_statement_of_the_kubelet_or_runtime_is_quoted_as_it_is(message: str, exit_code: int, reason: str,
                                                                 text: str) -> None:
    assert explain(message, exit_code, reason) == text
