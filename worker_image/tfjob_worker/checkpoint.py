"""Atomic checkpoints and SavedModels: write to a temporary name, then rename, then move a pointer.

Layout under `<output-dir>/checkpoints/`: one directory per save (`epoch-0003/ckpt.*`), and
`latest.json` naming the newest complete one. A kill -9 during a save leaves a `.tmp-*`
directory that readers ignore and the next writer removes; `latest.json` still names the last
good checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable

from .progress import write_json_atomic

LATEST = "latest.json"
PREFIX = "ckpt"


def _fsync_tree(path: str) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def clean_stale(directory: str) -> None:
    """Remove leftovers of interrupted saves."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if name.startswith(".tmp-"):
                shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def save_atomic(directory: str, name: str, write: Callable[[str], None], keep: int = 3) -> str:
    """Call `write(prefix)` into a temp dir, rename it to `directory/name`, point latest.json at it."""
    os.makedirs(directory, exist_ok=True)
    clean_stale(directory)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=directory)
    os.chmod(tmp, 0o755)
    write(os.path.join(tmp, PREFIX))
    _fsync_tree(tmp)
    final = os.path.join(directory, name)
    if os.path.exists(final):  # re-saving the same epoch after a restart: the new one wins
        shutil.rmtree(final)
    os.rename(tmp, final)
    history = [n for n in _saved(directory) if n != name] + [name]
    write_json_atomic(os.path.join(directory, LATEST), {"latest": name, "history": history[-keep:]})
    for old in history[:-keep]:
        shutil.rmtree(os.path.join(directory, old), ignore_errors=True)
    return os.path.join(final, PREFIX)


def _saved(directory: str) -> list[str]:
    try:
        with open(os.path.join(directory, LATEST)) as f:
            return list(json.load(f).get("history", []))
    except (OSError, ValueError):
        return []


def latest(directory: str) -> str | None:
    """Prefix of the newest complete checkpoint (pass it to tf.train.Checkpoint.read), or None."""
    try:
        with open(os.path.join(directory, LATEST)) as f:
            name = json.load(f)["latest"]
    except (OSError, ValueError, KeyError):
        return None
    path = os.path.join(directory, name)
    return os.path.join(path, PREFIX) if os.path.isdir(path) else None


def save_dir_atomic(final: str, write: Callable[[str], None]) -> str:
    """Write a directory (a SavedModel) under a temp name and swap it into place."""
    parent = os.path.dirname(os.path.abspath(final))
    os.makedirs(parent, exist_ok=True)
    base = os.path.basename(final)
    tmp = os.path.join(parent, f".tmp-{base}")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    _fsync_tree(tmp)
    old = os.path.join(parent, f".old-{base}")
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return os.path.abspath(final)


def write_to_scratch(write: Callable[[str], None]) -> None:
    """Non-chief workers take part in a save (collectives may need them) into a dir they then delete."""
    scratch = tempfile.mkdtemp(prefix="tfjob-scratch-")
    try:
        write(os.path.join(scratch, PREFIX))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
