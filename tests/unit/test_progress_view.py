"""What `tfjob local` shows: the chief's progress lines parsed, plain-line view, and the training plot."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tfjob_operator.local.view import JobSnapshot, PlainView, progress_line
from tfjob_operator.progress.chief_log import parse_log, plot_history
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
    assert progress_line(progress) == ("chief: epoch 3/5 step 10/20 loss=0.3000 accuracy=0.9012 examples_per_sec=1234.5"
                                       " (resumed from backup at epoch 3)")


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
        "  chief: epoch 3/5 step 10/20 loss=0.3000 accuracy=0.9012 examples_per_sec=1234.5"
        " (resumed from backup at epoch 3)",
    ]


def test_history_plot_is_written_as_png(tmp_path: Path) -> None:
    history = [{"epoch": e, "loss": 1.0 / e, "accuracy": 0.5 + e / 10, "val_accuracy": 0.45 + e / 10}
               for e in range(1, 5)]
    out = plot_history(history, tmp_path / "plot.png", "TFJob mnist")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_local_summary_of_a_failed_job_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tfjob_operator.local.run import _result, _summarise

    failed = {"metadata": {"name": "broken"}, "status": {"restartCount": 0, "conditions": [
        {"type": "Created", "status": "True", "message": "creating"},
        {"type": "Failed", "status": "True",
         "message": "pod broken-worker-0 (Worker 0, container tensorflow) exited with code 1"}]}}
    _summarise(_result(failed, parse_log(""), 12.3), tmp_path)
    out = capsys.readouterr().out
    assert "TFJob broken: Failed in 12.3s, 1 attempt (0 gang restarts)" in out
    assert "  why                pod broken-worker-0 (Worker 0, container tensorflow) exited with code 1" in out
