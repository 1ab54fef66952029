"""Draw docs/architecture.png and docs/architecture.svg: the path of a TFJob from `kubectl apply` to a training
pod and back to its status, with the module that owns each step.

The picture is data: BOXES (where each part runs and which module owns it) and STEPS (numbered arrows, the
same numbers as the list in docs/architecture.md). Edit them here and run

    python docs/architecture.py

(matplotlib, already a dependency of the project; no Graphviz needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Box:
    key: str
    x: float  # centre, in figure units (0..W)
    y: float
    w: float
    h: float
    title: str
    modules: str  # the owning module(s), shown in monospace
    color: str


@dataclass(frozen=True)
class Lane:
    title: str
    x0: float
    x1: float
    color: str


@dataclass(frozen=True)
class Step:
    number: int
    src: str
    dst: str
    label: str
    bend: float = 0.0  # arc of the arrow (0 = straight)
    label_at: float = 0.5  # where along the arrow the number sits


W, H = 20.0, 13.0

LANES = [
    Lane("user", 0.2, 3.6, "#f4f4f4"),
    Lane("API server\n(kube-apiserver, or kubelocal.apiserver locally)", 3.8, 7.6, "#eef3fb"),
    Lane("operator process  (tfjob_operator; one active replica: leader)", 7.8, 15.1, "#eefaf0"),
    Lane("nodes\n(kube-scheduler + kubelet, or kubelocal)", 15.3, 19.8, "#fbf3ea"),
]

OPERATOR = "#d7f0dc"
CORE = "#fff6cc"
API = "#d6e4f7"
NODE = "#f6dfc6"
USER = "#e4e4e4"

BOXES = [
    Box("user", 1.9, 10.9, 3.0, 1.3, "kubectl apply -f job.yaml\n(or tfjob submit)", "cli, jobs", USER),
    Box("status", 1.9, 8.3, 3.0, 1.5, "kubectl get tfj\ntfjob status / wait", "State, Workers,\nconditions, Events",
        USER),
    Box("api", 5.5, 10.9, 3.2, 1.3, "TFJob stored\n(CRD schema + webhook)", "crds/, webhook", API),
    Box("statusapi", 5.5, 8.3, 3.2, 1.3, "TFJob status\n(subresource)", "status, Events", API),
    Box("podsapi", 5.5, 4.0, 3.2, 1.5, "Service, Pods\n(builtin: gated)", "core/v1", API),
    Box("handlers", 9.8, 10.9, 2.7, 1.3, "kopf watches\n+ indices", "handlers", OPERATOR),
    Box("controller", 9.8, 8.3, 2.7, 1.5, "per-job queue,\ntimers, back-off", "controller", OPERATOR),
    Box("kube", 9.8, 5.9, 2.7, 1.3, "write: status first,\nthen actions", "kube", OPERATOR),
    Box("admission", 11.2, 1.6, 3.2, 1.9, "admission loop\n(builtin gangs)",
        "admission\ngang.builtin,\nplacement, queue", OPERATOR),
    Box("observe", 13.1, 10.9, 3.0, 1.3, "parse once", "observed\nvalidation, api", CORE),
    Box("render", 13.1, 9.2, 3.0, 1.2, "Service + Pods,\nTF_CONFIG", "render", CORE),
    Box("gangview", 13.1, 7.55, 3.0, 1.2, "gang view", "gang.base,\ngang.<backend>", CORE),
    Box("reconcile", 13.1, 5.8, 3.0, 1.3, "decide: status\n+ actions", "reconcile", CORE),
    Box("scheduler", 17.55, 5.0, 3.6, 1.3, "bind to the node\nit was released to", "kube-scheduler", NODE),
    Box("kubelet", 17.55, 3.1, 3.6, 1.3, "start the container,\nreport phase + exit code", "kubelet", NODE),
    Box("worker", 17.55, 1.1, 3.6, 1.4, "train (MWMS), checkpoint,\nexit with a code", "tfjob_worker\nexit_codes",
        NODE),
]

STEPS = [
    Step(1, "user", "api", "create"),
    Step(2, "api", "handlers", "watch"),
    Step(3, "handlers", "controller", "trigger"),
    Step(4, "controller", "observe", "job (index)", bend=-0.3, label_at=0.45),
    Step(5, "observe", "render", "JobView"),
    Step(6, "render", "gangview", "pods"),
    Step(7, "gangview", "reconcile", "GangView"),
    Step(8, "reconcile", "controller", "Decision", bend=-0.2, label_at=0.4),
    Step(9, "controller", "kube", "act"),
    Step(10, "kube", "podsapi", "create Service,\nPodGroup, Pods", label_at=0.45),
    Step(11, "podsapi", "admission", "gated gang", bend=0.2, label_at=0.5),
    Step(12, "admission", "podsapi", "release (nodeSelector,\nno gate)", bend=0.2, label_at=0.5),
    Step(13, "podsapi", "scheduler", "schedulable pod", label_at=0.72),
    Step(14, "scheduler", "kubelet", "bound"),
    Step(15, "kubelet", "worker", "TF_CONFIG"),
    Step(16, "kubelet", "podsapi", "pod status", label_at=0.3),
    Step(17, "podsapi", "handlers", "pod event:\nsteps 3-9\nagain", bend=-0.08, label_at=0.3),
    Step(18, "kube", "statusapi", "status PATCH,\nEvents", label_at=0.75),
    Step(19, "statusapi", "status", "read"),
]


def anchor(box: Box, toward: Box) -> tuple[float, float]:
    """The point on the box's edge facing the other box."""
    dx, dy = toward.x - box.x, toward.y - box.y
    if dx == 0 and dy == 0:
        return box.x, box.y
    sx = (box.w / 2) / abs(dx) if dx else float("inf")
    sy = (box.h / 2) / abs(dy) if dy else float("inf")
    s = min(sx, sy)
    return box.x + dx * s, box.y + dy * s


def draw(path_png: Path, path_svg: Path) -> None:
    fig, ax = plt.subplots(figsize=(W, H))
    ax.set_xlim(0, W)
    ax.set_ylim(0, H)
    ax.axis("off")
    ax.text(W / 2, H - 0.35, "A TFJob's path: kubectl apply → training pod → status (numbers: docs/architecture.md)",
            ha="center", va="center", fontsize=17, weight="bold")
    for lane in LANES:
        ax.add_patch(FancyBboxPatch((lane.x0, 0.3), lane.x1 - lane.x0, H - 1.1, boxstyle="round,pad=0.02",
                                    fc=lane.color, ec="#bbbbbb", lw=1))
        ax.text((lane.x0 + lane.x1) / 2, H - 1.05, lane.title, ha="center", va="center", fontsize=11,
                color="#444444", style="italic")
    ax.add_patch(FancyBboxPatch((11.45, 4.75), 3.3, 6.95, boxstyle="round,pad=0.05", fc="none", ec="#c9a400",
                                lw=1.5, ls="--"))
    ax.text(13.1, 4.5, "pure core: no I/O,\ntable tests", ha="center", va="top", fontsize=10, color="#8a7000")
    by_key = {b.key: b for b in BOXES}
    for b in BOXES:
        ax.add_patch(FancyBboxPatch((b.x - b.w / 2, b.y - b.h / 2), b.w, b.h, boxstyle="round,pad=0.05",
                                    fc=b.color, ec="#555555", lw=1.2))
        ax.text(b.x, b.y + b.h * 0.16, b.title, ha="center", va="center", fontsize=11)
        ax.text(b.x, b.y - b.h * 0.3, b.modules, ha="center", va="center", fontsize=9.5, family="monospace",
                color="#1a4d8f")
    for step in STEPS:
        src, dst = by_key[step.src], by_key[step.dst]
        start, end = anchor(src, dst), anchor(dst, src)
        arrow = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=16, lw=1.6, color="#333333",
                                connectionstyle=f"arc3,rad={step.bend}", shrinkA=4, shrinkB=4)
        ax.add_patch(arrow)
        t = step.label_at
        # The point at t on matplotlib's arc3 curve (a quadratic Bezier through this control point).
        dx, dy = end[0] - start[0], end[1] - start[1]
        cx, cy = (start[0] + end[0]) / 2 + step.bend * dy, (start[1] + end[1]) / 2 - step.bend * dx
        mx = (1 - t) ** 2 * start[0] + 2 * (1 - t) * t * cx + t**2 * end[0]
        my = (1 - t) ** 2 * start[1] + 2 * (1 - t) * t * cy + t**2 * end[1]
        ax.text(mx, my, f"{step.number}", ha="center", va="center", fontsize=10, weight="bold", color="white",
                bbox={"boxstyle": "circle,pad=0.2", "fc": "#c0392b", "ec": "none"}, zorder=5)
        ax.text(mx + 0.25, my, step.label, ha="left", va="center", fontsize=9, color="#222222", zorder=4,
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85})
    fig.savefig(path_png, dpi=80, bbox_inches="tight")
    fig.savefig(path_svg, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    draw(HERE / "architecture.png", HERE / "architecture.svg")
    print(f"wrote {HERE / 'architecture.png'} and {HERE / 'architecture.svg'}")
