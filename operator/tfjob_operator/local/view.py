"""The live view of `tfjob local`: a rich panel on a terminal, plain lines (only what changed) otherwise."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol

from tfjob_operator.jobs import pod_fields, pod_line, progress_text
from tfjob_operator.local.elastic import width_text
from tfjob_operator.progress.chief_log import Progress


@dataclass
class JobSnapshot:
    job: dict[str, Any]
    pods: list[dict[str, Any]]
    progress: Progress


def job_line(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    state = status.get("state") or "Pending"
    reason = (conds.get(state) or {}).get("message") or ""
    # An elastic job: the width (`workers 3/4 (min 2)`), and its pods running of that width.
    width = width_text(job)
    pods = status.get("workers") or "-"
    running = f"{width}  pods {pods}" if width else f"workers {pods}"
    return (f"TFJob {job['metadata']['name']}: {state}  {running}  "
            f"restarts {status.get('restartCount', 0)}" + (f"  ({reason})" if reason else ""))


def status_progress_line(job: dict[str, Any]) -> str | None:
    """What the operator wrote in status.progress (read from the chief's metrics endpoint), if anything."""
    text = progress_text(job.get("status") or {})
    return f"status.progress: {text.split(', read ')[0]}" if text else None


def progress_line(progress: Progress) -> str:
    resumed = f" (resumed from backup at epoch {progress.resumed_at}" if progress.resumed_at else ""
    resumed += f" step {progress.resumed_step}" if resumed and progress.resumed_step else ""
    if resumed and progress.resized:
        resumed += f", saved at {progress.resized[0]} replicas, now {progress.resized[1]}"
    resumed += ")" if resumed else ""
    if progress.done:
        return "chief: done " + " ".join(f"{k}={v}" for k, v in progress.done.items() if k != "saved_model")
    if progress.epochs:
        metrics = " ".join(f"{k}={v}" for k, v in progress.metrics.items())
        step = f" step {progress.step}/{progress.steps}" if progress.steps else ""
        return f"chief: epoch {progress.epoch}/{progress.epochs}{step} {metrics}".rstrip() + resumed
    if progress.started:
        return f"chief: training started ({progress.started.get('strategy', '?')}){resumed}"
    return "chief: waiting for training to start"


class View(Protocol):
    def __enter__(self) -> View: ...
    def __exit__(self, *exc: object) -> None: ...
    def update(self, snapshots: list[JobSnapshot]) -> None: ...
    def note(self, text: str) -> None: ...
    def stop(self) -> None: ...


class PlainView:
    """Prints a line whenever the job, a pod or the chief's progress changes. Good for logs and CI."""

    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.seen: set[str] = set()
        self.t0 = time.monotonic()

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _print(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.t0:6.1f}s] {text}\n")
        self.out.flush()

    def note(self, text: str) -> None:
        self._print(text)

    def update(self, snapshots: list[JobSnapshot]) -> None:
        for snap in snapshots:
            lines = [job_line(snap.job), *("  pod " + pod_line(p) for p in snap.pods)]
            lines += ["  " + progress_line(snap.progress)]
            from_status = status_progress_line(snap.job)
            if from_status:
                lines.append("  " + from_status)
            for line in lines:
                key = snap.job["metadata"]["name"] + "|" + line
                if key not in self.seen:
                    self.seen.add(key)
                    self._print(line)

    def stop(self) -> None:
        pass


class RichView:
    """A live panel per job: state, pods, and a progress bar of the chief's epochs."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.t0 = time.monotonic()

    def __enter__(self) -> RichView:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def note(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.t0:6.1f}s[/dim] {text}")

    def update(self, snapshots: list[JobSnapshot]) -> None:
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        panels = []
        for snap in snapshots:
            table = Table(box=None, show_header=True, header_style="bold")
            for col in ("pod", "phase", "attempt", "restarts", "exit"):
                table.add_column(col)
            for pod in snap.pods:
                f = pod_fields(pod)
                table.add_row(f["name"], f["phase"], f["attempt"], f["restarts"], f["exit"])
            p = snap.progress
            bar = ProgressBar(total=max(p.epochs, 1), completed=p.epoch if p.epochs else 0, width=40)
            state = (snap.job.get("status") or {}).get("state") or "Pending"
            color = {"Succeeded": "green", "Failed": "red", "Restarting": "yellow"}.get(state, "cyan")
            line = Table.grid(padding=(0, 1))
            line.add_row(bar, progress_line(p))
            parts: list[Any] = [table, line]
            from_status = status_progress_line(snap.job)
            if from_status:
                parts.append(from_status)
            panels.append(Panel(Group(*parts), title=job_line(snap.job),
                                border_style=color))
        self.live.update(Group(*panels))

    def stop(self) -> None:
        self.live.stop()


def make_view(live: bool | None) -> View:
    use_rich = sys.stdout.isatty() if live is None else live
    return RichView() if use_rich else PlainView()

