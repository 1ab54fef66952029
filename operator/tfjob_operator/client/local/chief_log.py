"""Reading the worker runtime's progress lines, and plotting the chief's history.

The runtime prints `[tfjob] ...` lines, defined (printed and parsed) in `tfjob_worker.progress`; `tfjob local`
follows the chief's log and shows the latest of them. Parsing is tolerant: a line it does not know is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfjob_worker.progress import pairs, parse_line


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
        parsed = parse_line(line)
        if parsed is None:
            return False
        kind, groups, body = parsed
        self.lines.append(body)
        if kind == "start":
            self.started = pairs(groups[0])
        elif kind == "epoch":
            self.epoch, self.epochs = int(groups[0] or 0), int(groups[1] or 0)
            self.metrics = pairs(groups[2])
            self.step = self.steps = self.step_epoch = 0
            self.step_metrics = {}
            self.epoch_lines.append(body)
        elif kind == "step":
            self.step, self.steps = int(groups[0] or 0), int(groups[1] or 0)
            self.step_epoch, self.epochs = int(groups[2] or 0), int(groups[3] or 0)
            self.step_metrics = pairs(groups[4])
            self.metrics = {**self.metrics, **self.step_metrics}
        elif kind == "resumed":
            self.resumed_at, self.resumed_step = int(groups[0] or 0), int(groups[1] or 0)
        elif kind == "resized":
            self.resized = (int(groups[0] or 0), int(groups[1] or 0))
        elif kind == "ready":
            self.ready = {k: float(v.removesuffix("s")) for k, v in pairs(groups[0]).items()}
        elif kind == "done":
            self.done = pairs(groups[0])
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
