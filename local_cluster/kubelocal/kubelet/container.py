"""Containers as the runtime sees them: each run of a container, its state for `containerStatuses`, and the
process that carries it (started in its own process group, awaited, signalled).

A `Container` keeps every run (restart) it had; its `status()` is the containerStatus entry a real kubelet
reports (waiting / running / terminated, lastState, restartCount, ready, containerID).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelocal import containers as ct
from kubelocal.kubeclient import now_rfc3339
from kubelocal.lifeline import ChildProcess, Lifeline, spawn

from .cgroups import ContainerCgroup, startable
from .logs import termination_message
from .rules import KILLED_REASON, OOM_KILLED_REASON, START_ERROR_EXIT, exit_code, terminated_reason


@dataclass
class Run:
    """One execution of a container (restart number `restart`)."""

    restart: int
    log_path: Path
    started_at: str
    pid: int = 0
    finished_at: str | None = None
    code: int | None = None
    reason: str | None = None
    message: str | None = None
    #: Set by whoever sends a kill the kubelet knows of (its own after the grace period, a fault injection):
    #: a run that then ends by a signal reports this reason and message instead of Error and the log tail.
    forced_reason: str | None = None
    forced_message: str | None = None
    termination_file: Path | None = None
    #: The cgroup that holds the run to its memory limit (None: no limit, or limits not enforced here).
    cgroup: ContainerCgroup | None = None
    #: The containerID when no process carries the run (a simulated pod's); else `process://<pid>`.
    runtime_id: str | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    proc: ChildProcess | None = field(default=None, repr=False)

    def terminated(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exitCode": self.code, "reason": self.reason, "startedAt": self.started_at,
                               "finishedAt": self.finished_at, "containerID": self.container_id}
        if self.message:
            out["message"] = self.message
        return out

    @property
    def container_id(self) -> str:
        return self.runtime_id or f"process://{self.pid}"

    def killed_by(self, sig: int, who: str) -> None:
        """Say, should the run end by this signal, who sent it and why (`who`: "the kubelet: ...")."""
        self.forced_reason = KILLED_REASON
        self.forced_message = f"Killed with {signal.Signals(sig).name} by {who}"


@dataclass
class Container:
    spec: dict[str, Any]
    init: bool = False
    runs: list[Run] = field(default_factory=list)
    waiting_reason: str = "ContainerCreating"
    waiting_message: str | None = None
    backing_off: bool = False
    probe_ready: bool | None = None  # None: no readiness probe, ready while running
    probe_task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def running(self) -> Run | None:
        run = self.runs[-1] if self.runs else None
        return run if run is not None and run.code is None else None

    def status(self) -> dict[str, Any]:
        """The containerStatus entry."""
        runs = self.runs
        last = runs[-1] if runs else None
        state: dict[str, Any]
        last_state: dict[str, Any] = {}
        if last is None or self.backing_off:
            waiting: dict[str, Any] = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
            if last is not None:
                last_state = {"terminated": last.terminated()}
        elif last.code is None:
            state = {"running": {"startedAt": last.started_at}}
        else:
            state = {"terminated": last.terminated()}
        if not last_state and len(runs) >= 2 and not self.backing_off:
            last_state = {"terminated": runs[-2].terminated()}
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.spec.get("image") or "local",
            "imageID": "",
            "ready": "running" in state and not self.init and self.probe_ready is not False,
            "restartCount": max(0, len(runs) - 1),
            "started": "running" in state,
            "state": state,
            "lastState": last_state,
        }
        if last is not None:
            status["containerID"] = last.container_id
        return status

    def log_run(self, pod: str, previous: bool) -> Run:
        """The run whose log `kubectl logs [--previous]` reads; KeyError saying why there is none."""
        if previous:
            if len(self.runs) < 2 and not (self.backing_off and self.runs):
                raise KeyError(f'previous terminated container "{self.name}" in pod "{pod}" not found')
            return self.runs[-1] if self.backing_off else self.runs[-2]
        if not self.runs:
            raise KeyError(f'container "{self.name}" in pod "{pod}" is waiting to start: {self.waiting_reason}')
        return self.runs[-1]


def start_process(c: Container, spec: ct.ProcessSpec, log_dir: Path, lifeline: Lifeline,
                  cgroup: ContainerCgroup | None = None) -> Run:
    """Start the container's next run as a process (its own group, output to the run's log, in `cgroup` when it
    has a memory limit); a run that could not start is already terminated, StartError."""
    restart = len(c.runs)
    run = Run(restart=restart, log_path=log_dir / f"{restart}.log", started_at=now_rfc3339(),
              termination_file=spec.termination_file, cgroup=cgroup)
    if spec.termination_file is not None:
        # Each run starts with no message, so a restart never reports its predecessor's.
        spec.termination_file.parent.mkdir(parents=True, exist_ok=True)
        spec.termination_file.unlink(missing_ok=True)
    with run.log_path.open("ab") as log_file:
        try:
            argv = spec.argv
            # A command that cannot start is not wrapped: it fails here, as StartError, not in the wrapper's shell.
            if cgroup is not None and startable(spec.argv[0], spec.env, spec.cwd):
                argv = cgroup.wrap(spec.argv)
            proc = spawn(argv, cwd=spec.cwd, env=spec.env, stdout=log_file, lifeline=lifeline)
        except OSError as exc:
            run.code, run.reason, run.finished_at = START_ERROR_EXIT, "StartError", now_rfc3339()
            run.message = f"failed to start container process: exec: {spec.argv[0]!r}: {exc.strerror}"
            c.runs.append(run)
            run.exited.set()
            return run
    run.pid, run.proc = proc.pid, proc
    c.runs.append(run)
    return run


async def wait_process(c: Container, run: Run, lifeline: Lifeline) -> int:
    """Wait for the run's process to exit and record how it ended (exit code, reason, termination message)."""
    proc = run.proc
    if proc is None:
        return run.code or 0
    try:
        returncode = await proc.wait()
        run.code = exit_code(returncode)
        run.finished_at = now_rfc3339()
        forced = bool(run.forced_reason) and returncode < 0
        run.reason = run.forced_reason if forced else terminated_reason(run.code)
        if run.cgroup is not None and run.code and run.cgroup.oom_kills():
            run.reason, forced = OOM_KILLED_REASON, False  # the kernel's OOM killer acted in its cgroup
        run.message = (run.forced_message if forced else None) or termination_message(
            run.termination_file, run.log_path, run.code, c.spec.get("terminationMessagePolicy")) or None
    finally:
        if c.probe_task is not None:
            c.probe_task.cancel()
        # Like a container's PID 1 exiting: whatever the process left in its group goes too.
        killpg(proc.pid, signal.SIGKILL)
        lifeline.forget(proc.pid)
        if run.cgroup is not None:
            run.cgroup.remove()  # still busy: removed with the kubelet's cgroup
        run.exited.set()  # also when cancelled at shutdown, so no log follower waits forever
    return run.code


def killpg(pgid: int, sig: int) -> None:
    """Signal a process group, if it is still there."""
    if pgid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
