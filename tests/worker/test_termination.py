"""The worker runtime's last figures in the container's termination message: written on exit 0 only, where
the operator says the terminationMessagePath is, and including the reports still in the pipe at exit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfjob_worker import lifecycle, termination
from tfjob_worker.reports import LineReader, Report

DONE = Report(started=True, trains=True, epoch=2, epochs=2, global_step=40, examples_per_sec=100.0,
              last_checkpoint=1767268800.0, last_progress=1767268801.0)


def test_the_figures_go_to_the_path_the_operator_names(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    assert termination.write(DONE, {termination.PATH_ENV: str(path)})
    assert json.loads(path.read_text()) == {
        "tfjob_worker_started": 1, "tfjob_worker_epoch": 2, "tfjob_worker_epochs": 2, "tfjob_worker_global_step": 40,
        "tfjob_worker_examples_per_second": 100.0, "tfjob_worker_last_checkpoint_timestamp_seconds": 1767268800.0,
        "tfjob_worker_last_progress_timestamp_seconds": 1767268801.0}


@pytest.mark.parametrize("report", [None, Report(), Report(started=True, epoch=0)], ids=["none", "idle", "no-epoch"])
def test_nothing_is_written_before_the_first_epoch(tmp_path: Path, report: Report | None) -> None:
    path = tmp_path / "termination-log"
    assert not termination.write(report, {termination.PATH_ENV: str(path)})
    assert not path.exists()


def test_outside_a_container_nothing_is_written_and_an_unwritable_path_costs_only_the_figures(
        tmp_path: Path) -> None:
    if os.path.exists(termination.DEFAULT_PATH):
        pytest.skip("running inside a container that has a termination log")
    assert not termination.write(DONE, {})
    assert not termination.write(DONE, {termination.PATH_ENV: str(tmp_path / "missing" / "dir" / "log")})


def test_the_last_reports_left_in_the_pipe_by_an_exited_trainer_are_read() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, Report(started=True, epoch=1).to_line() + DONE.to_line())
    os.close(write_fd)
    try:
        assert lifecycle._drain(read_fd, LineReader()) == DONE
    finally:
        os.close(read_fd)
