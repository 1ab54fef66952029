"""tfjob_worker: the runtime that trains inside TFJob pods (`python -m tfjob_worker`).

The pure parts (cluster view, exit codes, LR arithmetic, strategy choice) import without TensorFlow, and
without numpy: the supervisor of every pod imports this package and should start its trainer at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cluster import ClusterView, from_env, local_rank, rank, size

if TYPE_CHECKING:
    from .data import Splits

__all__ = ["ClusterView", "Splits", "from_env", "local_rank", "rank", "size"]


def __getattr__(name: str) -> Any:
    if name == "Splits":  # what a --dataset function returns; its module needs numpy
        from .data import Splits

        return Splits
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
