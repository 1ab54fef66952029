"""The worker image's name, ENV and WORKDIR are defined once (tfjob_worker.image): the Dockerfile, the README, the
examples and the chart say the same."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from tfjob_worker import image

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


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


def test_the_worker_image_has_one_name_everywhere() -> None:
    """Every mention of a worker image (README, examples, Dockerfile, docs, chart) is tfjob_worker.image's name,
    tagged with the release (or `dev` where docs/deploy.md builds one for kind)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    files = [ROOT / "README.md", DOCKERFILE, *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*"),
             *(ROOT / "deploy" / "helm").rglob("*")]
    found = {(path.relative_to(ROOT).as_posix(), m.group(0)) for path in files if path.is_file()
             for m in re.finditer(r"[\w.\-/]*(?:tfjob-worker|/worker:)[\w.\-:]*", path.read_text(errors="replace"))}
    assert {name for _, name in found} >= {f"{image.REPOSITORY}:{version}"}
    allowed = {f"{image.REPOSITORY}:{version}", f"{image.REPOSITORY}:dev", f"{image.REPOSITORY}:"}
    assert sorted(f for f in found if f[1] not in allowed) == []
