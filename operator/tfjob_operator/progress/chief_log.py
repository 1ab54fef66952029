"""Reading the worker runtime's progress lines, and plotting the chief's history.

The runtime prints `[tfjob] ...` lines (see tfjob_worker.progress); `tfjob local` follows the chief's log
and shows the latest of them. Parsing is tolerant: a line it does not know is ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PREFIX = "[tfjob] "
_EPOCH = re.compile(r"^epoch (\d+)/(\d+)\b(.*)$")
_STEP = re.compile(r"^step (\d+)/(\d+) epoch=(\d+)/(\d+)(.*)$")
_RESUMED = re.compile(r"^resumed from backup at epoch (\d+)(?: step (\d+))?")
_RESIZED = re.compile(r"^resized from (\d+) to (\d+) replicas")
_READY = re.compile(r"(\w+)=([0-9.]+)s?")
_KV = re.compile(r"(\w+)=(\S+)")


def _values(text: str) -> dict[str, str]:
    return dict(_KV.findall(text))


@dataclass
class Progress:
    """What the chief has said so far in one attempt."""

    started: dict[str, str] = field(default_factory=dict)
    epoch: int = 0
    epochs: int = 0
    step: int = 0
    steps: int = 0
    #: The epoch the latest step line is in (the one after `epoch`), and that line's own figures.
    step_epoch: int = 0
    step_metrics: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    #: Every epoch line of this attempt, in order (`epoch 1/6 loss=...`): a view shows each once.
    epoch_lines: list[str] = field(default_factory=list)
    resumed_at: int | None = None
    #: Steps of that epoch already done when it resumed (a graceful stop saves mid-epoch).
    resumed_step: int = 0
    #: (saved at, now) replicas, when this attempt resumed a backup saved at another width.
    resized: tuple[int, int] | None = None
    #: The start-up split of this attempt (`ready` line): phase → seconds, with `total` and `began` (unix time).
    ready: dict[str, float] = field(default_factory=dict)
    done: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def feed(self, line: str) -> bool:
        """Take one log line; True when it was a progress line."""
        if not line.startswith(_PREFIX):
            return False
        body = line[len(_PREFIX):].strip()
        self.lines.append(body)
        if body.startswith("start "):
            self.started = _values(body)
        elif m := _EPOCH.match(body):
            self.epoch, self.epochs = int(m.group(1)), int(m.group(2))
            self.metrics = _values(m.group(3))
            self.step = self.steps = self.step_epoch = 0
            self.step_metrics = {}
            self.epoch_lines.append(body)
        elif m := _STEP.match(body):
            self.step, self.steps = int(m.group(1)), int(m.group(2))
            self.step_epoch, self.epochs = int(m.group(3)), int(m.group(4))
            self.step_metrics = _values(m.group(5))
            self.metrics = {**self.metrics, **self.step_metrics}
        elif m := _RESUMED.match(body):
            self.resumed_at, self.resumed_step = int(m.group(1)), int(m.group(2) or 0)
        elif m := _RESIZED.match(body):
            self.resized = (int(m.group(1)), int(m.group(2)))
        elif body.startswith("ready "):
            self.ready = {k: float(v) for k, v in _READY.findall(body[len("ready "):])}
        elif body.startswith("done"):
            self.done = _values(body)
        return True


def parse_log(text: str) -> Progress:
    progress = Progress()
    for line in text.splitlines():
        progress.feed(line)
    return progress


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def plot_history(history: list[dict[str, Any]], out: Path, title: str) -> Path:
    """Loss and accuracy per epoch (train and validation) as a PNG. An epoch resumed at another width (its row
    has `resized_from` and `replicas`) gets a dotted line and an "N→M" label; the curves run on through it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [int(h.get("epoch", i + 1)) for i, h in enumerate(history)]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for key, ax in (("loss", ax_loss), ("accuracy", ax_acc)):
        for prefix, style in (("", "o-"), ("val_", "s--")):
            values = [h.get(prefix + key) for h in history]
            if any(v is not None for v in values):
                ax.plot(epochs, [v if v is not None else float("nan") for v in values], style,
                        label=(prefix + key).replace("_", " "))
        for h, epoch in zip(history, epochs, strict=True):
            if h.get("resized_from") is not None:
                ax.axvline(epoch - 0.5, color="grey", linestyle=":", linewidth=1)
                ax.annotate(f"{h['resized_from']}→{h.get('replicas', '?')}", (epoch - 0.5, 1.0),
                            xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=8, color="grey")
        ax.set_xlabel("epoch")
        ax.set_title(key)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
