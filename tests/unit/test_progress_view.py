"""What `tfjob local` shows: the chief's progress lines parsed, plain-line view, and the training plot."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tfjob_operator.client.local.chief_log import parse_log, plot_history
from tfjob_operator.client.local.view import JobSnapshot, PlainView, progress_line
from tfjob_worker import progress as worker_progress

LOG = "\n".join([
    "2026-11-22 some TensorFlow noise",
    worker_progress.format_start("worker", 0, 2, "MultiWorkerMirroredStrategy", "RING", 64, 0.002),
    worker_progress.format_resumed(3),
    worker_progress.format_epoch(3, 5, {"loss": 0.4321, "accuracy": 0.9012, "examples_per_sec": 1234.5}),
    worker_progress.format_step(10, 20, 4, 5, {"loss": 0.3}),
])


def test_progress_parser_reads_the_worker_runtime_lines() -> None:
    progress = parse_log(LOG)
    assert progress.started["strategy"] == "MultiWorkerMirroredStrategy"
    assert progress.resumed_at == 3
    assert (progress.epoch, progress.epochs, progress.step, progress.steps) == (3, 5, 10, 20)
    assert progress.metrics == {"loss": "0.3000", "accuracy": "0.9012", "examples_per_sec": "1234.5"}
    # The step is one of epoch 4 (the one under way), with its own figures, not epoch 3's.
    assert progress_line(progress) == "chief: epoch 4/5 step 10/20 loss=0.3000 (resumed from backup at epoch 3)"


def test_done_line_gives_accuracy_and_saved_model() -> None:
    progress = parse_log(worker_progress.format_done(0.9632, "/w/out/saved_model"))
    assert progress.done == {"test_accuracy": "0.9632", "saved_model": "/w/out/saved_model"}
    assert progress_line(progress) == "chief: done test_accuracy=0.9632"


def _job(state: str, workers: str) -> dict:
    return {"metadata": {"name": "mnist"}, "status": {"state": state, "workers": workers, "restartCount": 0,
                                                     "conditions": [{"type": state, "status": "True"}]}}


def _pod(name: str, phase: str) -> dict:
    return {"metadata": {"name": name, "labels": {"tfjob.dev/attempt": "0"}}, "status": {"phase": phase}}


def test_plain_view_prints_only_what_changed() -> None:
    out = io.StringIO()
    view = PlainView(out)
    snap = JobSnapshot(_job("Created", "0/2"), [_pod("mnist-worker-0", "Pending")], parse_log(""))
    view.update([snap])
    view.update([snap])
    first = out.getvalue().splitlines()
    view.update([JobSnapshot(_job("Running", "2/2"), [_pod("mnist-worker-0", "Running")], parse_log(LOG))])
    added = out.getvalue().splitlines()[len(first):]
    assert len(first) == 3
    assert [line.split("] ", 1)[1] for line in added] == [
        "TFJob mnist: Running  workers 2/2  restarts 0",
        "  pod mnist-worker-0                   Running      attempt 0   restarts 0",
        "  chief: resumed from backup at epoch 3",
        "  chief: epoch 3/5 loss=0.4321 accuracy=0.9012 examples_per_sec=1234.5",
        "  chief: epoch 4/5 step 10/20 loss=0.3000",
    ]


def _epoch(n: int) -> str:
    return worker_progress.format_epoch(n, 6, {"loss": 1.0 / n, "examples_per_sec": 300.0 + n})


def _step(step: int, epoch: int) -> str:
    return worker_progress.format_step(step, 150, epoch, 6, {"loss": 0.5})


def test_plain_view_shows_every_epoch_line_once_however_many_end_between_two_looks() -> None:
    """The view looks at the chief's log every half second; epochs (and the step lines after them) that came
    in between are all shown, each once, in order: `epoch 1/6` is never skipped for the step line after it."""
    out = io.StringIO()
    view = PlainView(out)
    job, pods = _job("Running", "2/2"), [_pod("mnist-worker-0", "Running")]
    looks = [
        [_step(40, 1)],
        [_step(40, 1), _epoch(1), _step(40, 2)],  # epoch 1 ended, and a step of epoch 2 came, between two looks
        [_step(40, 1), _epoch(1), _step(40, 2), _epoch(2), _step(40, 3), _epoch(3), _step(40, 4)],
        [_step(40, 1), _epoch(1), _step(40, 2), _epoch(2), _step(40, 3), _epoch(3), _step(40, 4)],  # nothing new
        [_step(40, 1), _epoch(1), _step(40, 2), _epoch(2), _step(40, 3), _epoch(3), _step(40, 4), _epoch(4)],
    ]
    for log in looks:
        view.update([JobSnapshot(job, pods, parse_log("\n".join(log)))])
    chief = [line.split("] ", 1)[1].strip() for line in out.getvalue().splitlines() if "chief:" in line]
    assert chief == [
        "chief: epoch 1/6 step 40/150 loss=0.5000",
        "chief: epoch 1/6 loss=1.0000 examples_per_sec=301.0",
        "chief: epoch 2/6 step 40/150 loss=0.5000",
        "chief: epoch 2/6 loss=0.5000 examples_per_sec=302.0",
        "chief: epoch 3/6 loss=0.3333 examples_per_sec=303.0",
        "chief: epoch 4/6 step 40/150 loss=0.5000",
        "chief: epoch 4/6 loss=0.2500 examples_per_sec=304.0",
    ]


def test_history_plot_is_written_as_png(tmp_path: Path) -> None:
    history = [{"epoch": e, "loss": 1.0 / e, "accuracy": 0.5 + e / 10, "val_accuracy": 0.45 + e / 10}
               for e in range(1, 5)]
    out = plot_history(history, tmp_path / "plot.png", "TFJob mnist")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_local_summary_of_a_failed_job_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tfjob_operator.client.local.run import _result, _summarise

    failed = {"metadata": {"name": "broken"}, "status": {"restartCount": 0, "conditions": [
        {"type": "Created", "status": "True", "message": "creating"},
        {"type": "Failed", "status": "True",
         "message": "pod broken-worker-0 (Worker 0, container tensorflow) exited with code 1"}]}}
    _summarise(_result(failed, parse_log(""), 12.3), tmp_path)
    out = capsys.readouterr().out
    assert "TFJob broken: Failed in 12.3s, 1 attempt (0 gang restarts)" in out
    assert "  why                pod broken-worker-0 (Worker 0, container tensorflow) exited with code 1" in out
