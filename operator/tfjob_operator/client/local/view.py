"""The live view of `tfjob local`: a rich panel on a terminal, plain lines (only what changed) otherwise."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol

from tfjob_operator.client.jobs import pod_fields, pod_line, progress_text
from tfjob_operator.client.local.chief_log import Progress
from tfjob_operator.client.local.elastic import width_text


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


def resumed_text(progress: Progress) -> str:
    """`resumed from backup at epoch 3 step 40, saved at 4 replicas, now 3`, or "" when this attempt started fresh."""
    if not progress.resumed_at:
        return ""
    text = f"resumed from backup at epoch {progress.resumed_at}"
    text += f" step {progress.resumed_step}" if progress.resumed_step else ""
    if progress.resized:
        text += f", saved at {progress.resized[0]} replicas, now {progress.resized[1]}"
    return text


def progress_line(progress: Progress, *, resumed: bool = True) -> str:
    """The chief's latest state: done, a step inside an epoch (`epoch 4/6 step 40/150`: the epoch under way, with
    that step's figures), the last epoch ended, started, or waiting. `resumed` adds where this attempt resumed."""
    suffix = f" ({resumed_text(progress)})" if resumed and progress.resumed_at else ""
    if progress.done:
        return "chief: done " + " ".join(f"{k}={v}" for k, v in progress.done.items() if k != "saved_model")
    if progress.steps:
        metrics = " ".join(f"{k}={v}" for k, v in progress.step_metrics.items())
        return (f"chief: epoch {progress.step_epoch}/{progress.epochs} step {progress.step}/{progress.steps} "
                f"{metrics}".rstrip() + suffix)
    if progress.epoch_lines:
        return f"chief: {progress.epoch_lines[-1]}{suffix}"
    if progress.started:
        return f"chief: training started ({progress.started.get('strategy', '?')}){suffix}"
    return "chief: waiting for training to start"


def chief_lines(progress: Progress) -> list[str]:
    """What the plain view shows of the chief: where it resumed, every epoch line (each once, however many
    ended between two looks), then its latest state when that is not an epoch line already shown."""
    lines = [f"chief: {resumed_text(progress)}"] if progress.resumed_at else []
    lines += [f"chief: {line}" for line in progress.epoch_lines]
    latest = progress_line(progress, resumed=False)
    return lines if latest in lines else [*lines, latest]


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
            lines += ["  " + line for line in chief_lines(snap.progress)]
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
        self.printed: set[str] = set()  # epoch lines already printed above the panel, per job

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
            for epoch_line in snap.progress.epoch_lines:  # every epoch line once, above the live panel
                key = f"{snap.job['metadata']['name']}|{epoch_line}"
                if key not in self.printed:
                    self.printed.add(key)
                    self.note(f"{snap.job['metadata']['name']} chief: {epoch_line}")
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

