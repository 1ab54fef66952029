"""Graceful preemption and resume at another width, with real TensorFlow processes on loopback (no operator).

SIGTERM to one worker mid-epoch: every worker stops after the same step, the chief backs up, all exit 143, and
the next run's first step is the one after the last completed (0 steps lost). A save that cannot fit in the
grace period is not started. A backup saved at one width resumes at another, in samples, with the batch and
learning rate of the scaling policy. Each SIGTERM is sent to a process held at a step the test chose
(TFJOB_FAULT_HOLD_AT_STEP), so where a run stops does not depend on how fast the machine runs.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from polling import wait_for
from procs import Launcher, Proc, fields, line, loopback_cluster

from tfjob_worker import exit_codes

pytestmark = pytest.mark.timeout(300)

#: Steps per epoch when the flags' exchange is adaptive (the default): a SIGTERM held at step 20 stops the workers
#: mid-epoch 1, since the flags are exchanged at least every 100 steps (preemption.MAX_INTERVAL).
STEPS = 125
#: Where a test fixes the exchange after every step (TFJOB_STOP_CHECK_EVERY_STEPS=1) the stop comes right after the
#: held step, and shorter epochs do.
SHORT_STEPS = 60
EVERY_STEP = {"TFJOB_STOP_CHECK_EVERY_STEPS": "1"}
HOLD = "TFJOB_FAULT_HOLD_AT_STEP"
STOPPED = re.compile(r"\[tfjob\] preempted: stopped after epoch (\d+) step (\d+) \(samples (\d+)\); "
                     r"(saving|not saving)")
RESUMED = re.compile(r"\[tfjob\] resumed from backup at epoch (\d+)(?: step (\d+))? samples (\d+)")


def run(launcher: Launcher, out: Path, workers: int, extra: list[str], tag: str,
        env: dict[str, str] | None = None, *, steps: int, epochs: int = 2, verbose: bool = False) -> dict[str, Proc]:
    """`workers` processes; with `verbose`, the others than the chief print their progress too (--verbose)."""
    args = ["--epochs", str(epochs), "--steps-per-epoch", str(steps), "--log-every-steps", "20",
            "--output-dir", str(out), *extra]
    return launcher.start_cluster(loopback_cluster(worker=workers), args, tag=tag, env=env,
                                  extra=lambda role, index: ["--verbose"] if verbose and index else [])


def hold(victim: str, step: int) -> dict[str, str]:
    """The environment that holds `victim` (e.g. "worker1") after its `step`-th training step until SIGTERM."""
    return {HOLD: f"{step} task=worker:{victim.removeprefix('worker')}"}


def preempt(procs: dict[str, Proc], victim: str, timeout: float = 150) -> float:
    """SIGTERM `victim`'s supervisor once it holds at its step (`hold`); every worker's exit code must be 143.
    Returns the seconds from SIGTERM to the last exit."""
    held = procs[victim]
    wait_for(lambda: "[tfjob] fault: holding after step" in held.stderr or held.popen.poll() is not None,
             timeout=timeout, what=f"{victim} holding")
    assert held.popen.poll() is None, held.describe()
    sent = time.monotonic()
    procs[victim].popen.send_signal(signal.SIGTERM)
    codes = {name: p.wait(60) for name, p in procs.items()}
    seconds = time.monotonic() - sent
    assert codes == {name: exit_codes.PREEMPTED for name in procs}, "\n".join(p.describe() for p in procs.values())
    print(f"SIGTERM -> every worker exited: {seconds:.2f}s")
    return seconds


def stopped_at(chief: Proc) -> tuple[int, int, int, bool]:
    found = STOPPED.search(chief.stdout)
    assert found, chief.describe()
    return int(found[1]), int(found[2]), int(found[3]), found[4] == "saving"


def finish(procs: dict[str, Proc]) -> str:
    codes = {name: p.wait(180) for name, p in procs.items()}
    assert set(codes.values()) == {0}, "\n".join(p.describe() for p in procs.values())
    return procs["worker0"].stdout


# fit's agreed stop with 2 workers (all exit 143, the chief saves): the fit case of the width test below; fit's
# resume at the very step it stopped: tests/e2e/test_graceful_preemption.py (a deleted pod's SIGTERM). The default
# adaptive exchange (graceful.py's, for both loops) runs here only: the other tests fix it. The resumed run also
# shows what test_custom_training_loop_on_two_workers_gives_identical_weights did: the custom loop on 2 workers
# trains digits to 90% and both hold the same weights.
def test_sigterm_mid_epoch_stops_all_workers_after_one_step_saves_and_loses_no_step(
        launcher: Launcher, tmp_path: Path) -> None:
    out = tmp_path / "out"
    extra = ["--custom-loop", "--learning-rate", "0.002"]
    first = run(launcher, out, 2, extra, "a-", env=hold("worker1", 20), steps=STEPS, epochs=1)
    seconds = preempt(first, "worker1")
    epoch, step, samples, saved = stopped_at(first["worker0"])
    assert saved and (epoch, samples) == (1, step * 64) and 20 <= step < STEPS
    assert seconds < 30  # the default grace period

    second = run(launcher, out, 2, extra, "b-", steps=STEPS, epochs=1, verbose=True)
    resumed = finish(second)
    found = RESUMED.search(resumed)
    assert found, resumed
    assert (int(found[1]), int(found[2] or 0), int(found[3])) == (epoch, step, samples)  # next step: step + 1
    history = json.loads((out / "history.json").read_text())
    assert [row["epoch"] for row in history] == [1]  # the resumed epoch ends, once
    done = [fields(line(p.stdout, "[tfjob] done") or "") for p in second.values()]  # worker1 is --verbose
    assert done[0]["weights_digest"] == done[1]["weights_digest"]  # synchronous training: the same weights
    assert float(done[0]["test_accuracy"]) >= 0.9


def test_a_save_that_cannot_fit_in_the_grace_period_is_not_started_and_the_last_backup_stays(
        launcher: Launcher, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Less than the 2 s a save must leave to exit; the flags exchanged after every step, so the decision comes
    # before the supervisor's deadline (1 s before the grace ends).
    grace = {"TFJOB_TERMINATION_GRACE_SECONDS": "2", **EVERY_STEP}
    steps = 20
    first = run(launcher, out, 2, [], "a-", env={**grace, **hold("worker1", steps + 5)}, steps=steps)  # epoch 2
    wait_for(lambda: "[tfjob] epoch 1/2" in first["worker0"].stdout, timeout=150, what="epoch 1's backup")
    backup = out / "backup" / "chief"
    before = {p.name: p.stat().st_mtime_ns for p in backup.iterdir()}
    preempt(first, "worker1")
    _, _, _, saved = stopped_at(first["worker0"])
    assert not saved and "does not fit in the" in first["worker0"].stdout
    # epoch 1's backup, untouched, is the resume point (a resume from an epoch's backup at the next epoch's start:
    # tests/e2e/test_local_training.py::test_killed_worker_restarts_the_gang_once_and_training_resumes_from_backup)
    assert {p.name: p.stat().st_mtime_ns for p in backup.iterdir()} == before


# ConstantGlobalBatch across widths, both loops: tests/worker/test_uneven_batches.py (1 → 3, where the batch
# does not divide); a node's loss and return, 4 → 3 → 4: tests/e2e/test_elastic_local.py.
@pytest.mark.parametrize(("loop", "policy", "before", "after", "global_batch", "lr"), [
    ("custom-loop", "ScaleLearningRate", 1, 2, "64", "0.002"),  # 32 a replica on each of 2: LR x 2/1
    ("fit", "ScaleLearningRate", 2, 1, "32", "0.001"),  # 32 a replica on 1: LR x 1/2
])
def test_a_backup_saved_at_one_width_resumes_at_another_in_samples_with_the_policys_batch_and_lr(
        launcher: Launcher, tmp_path: Path, loop: str, policy: str, before: int, after: int, global_batch: str,
        lr: str) -> None:
    out = tmp_path / "out"
    env = {"TFJOB_ELASTIC_SCALING": policy}
    extra = ["--custom-loop"] if loop == "custom-loop" else []
    first = run(launcher, out, before, extra, "a-", env={**env, **EVERY_STEP, **hold("worker0", 40)},
                steps=SHORT_STEPS)
    preempt(first, "worker0")
    _, _, samples, saved = stopped_at(first["worker0"])
    assert saved

    second = run(launcher, out, after, extra, "b-", env=env, steps=SHORT_STEPS)
    chief = finish(second)
    start = fields(line(chief, "[tfjob] start") or "")
    assert (start["world_size"], start["global_batch"], start["lr"]) == (str(after), global_batch, lr)
    assert (f"[tfjob] resized from {before} to {after} replicas at samples {samples} policy={policy} "
            f"global_batch={global_batch} lr={lr}") in chief
    found = RESUMED.search(chief)
    assert found and int(found[3]) == samples, chief
    history = json.loads((out / "history.json").read_text())
    assert [(row["epoch"], row.get("resized_from")) for row in history] == [(1, before), (2, None)]
    if loop == "custom-loop":  # (fit's step lines sum the replicas' running loss under MWMS: not comparable)
        # The loss goes on from where it was (a fresh model would start again near ln 10 = 2.3).
        assert step_losses(chief)[0] < step_losses(first["worker0"].stdout)[-1] < 2.0


def step_losses(stdout: str) -> list[float]:
    return [float(loss) for loss in re.findall(r"\[tfjob\] step \d+/\d+ epoch=\S+ loss=(\S+)", stdout)]
