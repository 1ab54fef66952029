"""tfjob_worker: the runtime that trains inside TFJob pods (`python -m tfjob_worker`).

The pure parts (cluster view, exit codes, LR arithmetic, strategy choice) import without TensorFlow.
"""

from .cluster import ClusterView, from_env, local_rank, rank, size
from .data import Splits

__all__ = ["ClusterView", "Splits", "from_env", "local_rank", "rank", "size"]
