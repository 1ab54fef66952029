"""Thin wrappers over iproute2's `ip` and `tc`: every link, address, route and namespace change goes through them.

iproute2 speaks netlink for us (no hand-rolled ioctls); each call has a bounded timeout, and a failure raises
`NetworkError` carrying the command and iproute2's own message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

#: Seconds one `ip`/`tc` call may take; netlink answers in milliseconds, so more means something is wrong.
CALL_TIMEOUT = 10.0
NETNS_DIR = "/run/netns"


class NetworkError(RuntimeError):
    """An iproute2 command failed; the message names the command and what iproute2 said."""


def run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
    """Run one iproute2 command; return its stdout, raise `NetworkError` (with its stderr) if it fails."""
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=CALL_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkError(f"{' '.join(argv)}: {exc}") from exc
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """`ip [-n NETNS] ARGS...`."""
    return run(["ip", *(["-n", netns] if netns else []), *args], check=check)


def ip_batch(lines: Sequence[str], *, netns: str | None = None) -> None:
    """Several `ip` commands in one process (`ip -batch -`), stopping at the first that fails."""
    run(["ip", *(["-n", netns] if netns else []), "-batch", "-"], stdin="\n".join(lines) + "\n")


def ip_json(*args: str, netns: str | None = None) -> list[dict[str, Any]]:
    """`ip -json ...` parsed; an empty answer is an empty list."""
    out = ip("-json", *args, netns=netns)
    return json.loads(out) if out.strip() else []


def tc(*args: str, netns: str | None = None, check: bool = True) -> str:
    """`tc [-n NETNS] ARGS...`."""
    return run(["tc", *(["-n", netns] if netns else []), *args], check=check)


def netns_names() -> list[str]:
    """Names of the named network namespaces (`ip netns list`), read from their mount points."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def netns_add(name: str) -> None:
    ip("netns", "add", name)


def netns_delete(name: str) -> None:
    """Delete a named namespace; its interfaces (and their veth peers elsewhere) go with it. Absent is fine."""
    if name in netns_names():
        ip("netns", "delete", name, check=False)


def tools_missing() -> list[str]:
    """The command-line tools the pod network needs that are not on PATH."""
    return [tool for tool in ("ip", "tc", "nsenter", "unshare", "mount", "sh") if shutil.which(tool) is None]
