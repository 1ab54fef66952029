"""Progress lines and history.json. Pure formatting and parsing, plus atomic file writes.

The `[tfjob] ...` lines are defined once, here: each kind's formatter (what the runtime prints) and its pattern
(`LINES`, what `tfjob local` reads back with :func:`parse_line`, in `tfjob_operator`) sit side by side, and a test
feeds every formatter's output and the docs' examples through the parser.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from typing import Any, TextIO

PREFIX = "[tfjob]"
EPOCH_KEYS = ("loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec")
_NUMBER = r"(\d+)"
#: Each kind of progress line (after the prefix) and its pattern; the groups are the numbers the formatter below
#: writes, and the last group of start, epoch, step and done its `key=value` pairs (:func:`pairs`).
LINES: dict[str, re.Pattern[str]] = {
    "start": re.compile(r"^start (.*)$"),
    "epoch": re.compile(rf"^epoch {_NUMBER}/{_NUMBER}\b(.*)$"),
    "step": re.compile(rf"^step {_NUMBER}/{_NUMBER} epoch={_NUMBER}/{_NUMBER}(.*)$"),
    "resumed": re.compile(rf"^resumed from backup at epoch {_NUMBER}(?: step {_NUMBER})?(?: samples {_NUMBER})?"),
    "resized": re.compile(rf"^resized from {_NUMBER} to {_NUMBER} replicas(.*)$"),
    "ready": re.compile(r"^ready (.*)$"),
    "done": re.compile(r"^done(.*)$"),
}
_PAIR = re.compile(r"(\w+)=(\S+)")


def parse_line(line: str) -> tuple[str, tuple[str | None, ...], str] | None:
    """(kind, the pattern's groups, the line after the prefix) of a progress line; None for any other line (a
    runtime's own output, TensorFlow's noise, an `error:` line)."""
    if not line.startswith(PREFIX + " "):
        return None
    body = line[len(PREFIX) + 1:].strip()
    for kind, pattern in LINES.items():
        if m := pattern.match(body):
            return kind, m.groups(), body
    return None


def pairs(text: str | None) -> dict[str, str]:
    """The `key=value` pairs of a line's tail, as written by the formatters (`{key}={value}`, space-separated)."""
    return dict(_PAIR.findall(text or ""))


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4f}"
    return str(value)


def _pairs(values: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={_value(value)}" for key, value in values.items() if value is not None)


def format_start(role: str, index: int, world_size: int, strategy: str, collective: str | None,
                 global_batch: int, lr: float) -> str:
    """`[tfjob] start role=worker index=0 world_size=2 strategy=... collective=RING global_batch=64 lr=0.002`."""
    return (f"{PREFIX} start role={role} index={index} world_size={world_size} strategy={strategy} "
            f"collective={collective or 'none'} global_batch={global_batch} lr={lr:g}")


def format_resumed(epoch: int, step: int = 0, samples: int | None = None) -> str:
    """`[tfjob] resumed from backup at epoch E [step S samples N]`: E is 1-based, the first epoch that will run;
    S the steps of it already done (the first to run is S+1), N the examples the job has trained so far."""
    where = f" step {step}" if step else ""
    where += f" samples {samples}" if samples is not None else ""
    return f"{PREFIX} resumed from backup at epoch {epoch}{where}"


def format_resized(old: int, new: int, samples: int, global_batch: int, lr: float, policy: str) -> str:
    """`[tfjob] resized from 4 to 3 replicas at samples 12800 policy=ConstantGlobalBatch global_batch=96 lr=0.003`:
    this run resumed a backup saved at another width."""
    return (f"{PREFIX} resized from {old} to {new} replicas at samples {samples} policy={policy} "
            f"global_batch={global_batch} lr={lr:g}")


def format_epoch(epoch: int, epochs: int, metrics: Mapping[str, Any]) -> str:
    """`[tfjob] epoch 2/5 loss=... accuracy=... val_loss=... val_accuracy=... examples_per_sec=...` (1-based)."""
    ordered = {key: metrics.get(key) for key in EPOCH_KEYS}
    return f"{PREFIX} epoch {epoch}/{epochs} {_pairs(ordered)}".rstrip()


def format_step(step: int, steps: int, epoch: int, epochs: int, metrics: Mapping[str, Any]) -> str:
    """`[tfjob] step 10/20 epoch=2/5 loss=... examples_per_sec=...` (periodic, inside long epochs)."""
    return f"{PREFIX} step {step}/{steps} epoch={epoch}/{epochs} {_pairs(metrics)}".rstrip()


def format_startup(seconds: Mapping[str, float], began: float) -> str:
    """`[tfjob] ready launch=0.3s tensorflow=4.1s ... first_step=0.9s total=7.3s began=<unix>`: where this
    process's start-up went (see tfjob_worker.startup)."""
    parts = " ".join(f"{phase}={value:.2f}s" for phase, value in seconds.items())
    return f"{PREFIX} ready {parts} total={sum(seconds.values()):.2f}s began={began:.3f}"


def format_done(test_accuracy: float | None, saved_model: str | None, **extra: Any) -> str:
    """`[tfjob] done test_accuracy=0.9632 saved_model=/abs/path` (then any extra key=value)."""
    return f"{PREFIX} done {_pairs({'test_accuracy': test_accuracy, 'saved_model': saved_model, **extra})}"


def emit(line: str, enabled: bool = True, stream: TextIO | None = None) -> None:
    """Print one progress line and flush at once (people follow it with kubectl logs -f)."""
    if enabled:
        out = stream or sys.stdout
        out.write(line + "\n")
        out.flush()


def error(message: str) -> None:
    """An error line on stderr, flushed."""
    sys.stderr.write(f"{PREFIX} error: {message}\n")
    sys.stderr.flush()


def write_json_atomic(path: str, data: Any) -> None:
    """Write JSON so readers see the old file or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; readers (the UI) may be another user
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_history(path: str) -> list[dict[str, Any]]:
    """Read history.json; a missing or unreadable file is an empty history."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    return [row for row in data if isinstance(row, dict) and isinstance(row.get("epoch"), int)] \
        if isinstance(data, list) else []


def merge_history(earlier: list[dict[str, Any]], first_epoch_run: int) -> list[dict[str, Any]]:
    """History kept across a gang restart: the epochs (1-based) before the first one re-run."""
    return [row for row in earlier if row["epoch"] < first_epoch_run]


def history_row(epoch: int, metrics: Mapping[str, Any], resized_from: int | None = None,
                replicas: int | None = None) -> dict[str, Any]:
    """One history.json entry: epoch (1-based) and the metrics, as plain floats; an epoch during which the job
    was resumed at another width also says from and to how many replicas (a plot marks it)."""
    row: dict[str, Any] = {"epoch": epoch}
    for key in EPOCH_KEYS:
        if metrics.get(key) is not None:
            row[key] = float(metrics[key])
    if resized_from is not None:
        row["resized_from"] = resized_from
        row["replicas"] = replicas
    return row
