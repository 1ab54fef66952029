"""Real TensorFlow processes on loopback ports: training, resume, and the failure contract."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import poll_until as wait_for
from polling import wait_for as wait_naming
from procs import REPO, Launcher, fields, free_ports, line, loopback_cluster

from tfjob_worker import exit_codes

pytestmark = pytest.mark.timeout(240)


def wait_all(procs: dict, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    return {name: p.wait(max(deadline - time.monotonic(), 1)) for name, p in procs.items()}


def load_saved_model_and_predict(path: str, x_rows: int = 3) -> list[list[float]]:
    """Load the SavedModel the way a user would (tf.saved_model.load) and predict, outside the trainer (in this
    test process, which other tests here import TensorFlow into as well)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    out = next(iter(serve(tf.constant(np.ones((x_rows, 64), "float32"))).values()))
    return out.numpy().tolist()  # type: ignore[no-any-return]


def test_two_workers_train_digits_to_90_percent_with_identical_weights(launcher: Launcher, tmp_path: Path):
    out = tmp_path / "out"
    procs = launcher.start_cluster(
        loopback_cluster(worker=2), ["--epochs", "5", "--learning-rate", "0.002", "--output-dir", str(out)],
        extra=lambda role, index: ["--verbose"] if index == 1 else [])
    assert wait_all(procs, 180) == {"worker0": 0, "worker1": 0}, launcher.dump()
    start = fields(line(procs["worker0"].stdout, "[tfjob] start") or "")
    assert start == {"role": "worker", "index": "0", "world_size": "2", "strategy": "MultiWorkerMirroredStrategy",
                     "collective": "RING", "global_batch": "64", "lr": "0.004"}
    startups = [fields(line(p.stdout, "[tfjob] ready") or "") for p in procs.values()]  # worker1 is --verbose
    assert all(set(s) == {"launch", "tensorflow", "data", "peers", "build", "restore", "first_step", "total",
                                "began"}
               for s in startups), startups
    done = [fields(line(p.stdout, "[tfjob] done") or "") for p in procs.values()]
    assert float(done[0]["test_accuracy"]) >= 0.9
    assert done[0]["weights_digest"] == done[1]["weights_digest"]  # synchronous training: same weights
    assert "saved_model" not in done[1]  # only the chief writes outputs
    history = json.loads((out / "history.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2, 3, 4, 5]
    assert set(history[0]) == {"epoch", "loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec"}
    result = json.loads((out / "result.json").read_text())
    assert result["saved_model"] == str(out / "saved_model") and result["resumed_from_epoch"] is None
    assert sorted(os.listdir(out / "checkpoints"))[-1] == "latest.json"
    assert os.listdir(out / "tensorboard")
    predictions = load_saved_model_and_predict(result["saved_model"])
    assert all(abs(sum(row) - 1.0) < 1e-4 for row in predictions)  # softmax rows


# A chief, 2 workers and a ps (examples/ps-strategy.yaml) succeeding under the operator:
# tests/e2e/test_local_training.py::TestOnASharedLocalCluster::
# test_two_jobs_at_once_succeed_one_evicted_without_using_its_failure_budget_and_ps_cleaned_up.
def test_parameter_server_job_with_chief_a_worker_and_one_ps_succeeds(launcher: Launcher, tmp_path: Path):
    out = tmp_path / "out"
    procs = launcher.start_cluster(loopback_cluster(chief=1, worker=1, ps=1),
                                   ["--epochs", "3", "--learning-rate", "0.002", "--output-dir", str(out)])
    assert procs["chief0"].wait(180) == 0, launcher.dump()
    start = fields(line(procs["chief0"].stdout, "[tfjob] start") or "")
    assert start["strategy"] == "ParameterServerStrategy"
    assert float(fields(line(procs["chief0"].stdout, "[tfjob] done") or "")["test_accuracy"]) >= 0.9
    assert (out / "saved_model").is_dir()
    # ps and worker tasks notice the chief is gone and finish, so their pods do not run forever
    assert wait_all({k: v for k, v in procs.items() if k != "chief0"}, 60) == {"worker0": 0, "ps0": 0}


def test_independent_mode_trains_a_different_model_per_rank(launcher: Launcher, tmp_path: Path):
    out = tmp_path / "out"
    procs = launcher.start_cluster(loopback_cluster(worker=2),
                                   ["--strategy", "independent", "--epochs", "1", "--output-dir", str(out)])
    assert wait_all(procs, 120) == {"worker0": 0, "worker1": 0}, launcher.dump()
    results = [json.loads((out / "result.json").read_text()),
               json.loads((out / "ranks" / "1" / "result.json").read_text())]
    assert results[0]["weights_digest"] != results[1]["weights_digest"]
    assert all(r["world_size"] == 2 and r["global_batch"] == 32 for r in results)
    assert procs["worker1"].stdout == ""  # non-zero ranks are quiet without --verbose


# The restart that resumes from epoch 1's backup: tests/e2e/test_local_training.py::
# test_killed_worker_restarts_the_gang_once_and_training_resumes_from_backup (a worker SIGKILLed mid-epoch 2 too).
def test_killed_worker_makes_the_survivor_exit_peer_lost(launcher: Launcher, tmp_path: Path):
    out = tmp_path / "out"
    steps = 30
    args = ["--epochs", "2", "--steps-per-epoch", str(steps), "--batch-size-per-replica", "16",
            "--output-dir", str(out)]
    # Worker 1 holds 5 steps into epoch 2 (TFJOB_FAULT_HOLD_AT_STEP), worker 0 waiting for it in a collective.
    first = launcher.start_cluster(loopback_cluster(worker=2), args,
                                   env={"TFJOB_FAULT_HOLD_AT_STEP": f"{steps + 5} task=worker:1"})
    assert wait_for(lambda: f"fault: holding after step {steps + 5}" in first["worker1"].stderr, 150), launcher.dump()
    os.killpg(first["worker1"].popen.pid, signal.SIGKILL)  # the whole pod dies, mid-epoch 2
    killed_at = time.monotonic()
    assert first["worker0"].wait(30) == exit_codes.PEER_LOST, launcher.dump()
    assert time.monotonic() - killed_at < 30
    assert "lost a peer" in first["worker0"].stderr
    assert exit_codes.is_retryable(exit_codes.PEER_LOST)  # the operator restarts the gang
    epochs = [ln for ln in first["worker0"].stdout.splitlines() if ln.startswith("[tfjob] epoch")]
    assert epochs == [line(first["worker0"].stdout, "[tfjob] epoch 1/2")]  # the kill came mid-epoch 2
    assert (out / "backup" / "chief").is_dir() and [row["epoch"] for row in
                                                     json.loads((out / "history.json").read_text())] == [1]


def test_missing_peer_ends_with_the_startup_timeout_code(launcher: Launcher, tmp_path: Path):
    cluster = loopback_cluster(worker=2)
    alone = launcher.start("worker0", ["--startup-timeout", "6", "--output-dir", str(tmp_path / "out")],
                           {"cluster": cluster, "task": {"type": "worker", "index": 0}})
    assert alone.wait(90) == exit_codes.STARTUP_TIMEOUT
    assert "not all peers were present within --startup-timeout 6s" in alone.stderr


def test_sigterm_stops_a_worker_blocked_on_a_missing_peer_with_143(launcher: Launcher, tmp_path: Path):
    cluster = loopback_cluster(worker=2)
    blocked = launcher.start("worker0", ["--startup-timeout", "0", "--output-dir", str(tmp_path / "out")],
                             {"cluster": cluster, "task": {"type": "worker", "index": 0}})
    # the gRPC server is up once the process listens on its port; the strategy constructor then blocks
    port = int(cluster["worker"][0].rsplit(":", 1)[1])
    assert wait_for(lambda: _listening(port), 90), blocked.describe()
    blocked.popen.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    assert blocked.wait(15) == exit_codes.PREEMPTED
    assert time.monotonic() - sent < 5
    assert "SIGTERM received" in blocked.stderr


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_kill_9_during_a_save_keeps_the_previous_checkpoint_loadable(tmp_path: Path):
    directory = tmp_path / "checkpoints"
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker_image")}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "save_then_hang.py"), str(directory)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "saving"
        assert any(n.startswith(".tmp-epoch-0002") for n in os.listdir(directory))  # the new save is on disk
        proc.kill()
    finally:
        proc.kill()
        proc.wait(30)
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from tfjob_worker import checkpoint

    latest = checkpoint.latest(str(directory))
    assert latest == str(directory / "epoch-0001" / "ckpt")
    weights = tf.Variable(tf.zeros([256, 256]))
    tf.train.Checkpoint(weights=weights).read(latest).assert_consumed()
    assert float(tf.reduce_min(weights)) == float(tf.reduce_max(weights)) == 1.0


def test_user_code_error_exits_1_and_names_the_flag(launcher: Launcher, tmp_path: Path):
    proc = launcher.start("solo", ["--model", "no_such_module:build", "--dataset", "no_such_module:data",
                                   "--output-dir", str(tmp_path / "out")])
    assert proc.wait(90) == exit_codes.USER_ERROR
    assert "--model 'no_such_module:build': cannot import module" in proc.stderr


def test_user_entry_points_virtual_devices_and_the_evaluator(launcher: Launcher, tmp_path: Path):
    """One chief with 2 logical CPUs (MirroredStrategy) trains a user model; a side-car evaluator follows it."""
    out = tmp_path / "out"
    cluster = loopback_cluster(chief=1, evaluator=1)
    procs = launcher.start_cluster(
        cluster, ["--model", "user_model:build", "--dataset", "user_model:data", "--loss", "user_model:loss",
                  "--optimizer", "adam", "--learning-rate", "0.005", "--warmup-epochs", "1", "--epochs", "3",
                  "--virtual-devices", "2", "--output-dir", str(out), "--evaluator-poll-seconds", "0.5"])
    assert wait_all(procs, 150) == {"chief0": 0, "evaluator0": 0}, launcher.dump()
    start = fields(line(procs["chief0"].stdout, "[tfjob] start") or "")
    assert (start["strategy"], start["global_batch"], start["lr"]) == ("MirroredStrategy", "64", "0.01")
    evals = json.loads((out / "eval.json").read_text())
    assert evals and evals[-1]["epoch"] == 3 and evals[-1]["val_accuracy"] > 0.8
    assert "[tfjob] evaluator done" in procs["evaluator0"].stdout


def _scrape(port: int) -> dict[str, float]:
    """The worker's /metrics as {'name{label=value,...}': value}; {} while nothing answers."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {f"{s.name}{{{','.join(f'{k}={v}' for k, v in sorted(s.labels.items()))}}}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_worker_blocked_mid_epoch_stops_the_gang_with_the_stalled_code(launcher: Launcher, tmp_path: Path):
    out = tmp_path / "out"
    metrics_ports = free_ports(2)
    procs = launcher.start_cluster(
        loopback_cluster(worker=2),
        ["--model", "user_model:build_stalling", "--dataset", "user_model:data_without_validation", "--epochs", "3",
         "--steps-per-epoch", "10", "--stall-timeout", "4", "--output-dir", str(out)],
        extra=lambda role, index: ["--metrics-port", str(metrics_ports[index])],
        env={"STALL_WORKER_INDEX": "1", "STALL_AFTER_STEPS": "15", "TFJOB_NAME": "stall-demo"})
    labels = "replica_index=0,replica_type=worker,tfjob=stall-demo"
    # the chief's metrics while it trains: who it is, and steps going up
    scraped = wait_naming(lambda: (m := _scrape(metrics_ports[0])).get(f"tfjob_worker_steps_total{{{labels}}}") and m,
                       120, what="steps on the chief's /metrics")
    assert scraped[f"tfjob_worker_world_size{{{labels}}}"] == 2
    assert scraped["tfjob_worker_info{collective=RING,device_kind=cpu,replica_index=0,replica_type=worker,"
                   "strategy=MultiWorkerMirroredStrategy,tfjob=stall-demo}"] == 1
    assert scraped[f"tfjob_worker_stall_timeout_seconds{{{labels}}}"] == 4
    # worker 1 blocks in step 16 (mid epoch 2); worker 0 then waits in the all-reduce: both stall
    assert wait_all(procs, 120) == {"worker0": exit_codes.STALLED, "worker1": exit_codes.STALLED}, launcher.dump()
    # worker 1 says it stopped in its own code (its py_function); worker 0 that it only waited inside TensorFlow
    assert re.search(r"training stalled in its own code at worker/user_model\.py:\d+ in stall_here: no training "
                     r"progress for 4s", procs["worker1"].stderr), procs["worker1"].stderr[-2000:]
    assert ("training stalled waiting inside TensorFlow (for its peers in a collective, or its input pipeline or "
            "device): no training progress for 4s") in procs["worker0"].stderr, procs["worker0"].stderr[-2000:]
    assert "last at epoch 2 step 15)" in procs["worker0"].stderr  # mid-epoch: 5 of epoch 2's 10 steps done
    assert "stall_here" in procs["worker1"].stderr  # the stack dump shows where it hung
    assert exit_codes.is_retryable(exit_codes.STALLED)
    assert [row["epoch"] for row in json.loads((out / "history.json").read_text())] == [1]
