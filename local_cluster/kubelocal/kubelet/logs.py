"""Container logs and termination messages, read from the files a run writes.

Each run of a container writes stdout+stderr to `<pod dir>/logs/<container>/<restart>.log`; `kubectl logs`
(through the API server's LogSource) and the termination message under FallbackToLogsOnError read them here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from kubelocal import containers as ct


def termination_message(message_file: Path | None, log_path: Path, code: int, policy: str | None) -> str:
    """A finished container's termination message, as the kubelet reads it: what the container wrote to its
    terminationMessagePath (at most 4 KiB); failing that, under FallbackToLogsOnError and a non-zero exit,
    the log's tail."""
    if message_file is not None and message_file.is_file():
        with message_file.open("rb") as f:
            written = f.read(ct.TERMINATION_MESSAGE_LIMIT).decode(errors="replace")
        if written:
            return written
    if code and policy == "FallbackToLogsOnError":
        return fallback_message(log_path)
    return ""


def fallback_message(log_path: Path) -> str:
    """A failed container's termination message under FallbackToLogsOnError: its last 80 lines, at most 2 KiB."""
    if not log_path.exists():
        return ""
    with log_path.open("rb") as f:
        f.seek(tail_offset(log_path, 80))
        return f.read()[-2048:].decode(errors="replace")


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last `lines` lines of a file begin."""
    size = path.stat().st_size
    if lines <= 0:
        return size
    with path.open("rb") as f:
        pos, found, block = size, 0, 65536
        # A final newline ends the last line rather than starting an empty one.
        f.seek(max(0, size - 1))
        if size and f.read(1) == b"\n":
            found = -1
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            for i in range(len(chunk) - 1, -1, -1):
                if chunk[i] == 0x0A:
                    found += 1
                    if found == lines:
                        return pos + i + 1
    return 0


async def read_log(path: Path, exited: asyncio.Event, *, follow: bool, tail_lines: int | None,
                   poll: float) -> AsyncIterator[bytes]:
    """The log file from the start (or its last lines), then, when following, new bytes until the run ends."""
    if not path.exists():
        return
    offset = tail_offset(path, tail_lines) if tail_lines is not None else 0
    with path.open("rb") as f:
        f.seek(offset)
        while True:
            chunk = f.read(65536)
            if chunk:
                yield chunk
                continue
            if not follow or exited.is_set():
                rest = f.read()
                if rest:
                    yield rest
                    continue
                return
            # Polled, not awaited: the API server serving this log runs on another loop than the kubelet.
            await asyncio.sleep(poll)
