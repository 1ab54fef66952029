"""Which tf.distribute strategy to use, as a pure function of the cluster and the visible devices."""

from __future__ import annotations

from dataclasses import dataclass, field

from .cluster import ClusterView

STRATEGIES = ("auto", "mwms", "ps", "mirrored", "central-storage", "default", "independent")
COLLECTIVES = ("auto", "nccl", "ring")

# Class names as they appear in progress lines (the local UI shows them).
STRATEGY_CLASS = {
    "mwms": "MultiWorkerMirroredStrategy",
    "ps": "ParameterServerStrategy",
    "mirrored": "MirroredStrategy",
    "central-storage": "CentralStorageStrategy",
    "default": "DefaultStrategy",
    "independent": "DefaultStrategy",
}


class StrategyChoiceError(ValueError):
    """The requested strategy cannot run on this cluster."""


@dataclass(frozen=True)
class StrategyChoice:
    """The strategy to build and why."""

    kind: str  # one of STRATEGIES except "auto"
    collective: str | None = None  # "NCCL" or "RING" for mwms, else None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def class_name(self) -> str:
        return STRATEGY_CLASS[self.kind]


def choose_strategy(
    requested: str,
    collective: str,
    view: ClusterView,
    gpus: list[str],
    local_devices: int,
) -> StrategyChoice:
    """Pick the strategy: `gpus` are visible GPU names, `local_devices` the logical devices to mirror over."""
    if requested not in STRATEGIES:
        raise StrategyChoiceError(f"--strategy {requested!r} is not one of {', '.join(STRATEGIES)}")
    if collective not in COLLECTIVES:
        raise StrategyChoiceError(f"--collective {collective!r} is not one of {', '.join(COLLECTIVES)}")
    kind = requested
    if kind == "auto":
        if view.has_ps:
            kind = "ps"
        elif view.world_size > 1:
            kind = "mwms"
        elif local_devices > 1:
            kind = "mirrored"
        else:
            kind = "default"
    if kind == "ps" and not view.has_ps:
        raise StrategyChoiceError("--strategy ps needs ps tasks (and a chief) in TF_CONFIG.cluster")
    if kind in ("mirrored", "central-storage", "default") and view.world_size > 1:
        raise StrategyChoiceError(
            f"--strategy {kind} runs in one process, but the cluster has {view.world_size} training tasks; "
            "use mwms, ps or independent"
        )
    if kind != "mwms":
        return StrategyChoice(kind=kind)
    warnings: list[str] = []
    if collective == "nccl" and not gpus:
        warnings.append("--collective nccl requested but no GPU is visible; TensorFlow will fall back to RING")
        return StrategyChoice(kind=kind, collective="RING", warnings=tuple(warnings))
    if collective == "auto":
        return StrategyChoice(kind=kind, collective="NCCL" if gpus else "RING")
    return StrategyChoice(kind=kind, collective=collective.upper())


def replicas_in_sync(choice: StrategyChoice, view: ClusterView, local_devices: int) -> int:
    """Replicas that share one global batch (what the LR and batch are scaled by)."""
    if choice.kind == "mwms":
        return view.world_size * max(local_devices, 1)
    if choice.kind == "mirrored":
        return max(local_devices, 1)
    if choice.kind == "ps":
        # Each worker step is asynchronous and independent; the variables live on the ps tasks.
        return 1
    return 1
