"""The one list of lines that never say why a TensorFlow process failed (tfjob_operator.reconcile.log_noise),
against real lines.

The CPU-only lines were captured from real `python -m tfjob_worker` starts on this machine (TensorFlow 2.21, a
CUDA build without a GPU; one worker and a two-worker MultiWorkerMirroredStrategy gang, TF_CPP_MIN_LOG_LEVEL 2 and
0) and a `jit_compile=True` function (XLA); the GPU-build lines are as TensorFlow's and XLA's issue trackers quote
them (tensorflow/tensorflow#62075 and #100442, openxla/xla#20803).
"""

from __future__ import annotations

import pytest

from tfjob_operator.reconcile import log_noise

NOISE = [
    # A CPU-only worker start, TF_CPP_MIN_LOG_LEVEL=2 (the runtime's default)
    ("absl-before-init", "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"),
    ("cuinit", "E0000 00:00:1795857979.960265   12384 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
               "error: Failed call to cuInit: UNKNOWN ERROR (303)"),
    ("onednn", "I0000 00:00:1795857975.841519   12384 port.cc:153] oneDNN custom operations are on. You may see "
               "slightly different numerical results due to floating-point round-off errors from different "
               "computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`."),
    ("cuda-drivers-missing", "I0000 00:00:1795857975.842044   12384 cudart_stub.cc:31] Could not find cuda drivers "
                             "on your machine, GPU will not be used."),
    # ... and with TF_CPP_MIN_LOG_LEVEL=0, in a two-worker gang
    ("cpu-feature-guard", "I0000 00:00:1795857987.416584   12932 cpu_feature_guard.cc:227] This TensorFlow binary "
                          "is optimized to use available CPU instructions in performance-critical operations."),
    ("cpu-feature-guard", "To enable the following instructions: AVX2 AVX512F AVX512_VNNI FMA, in other operations, "
                          "rebuild TensorFlow with the appropriate compiler flags."),
    ("below-error-severity", "I0000 00:00:1795858017.091498   14550 coordination_service.cc:502] Waiting for 1/2 "
                             "tasks to connect."),
    ("below-error-severity", "I0000 00:00:1795858017.091509   14550 coordination_service.cc:505] Example stragglers:"),
    ("coordination-stragglers", "/job:worker/replica:0/task:1"),
    ("below-error-severity", "I0000 00:00:1795858017.521137   14549 coordination_service.cc:1472] Barrier("
                             "WaitForAllTasks::3128803294264630896::0) has passed with status: OK"),
    ("below-error-severity", "I0000 00:00:1795858019.273383   14065 generator_dataset_op.cc:213] Memory patch "
                             "applied: M_TRIM_THRESHOLD=128 kb was set."),
    ("below-error-severity", "W0000 00:00:1795858019.312040   14065 dataset.cc:997] Input of GeneratorDatasetOp::"
                             "Dataset will not be optimized because the dataset does not implement the "
                             "AsGraphDefInternal() method needed to apply optimizations."),
    ("below-error-severity", "WARNING:tensorflow:Callback method `on_train_batch_end` is slow compared to the batch "
                             "time (batch time: 0.0033s vs `on_train_batch_end` time: 0.0082s). Check your callbacks."),
    # XLA (a jit_compile=True function on the CPU)
    ("below-error-severity", "I0000 00:00:1795858275.470410   25625 service.cc:153] XLA service 0x555b559b06d0 "
                             "initialized for platform Host (this does not guarantee that XLA will be used). Devices:"),
    ("below-error-severity", "I0000 00:00:1795858275.470448   25625 service.cc:161]   StreamExecutor [0]: Host, "
                             "Default Version (Driver: 0.0.0; Runtime: 0.0.0; Toolkit: 0.0.0; DNN: 0.0.0)"),
    ("below-error-severity", "I0000 00:00:1795858275.560952   25625 device_compiler.h:208] Compiled cluster using "
                             "XLA!  This line is logged at most once for the lifetime of the process."),
    # GPU builds, older (dated) and newer (absl) formats
    ("cuda-factory-registration", "2023-10-09 13:36:23.355516: E tensorflow/compiler/xla/stream_executor/cuda/"
                                  "cuda_dnn.cc:9342] Unable to register cuDNN factory: Attempting to register "
                                  "factory for plugin cuDNN when one has already been registered"),
    ("cuda-factory-registration", "2025-02-09 09:37:32.334667: E external/local_xla/xla/stream_executor/cuda/"
                                  "cuda_fft.cc:607] Unable to register cuFFT factory: Attempting to register factory "
                                  "for plugin cuFFT when one has already been registered"),
    ("cuda-factory-registration", "E0000 00:00:1751448150.991431   10148 cuda_blas.cc:1407] Unable to register "
                                  "cuBLAS factory: Attempting to register factory for plugin cuBLAS when one has "
                                  "already been registered"),
    ("computation-placer", "W0000 00:00:1751448151.003754   10148 computation_placer.cc:177] computation placer "
                           "already registered. Please check linkage and avoid linking the same target more than "
                           "once."),
    ("tensorrt-missing", "2023-12-05 09:29:20.002737: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT "
                         "Warning: Could not find TensorRT"),
    ("numa-node", "2025-02-09 09:37:34.496341: I external/local_xla/xla/stream_executor/cuda/cuda_executor.cc:901] "
                  "successful NUMA node read from SysFS had negative value (-1), but there must be at least one NUMA "
                  "node, so returning NUMA node zero."),
]

NOT_NOISE = [
    # the user's program
    "ValueError: bad layer size",
    "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: failed to connect",
    "loss went NaN at step 40, giving up",
    # our runtime
    "[tfjob] error: training stalled: no training progress for 21s (stall timeout 20s; last at epoch 2 step 15)",
    # TensorFlow's own errors that are not start-up noise
    "2026-11-24 10:00:01.1 E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: failed to connect to all addresses",
    "E0000 00:00:1795858030.1   14064 grpc_server_lib.cc:99] Failed to add port 127.0.0.1:2222",
    "F0000 00:00:1795858030.1   14064 tensor_shape.cc:45] Check failed: size >= 0 (-1 vs. 0)",
    "ERROR:tensorflow:Failed to save the checkpoint",
]


@pytest.mark.parametrize(("name", "line"), NOISE, ids=[f"{n}-{i}" for i, (n, _) in enumerate(NOISE)])
def test_each_real_start_up_line_is_noise_under_its_entry(name: str, line: str) -> None:
    found = log_noise.noise(line)
    assert found is not None and found.name == name


@pytest.mark.parametrize("line", NOT_NOISE)
def test_errors_of_the_program_our_runtime_and_tensorflow_are_never_noise(line: str) -> None:
    assert log_noise.noise(line) is None


def test_every_start_up_entry_has_a_real_line_in_the_table() -> None:
    assert {n.name for n in log_noise.STARTUP} <= {name for name, _ in NOISE}


@pytest.mark.parametrize(("line", "severity"), [
    (NOISE[1][1], "E"), (NOISE[2][1], "I"), (NOISE[16][1], "E"), (NOT_NOISE[5], "E"), (NOT_NOISE[6], "F"),
    (NOT_NOISE[7], "E"), ("WARNING:tensorflow:x", "W"), ("ValueError: x", None), ("[tfjob] epoch 1/6", None)])
def test_the_severity_of_a_log_line(line: str, severity: str | None) -> None:
    assert log_noise.severity(line) == severity
