"""Where a (re)start's seconds go, from the pod's process starting to the first training step.

Every gang restart pays this whole path on every worker, so the chief prints it once, after its first step:
`[tfjob] ready launch=0.3s tensorflow=4.1s data=0.4s peers=1.0s build=0.5s restore=0.2s first_step=0.9s total=7.4s
began=1795558307.408`. `began` is the Unix time the pod's process (the supervisor) started, so the line can be
lined up with what happened outside the pod (the kill, the pod's re-creation). Marks are plain wall-clock
times; the split is a pure function of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Set by the supervisor for its trainer: the Unix time the pod's process started.
BEGAN_ENV = "TFJOB_STARTED_AT"
#: The phases in order; each ends at its mark. launch: supervisor start → trainer's main (a second Python and
#: its imports); tensorflow: import and device set-up; data: dataset and model code; peers: the strategy's
#: constructor (MultiWorkerMirroredStrategy returns once every peer has joined); build: the model under the
#: strategy, compile, the input pipeline and Keras's fit set-up; restore: the backup's restore and the first
#: epoch's input iterator; first_step: tracing and running the first step.
PHASES = ("launch", "tensorflow", "data", "peers", "build", "restore", "first_step")


@dataclass
class StartupClock:
    """The trainer's start-up marks (Unix seconds)."""

    began: float
    marks: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> StartupClock:
        """Began when the supervisor says; a trainer run without one began now."""
        try:
            began = float(env[BEGAN_ENV])
        except (KeyError, ValueError):
            began = time.time()
        return cls(began=began)

    def mark(self, phase: str, now: float | None = None) -> None:
        """`phase` ended now (the first mark of a phase counts)."""
        self.marks.setdefault(phase, time.time() if now is None else now)

    @property
    def complete(self) -> bool:
        return PHASES[-1] in self.marks


def split(began: float, marks: Mapping[str, float]) -> dict[str, float]:
    """Seconds per phase, in PHASES order; a phase not marked (a role without it) is left out and the next
    phase counts from the last mark before it."""
    out: dict[str, float] = {}
    last = began
    for phase in PHASES:
        if phase in marks:
            out[phase] = max(marks[phase] - last, 0.0)
            last = marks[phase]
    return out
