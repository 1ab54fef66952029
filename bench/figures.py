"""The benches' plots: matplotlib without a display (imported only when a bench draws), each figure saved alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def subplots(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """`matplotlib.pyplot.subplots` on the Agg backend: (figure, axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def save(fig: Any, path: Path, title: str, **title_style: Any) -> None:
    """Title the figure, lay it out, write it to `path` (its folder made) and free it."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, **title_style)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
