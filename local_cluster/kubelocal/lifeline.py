"""Child processes that die with their parent, so a SIGKILLed `tfjob local` leaves nothing running.

Pods: a `Lifeline` is a small guardian process, started once, that the kubelet tells (over a pipe) each
pod's process group as it starts and forgets as it ends. When that pipe reaches end-of-file (the kernel
closes it when the kubelet's process dies, however it dies) the guardian SIGKILLs every group it still
knows, grandchildren included, then exits. This keeps pod spawns cheap: no code runs between fork and exec,
so CPython can vfork (a fork of the large control-plane process holding the GIL cost milliseconds per pod),
and a pod's exit is awaited on a pidfd, not by a thread per child.

One process (the operator that `tfjob local` starts): `die_with_parent()`, a `preexec_fn` asking the kernel
(Linux prctl(PR_SET_PDEATHSIG)) to SIGKILL the child when the thread that started it ends.
Elsewhere there is no such call: children are then stopped only by an orderly shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1

#: The guardian: "+PGID" watches a process group, "-PGID" forgets it; at end-of-file it kills what is left.
#: Standalone code (no imports from this package) run with `python -I -S`, so it starts in milliseconds.
GUARDIAN = """\
import os, signal, sys
groups = set()
for line in sys.stdin.buffer:
    try:
        pgid = int(line[1:])
    except ValueError:
        continue
    if line.startswith(b"+"):
        groups.add(pgid)
    else:
        groups.discard(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


# Looked up once, before any fork: the child between fork and exec must not load libraries.
_PRCTL = _load_prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child die when its parent does (None where the OS cannot)."""
    if _PRCTL is None:
        return None
    prctl, parent = _PRCTL, os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Lifeline:
    """The guardian of the process groups this process starts: they are SIGKILLed when this process dies.

    `watch(pgid)` right after a start, `forget(pgid)` once the group is gone, `close()` at the end (the
    guardian then kills whatever is still watched, and exits). Used from one thread (the kubelet's loop).
    If the guardian is killed on its own, the next `watch` starts another one and tells it every group.
    """

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipe: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        # Its own session: a Ctrl-C or SIGHUP meant for the terminal's foreground group is for this process,
        # whose orderly shutdown stops the pods first; the guardian only acts once this process is gone.
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", GUARDIAN], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
        self._pipe = self._proc.stdin
        if self.groups:
            self._send(b"".join(b"+%d\n" % pgid for pgid in self.groups))

    def watch(self, pgid: int) -> None:
        self.groups.add(pgid)
        self._send(b"+%d\n" % pgid)

    def forget(self, pgid: int) -> None:
        if pgid in self.groups:
            self.groups.discard(pgid)
            self._send(b"-%d\n" % pgid)

    def _send(self, line: bytes) -> None:
        if self._pipe is None:
            return
        try:
            # Unbuffered and under PIPE_BUF: each line arrives whole, at once.
            os.write(self._pipe.fileno(), line)
        except BrokenPipeError:
            log.warning("the pods' guardian process (pid %s) is gone; starting another", self.pid)
            self._reap()
            self.start()

    def _reap(self) -> None:
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                self._pipe.close()
            self._pipe = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            self._proc = None

    def close(self) -> None:
        """End the guardian (it kills any group still watched) and wait for it."""
        self._reap()
        self.groups.clear()


class ChildProcess:
    """A started process whose exit is awaited without a thread: on Linux a pidfd in the event loop."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._loop = loop
        self._exited: asyncio.Future[int] = loop.create_future()
        self._pidfd = -1
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            with contextlib.suppress(OSError):  # a kernel before 5.3: fall back to a thread
                self._pidfd = pidfd_open(self.pid)
        if self._pidfd >= 0:
            loop.add_reader(self._pidfd, self._reap)
        else:
            threading.Thread(target=self._wait_in_thread, name=f"wait-{self.pid}", daemon=True).start()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def _reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: the exit status is lost
            pid, status = self.pid, 255 << 8
        if pid == 0:
            return
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        self._finish(os.waitstatus_to_exitcode(status))

    def _wait_in_thread(self) -> None:
        code = self.popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self._finish, code)

    def _finish(self, code: int) -> None:
        self.popen.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    async def wait(self) -> int:
        """The exit code (-N when killed by signal N), once the process has exited."""
        return await asyncio.shield(self._exited)

    async def stop(self, grace: float) -> None:
        """SIGTERM its process group, SIGKILL after `grace` seconds, and wait for its exit (a component going down:
        the upstream plane's processes, Kueue)."""
        if self.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            await self.wait()


def spawn(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdout: IO[bytes] | int,
          lifeline: Lifeline | None) -> ChildProcess:
    """Start a process in its own process group (stdin empty, stderr with stdout), watched by the lifeline.

    No `preexec_fn`, so CPython vforks: the cost does not grow with this process's size. Raises OSError
    when it cannot start (e.g. no such command). Call from the event loop that awaits it.
    """
    popen = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=stdout,
                             stderr=subprocess.STDOUT, start_new_session=True)
    if lifeline is not None:
        lifeline.watch(popen.pid)  # its own session: the group id is its pid
    return ChildProcess(popen, asyncio.get_running_loop())
