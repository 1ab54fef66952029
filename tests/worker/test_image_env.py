"""The worker image's ENV and WORKDIR are defined once (tfjob_worker.image): the Dockerfile says the same."""

from __future__ import annotations

import shlex
from pathlib import Path

from tfjob_worker import image

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def worker_stage(text: str) -> list[str]:
    """The worker stage's instructions, continuation lines joined, comments dropped."""
    joined = text.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    start = next(i for i, line in enumerate(lines) if line.startswith("FROM") and line.endswith("AS worker"))
    stage = lines[start + 1:]
    end = next((i for i, line in enumerate(stage) if line.startswith("FROM")), len(stage))
    return stage[:end]


def test_the_dockerfile_worker_stage_sets_exactly_the_image_env() -> None:
    stage = worker_stage(DOCKERFILE.read_text())
    env = dict(pair.split("=", 1) for line in stage if line.startswith("ENV ") for pair in shlex.split(line[4:]))
    assert env == image.ENV


def test_the_dockerfile_worker_stage_ends_in_the_image_workdir() -> None:
    workdirs = [line.split(None, 1)[1] for line in worker_stage(DOCKERFILE.read_text()) if line.startswith("WORKDIR")]
    assert workdirs[-1] == image.WORKDIR
