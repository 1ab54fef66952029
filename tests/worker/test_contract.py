"""Exit codes, progress lines, history merging, flags, and atomic checkpoint files (no TensorFlow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfjob_worker import checkpoint, exit_codes, progress, startup
from tfjob_worker.config import parse_args


def _error(name: str, message: str = "") -> Exception:
    return type(name, (Exception,), {})(message)


class OpError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (_error("UnavailableError", "Socket closed"), exit_codes.PEER_LOST),
        (_error("DeadlineExceededError", "collective timed out"), exit_codes.PEER_LOST),
        (_error("AbortedError"), exit_codes.PEER_LOST),
        (type("CancelledError", (OpError,), {})("Collective ops is aborted by: cluster check alive failed"),
         exit_codes.PEER_LOST),
        (type("InternalError", (OpError,), {})("Failed to connect to all addresses"), exit_codes.PEER_LOST),
        (type("InvalidArgumentError", (OpError,), {})("Incompatible shapes"), exit_codes.USER_ERROR),
        (ValueError("bad --model"), exit_codes.USER_ERROR),
        (ZeroDivisionError(), exit_codes.USER_ERROR),
    ],
)
def test_exceptions_map_to_exit_codes(exc, code):
    assert exit_codes.classify_exception(exc) == code


def test_peer_loss_wrapped_in_another_error_is_still_peer_lost():
    try:
        try:
            raise _error("UnavailableError", "peer down")
        except Exception as inner:
            raise RuntimeError("fit failed") from inner
    except RuntimeError as outer:
        assert exit_codes.classify_exception(outer) == exit_codes.PEER_LOST


def test_retryable_codes_are_at_least_128_and_user_errors_are_not():
    assert {exit_codes.PREEMPTED, exit_codes.PEER_LOST, exit_codes.STARTUP_TIMEOUT,
            exit_codes.STALLED} == exit_codes.RETRYABLE
    assert all(exit_codes.is_retryable(c) for c in exit_codes.RETRYABLE)
    assert not any(exit_codes.is_retryable(c) for c in (exit_codes.SUCCESS, exit_codes.USER_ERROR,
                                                        exit_codes.USAGE_ERROR))
    assert exit_codes.PREEMPTED == 128 + 15


def test_progress_lines_have_the_documented_shape():
    assert progress.format_start("worker", 0, 2, "MultiWorkerMirroredStrategy", "RING", 64, 0.002) == (
        "[tfjob] start role=worker index=0 world_size=2 strategy=MultiWorkerMirroredStrategy collective=RING "
        "global_batch=64 lr=0.002")
    assert progress.format_resumed(3) == "[tfjob] resumed from backup at epoch 3"
    line = progress.format_epoch(2, 5, {"examples_per_sec": 1234.54, "loss": 0.43214, "accuracy": 0.9012,
                                        "val_accuracy": 0.91})
    assert line == "[tfjob] epoch 2/5 loss=0.4321 accuracy=0.9012 val_accuracy=0.9100 examples_per_sec=1234.5"
    assert progress.format_done(0.96321, "/abs/saved_model") == (
        "[tfjob] done test_accuracy=0.9632 saved_model=/abs/saved_model")


# (a formatter's line, its kind and the numbers the parser reads back): every kind the runtime prints
PRINTED = [
    (progress.format_start("worker", 0, 2, "MWMS", "RING", 64, 0.002), "start", ()),
    (progress.format_resumed(3), "resumed", ("3", None, None)),
    (progress.format_resumed(2, 45, 2880), "resumed", ("2", "45", "2880")),
    (progress.format_resized(4, 3, 12800, 96, 0.003, "ConstantGlobalBatch"), "resized", ("4", "3")),
    (progress.format_epoch(2, 5, {"loss": 0.4}), "epoch", ("2", "5")),
    (progress.format_step(10, 20, 2, 5, {"loss": 0.3}), "step", ("10", "20", "2", "5")),
    (progress.format_startup({"launch": 0.3, "first_step": 0.9}, 1795561074.7), "ready", ()),
    (progress.format_done(0.96, "/abs/saved_model", weights_digest="ab12"), "done", ()),
]


@pytest.mark.parametrize(("line", "kind", "numbers"), PRINTED, ids=[f"{r[1]}-{i}" for i, r in enumerate(PRINTED)])
def test_every_line_the_runtime_prints_is_read_back_by_the_one_parser(line, kind, numbers):
    parsed = progress.parse_line(line)
    assert parsed is not None and parsed[0] == kind
    assert parsed[1][:len(numbers)] == numbers
    tail = "" if kind == "resumed" else parsed[1][-1]
    assert progress.pairs(tail) == dict(p.split("=") for p in line.split() if "=" in p and not p.startswith("epoch="))


def test_the_docs_progress_lines_are_lines_the_parser_reads():
    """docs/worker.md, docs/elastic.md and the README quote the lines the runtime prints: each parses, as the same
    kind it starts with (an `error:` or `preempted:` line is the runtime's own message, not progress)."""
    root = Path(__file__).resolve().parents[2]
    quoted = [line.split("  ")[0].strip() for doc in ("docs/worker.md", "docs/elastic.md", "README.md")
              for line in (root / doc).read_text().splitlines() if line.startswith("[tfjob] ")]
    progress_lines = [q for q in quoted if not q.startswith(("[tfjob] error:", "[tfjob] preempted:"))]
    assert len(progress_lines) >= 10
    unread = [q for q in progress_lines if (p := progress.parse_line(q)) is None or q.split()[1] != p[0]]
    assert unread == []


STARTUP_SPLITS = [
    # marks after began=100.0                                                    seconds per phase
    ({"launch": 100.5, "tensorflow": 104.5, "data": 105.0, "peers": 106.0, "build": 106.25, "restore": 106.5,
      "first_step": 107.0},
     {"launch": 0.5, "tensorflow": 4.0, "data": 0.5, "peers": 1.0, "build": 0.25, "restore": 0.25, "first_step": 0.5}),
    # a phase not marked (no strategy built) is left out; the next counts from the mark before it
    ({"launch": 100.5, "tensorflow": 104.5, "data": 105.0, "restore": 106.5, "first_step": 107.0},
     {"launch": 0.5, "tensorflow": 4.0, "data": 0.5, "restore": 1.5, "first_step": 0.5}),
    ({"first_step": 99.0}, {"first_step": 0.0}),  # a clock step back is no negative phase
]


@pytest.mark.parametrize(("marks", "seconds"), STARTUP_SPLITS)
def test_startup_seconds_are_split_by_phase_in_order(marks, seconds):
    assert startup.split(100.0, marks) == seconds
    assert list(startup.split(100.0, marks)) == [p for p in startup.PHASES if p in seconds]


def test_startup_line_names_each_phase_its_total_and_when_the_pod_process_began():
    assert progress.format_startup({"launch": 0.5, "tensorflow": 4.0, "first_step": 0.25}, 1795558307.4081) == (
        "[tfjob] ready launch=0.50s tensorflow=4.00s first_step=0.25s total=4.75s began=1795558307.408")


def test_startup_began_comes_from_the_supervisor_and_the_first_mark_of_a_phase_counts():
    clock = startup.StartupClock.from_env({startup.BEGAN_ENV: "1795558307.408"})
    clock.mark("launch", 1795558308.0)
    clock.mark("launch", 1795558309.0)
    assert (clock.began, clock.marks, clock.complete) == (1795558307.408, {"launch": 1795558308.0}, False)


def test_history_after_a_restart_keeps_the_epochs_before_the_resumed_one():
    earlier = [{"epoch": 1, "loss": 1.0}, {"epoch": 2, "loss": 0.5}, {"epoch": 3, "loss": 0.4}]
    assert progress.merge_history(earlier, first_epoch_run=3) == earlier[:2]


def test_history_file_is_replaced_whole(tmp_path):
    path = str(tmp_path / "history.json")
    progress.write_json_atomic(path, [{"epoch": 1}])
    progress.write_json_atomic(path, [{"epoch": 1}, {"epoch": 2}])
    assert progress.read_history(path) == [{"epoch": 1}, {"epoch": 2}]
    assert [n for n in os.listdir(tmp_path) if n != "history.json"] == []
    (tmp_path / "broken.json").write_text("[{")
    assert progress.read_history(str(tmp_path / "broken.json")) == []


def _write(text: str):
    def write(prefix: str) -> None:
        with open(prefix + ".data", "w") as f:
            f.write(text)
    return write


def test_checkpoints_rotate_and_latest_names_the_newest(tmp_path):
    directory = str(tmp_path / "checkpoints")
    for epoch in range(1, 5):
        checkpoint.save_atomic(directory, f"epoch-{epoch:04d}", _write(str(epoch)), keep=2)
    latest = checkpoint.latest(directory)
    assert latest is not None and open(latest + ".data").read() == "4"
    assert sorted(os.listdir(directory)) == ["epoch-0003", "epoch-0004", "latest.json"]


def test_a_failed_save_leaves_the_previous_checkpoint_latest(tmp_path):
    directory = str(tmp_path / "checkpoints")
    checkpoint.save_atomic(directory, "epoch-0001", _write("good"))

    def crash(prefix: str) -> None:
        _write("half")(prefix)
        raise OSError("disk full")

    with pytest.raises(OSError):
        checkpoint.save_atomic(directory, "epoch-0002", crash)
    assert open(checkpoint.latest(directory) + ".data").read() == "good"  # type: ignore[operator]
    checkpoint.save_atomic(directory, "epoch-0002", _write("next"))  # the next save cleans the leftovers
    assert not [n for n in os.listdir(directory) if n.startswith(".tmp-")]


def test_saved_model_directory_is_swapped_in_whole(tmp_path):
    final = str(tmp_path / "saved_model")
    checkpoint.save_dir_atomic(final, lambda p: (os.makedirs(p), open(os.path.join(p, "v"), "w").write("1")))
    checkpoint.save_dir_atomic(final, lambda p: (os.makedirs(p), open(os.path.join(p, "v"), "w").write("2")))
    assert open(os.path.join(final, "v")).read() == "2"
    assert os.listdir(tmp_path) == ["saved_model"]


def test_flags_defaults_and_output_dir_from_environment(tmp_path):
    cfg = parse_args([], env={"TFJOB_OUTPUT_DIR": str(tmp_path / "o")})
    assert cfg.output_dir == str(tmp_path / "o") and cfg.backup_dir == str(tmp_path / "o" / "backup")
    assert (cfg.model, cfg.strategy, cfg.collective, cfg.startup_timeout) == ("digits-mlp", "auto", "auto", 300.0)
    assert parse_args([], env={}).output_dir == os.path.abspath("tfjob-output")
    cfg = parse_args(["--model", "pkg.mod:build", "--dataset", "pkg.mod:data", "--custom-loop",
                      "--checkpoint-every-steps", "10", "--backup-dir", "/shared/b"], env={})
    assert (cfg.model, cfg.dataset, cfg.custom_loop, cfg.checkpoint_every_steps, cfg.backup_dir) == (
        "pkg.mod:build", "pkg.mod:data", True, 10, "/shared/b")


@pytest.mark.parametrize(
    "argv",
    [["--epochs", "0"], ["--strategy", "horovod"], ["--model", "resnet"], ["--model", "m:f"],
     ["--collective", "mpi"], ["--startup-timeout", "-1"]],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, env={})
    assert exited.value.code == exit_codes.USAGE_ERROR
    assert "error" in capsys.readouterr().err


def test_result_files_are_plain_json(tmp_path):
    progress.write_json_atomic(str(tmp_path / "r.json"), {"test_accuracy": 0.9})
    assert json.loads((tmp_path / "r.json").read_text()) == {"test_accuracy": 0.9}
    assert oct(os.stat(tmp_path / "r.json").st_mode & 0o777) == "0o644"
