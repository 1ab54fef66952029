"""What can be checked of the Dockerfile without a Docker engine: sources, pins, users, entrypoints."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text()


def stages() -> dict[str, list[str]]:
    """Instructions per stage name (continuation lines joined)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in TEXT.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if m:
            current = m.group(1)
            out[current] = []
        if current:
            out[current].append(line)
    return out


def test_operator_stage_exists_and_runs_as_non_root() -> None:
    operator = stages()["operator"]
    users = [line.split()[1] for line in operator if line.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_base_images_are_pinned_to_an_explicit_version() -> None:
    for image in re.findall(r"^FROM\s+(\S+)", TEXT, re.MULTILINE | re.IGNORECASE):
        if image in stages():
            continue  # FROM an earlier stage
        assert ":" in image or "@sha256:" in image, image
        tag = image.split("@")[0].rsplit(":", 1)[-1]
        assert tag != "latest" and re.match(r"^\d+\.\d+\.\d+", tag), image


@pytest.mark.parametrize("stage", sorted(stages()))
def test_every_copied_path_exists(stage: str) -> None:
    for line in stages()[stage]:
        if not line.upper().startswith(("COPY ", "ADD ")) or "--from=" in line:
            continue
        *sources, _dest = [p for p in line.split()[1:] if not p.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"{stage}: {line}"


def test_operator_entrypoint_is_the_installed_tfjob_operator_command() -> None:
    operator = stages()["operator"]
    (entrypoint,) = [json.loads(line.split(None, 1)[1]) for line in operator if line.startswith("ENTRYPOINT")]
    (cmd,) = [json.loads(line.split(None, 1)[1]) for line in operator if line.startswith("CMD")]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint[0] in scripts
    assert (entrypoint + cmd)[:2] == ["tfjob", "operator"]
    from tfjob_operator.client import cli

    assert "operator" in cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr,operator]


def test_operator_stage_installs_no_tensorflow_and_no_local_control_plane() -> None:
    installs = [line for line in stages()["operator"] if line.startswith("RUN") and "pip install" in line]
    assert installs and not any(word in line for line in installs for word in ("[", "tensorflow", "local"))
    copied = [line for line in stages()["operator"] if line.startswith("COPY")]
    assert not any("local_cluster" in line for line in copied)
