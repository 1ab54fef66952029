"""docs/contributing.md's map, walked: adding a gang backend or a condition reason takes exactly the files the map
names. Each walk is done on a copy of the repository; the project's own consistency tests are run on the copy, once
with every step done (they pass) and once with one file left out (they fail, naming what is missing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAP = REPO / "docs" / "contributing.md"


def _copy(tmp: Path) -> Path:
    copy = tmp / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    for part in ("operator", "worker_image", "local_cluster", "tests", "third_party", "deploy", "docs", "crds"):
        shutil.copytree(REPO / part, copy / part, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _pytest(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        str(copy / p) for p in ("operator", "worker_image", "local_cluster", "tests"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-o", "addopts=", *args], cwd=copy, env=env, capture_output=True, text=True, timeout=300)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: the walkthrough's anchor {old!r} moved; update this test and docs/contributing.md"
    path.write_text(text.replace(old, new, 1))


def _map_files(task: str) -> list[str]:
    """The files the map's row for `task` names (backticked paths in its last column)."""
    for line in MAP.read_text().splitlines():
        if line.startswith("|") and task in line:
            return re.findall(r"`([^`]+/[^`]+)`", line.rsplit("|", 2)[-2])
    raise AssertionError(f"docs/contributing.md has no row for {task!r}")


BACKEND_MODULE = '''"""A walkthrough backend: pods go to the LSF-on-Kubernetes scheduler as they are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.gang import base


class LsfBackend(base.GangBackend):
    name = "lsf"

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = base.copy_pod(pod)
        out["spec"]["schedulerName"] = "lsf"
        return out
'''


def _add_backend(copy: Path, *, skip: str = "") -> None:
    """The steps of docs/contributing.md's "add a gang backend" row, one file each; `skip` leaves one out."""
    gang = "operator/tfjob_operator/gang"
    steps = {
        f"{gang}/lsf.py": lambda p: p.write_text(BACKEND_MODULE),
        f"{gang}/backends.py": lambda p: _edit(p, "register(NoGangBackend)\n",
                                              "register(NoGangBackend)\nregister(LsfBackend)\n") or _edit(
            p, "from tfjob_operator.gang.none import", "from tfjob_operator.gang.lsf import LsfBackend\n"
                                                     "from tfjob_operator.gang.none import"),
        "operator/tfjob_operator/settings.py": lambda p: _edit(p, '    NONE = "none"\n',
                                                               '    NONE = "none"\n    LSF = "lsf"\n'),
        "deploy/helm/tfjob-operator/values.schema.json": lambda p: p.write_text(
            p.read_text().replace('"kueue", "none"]', '"kueue", "none", "lsf"]')),
        "docs/gang.md": lambda p: _edit(p, "| `none` |", "| `lsf` | LSF schedules your pods | sets "
                                                         "`schedulerName: lsf` | LSF on Kubernetes |\n| `none` |"),
        "tests/gang/test_gang_backends.py": lambda p: _edit(p, '    ("none", set()),\n',
                                                            '    ("none", set()),\n    ("lsf", set()),\n') or _edit(
            p, '["builtin", "kueue", "none", "scheduler-plugins", "volcano"]',
            '["builtin", "kueue", "lsf", "none", "scheduler-plugins", "volcano"]'),
    }
    named = [f.replace("<name>", "lsf") for f in _map_files("add a gang backend")]
    assert sorted(steps) == sorted(named), "the map and this walkthrough disagree"
    for path, step in steps.items():
        if path != skip:
            step(copy / path)


@pytest.mark.parametrize("skip", ["", "operator/tfjob_operator/settings.py",
                                  "deploy/helm/tfjob-operator/values.schema.json", "docs/gang.md"])
def test_adding_a_gang_backend_takes_the_files_the_map_names(tmp_path: Path, skip: str) -> None:
    copy = _copy(tmp_path)
    _add_backend(copy, skip=skip)
    run = _pytest(copy, "tests/gang/test_gang_backends.py", "-k",
                  "registered or capabilities or offer_exactly or backends_table")
    if skip:
        assert run.returncode == 1, run.stdout[-3000:]
    else:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


@pytest.mark.parametrize("skip", ["", "docs/operator.md"])
def test_adding_a_condition_reason_takes_the_files_the_map_names(tmp_path: Path, skip: str) -> None:
    copy = _copy(tmp_path)
    files = _map_files("add a condition reason")
    assert sorted(files) == ["docs/operator.md", "operator/tfjob_operator/reconcile/reasons.py"]
    reasons = copy / "operator/tfjob_operator/reconcile/reasons.py"
    text = reasons.read_text()
    anchor = re.search(r'\n    [A-Z_]+ = "[A-Za-z]+"\n', text)
    assert anchor is not None
    reasons.write_text(text.replace(anchor.group(0), anchor.group(0) + '    WALKED_THROUGH = "WalkedThrough"\n', 1))
    if skip != "docs/operator.md":
        doc = copy / "docs/operator.md"
        head, table = doc.read_text().split("## Conditions and reasons", 1)
        rule = next(line for line in table.splitlines() if line.startswith("|---") or line.startswith("| ---"))
        doc.write_text(head + "## Conditions and reasons" + table.replace(
            rule, rule + "\n| Running | `WalkedThrough` | the walkthrough's reason |", 1))
    run = _pytest(copy, "tests/unit/test_reasons.py")
    assert run.returncode == (1 if skip else 0), run.stdout[-3000:]
