"""docs/contributing.md's map, walked: adding a gang backend with its own scheduler, adding a condition reason the
code writes and changing how a lost worker is handled take exactly the files the map names. Each walk is done on a
copy of the repository; the project's own consistency tests are run on the copy, once with every step done (they
pass) and once with one file left out (they fail, naming what is missing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAP = REPO / "docs" / "contributing.md"
PACKAGE = "operator/tfjob_operator"

Step = Callable[[Path], None]


def _copy(tmp: Path) -> Path:
    copy = tmp / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    for part in ("operator", "worker_image", "local_cluster", "tests", "third_party", "deploy", "docs", "crds"):
        shutil.copytree(REPO / part, copy / part, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _env(copy: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        str(copy / p) for p in ("operator", "worker_image", "local_cluster", "tests"))}


def _pytest(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The copy's tests; -x: a walk left incomplete shows at its first failure, and the run stops there."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-o", "addopts=", *args], cwd=copy, env=_env(copy), capture_output=True, text=True,
                          timeout=300)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: the walkthrough's anchor {old!r} moved; update this test and docs/contributing.md"
    path.write_text(text.replace(old, new, 1))


def _edits(*pairs: tuple[str, str]) -> Step:
    def step(path: Path) -> None:
        for old, new in pairs:
            _edit(path, old, new)
    return step


def _map_row(task: str) -> tuple[int, list[str]]:
    """The count and the files the map's row for `task` names (backticked paths in its last column)."""
    for line in MAP.read_text().splitlines():
        if line.startswith(f"| {task} |"):
            _, count, files = (cell.strip() for cell in line.strip().strip("|").split("|"))
            return int(count), re.findall(r"`([^`\s]+/[^`\s]+)`", files)  # paths; not commands
    raise AssertionError(f"docs/contributing.md has no row for {task!r}")


def _walk(task: str, steps: dict[str, Step], copy: Path, skip: str) -> None:
    """Do the row's steps on the copy, one file each, but `skip`; the map names exactly these files."""
    count, named = _map_row(task)
    named = [f.replace("<name>", "lsf") for f in named]
    assert sorted(steps) == sorted(named), f"the map's row {task!r} and this walkthrough disagree"
    assert count == len(named), f"the map's row {task!r} says {count} files and names {len(named)}"
    for path, step in steps.items():
        if path != skip:
            step(copy / path)


# ---------------------------------------------------------------- add a gang backend with its own scheduler

BACKEND_MODULE = '''"""A walkthrough backend: pods go to the LSF-on-Kubernetes scheduler as they are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.gang import base


class LsfBackend(base.GangBackend):
    name = "lsf"
    default_scheduler = "lsf-scheduler"

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = base.copy_pod(pod)
        out["spec"]["schedulerName"] = self.scheduler_name
        return out
'''


def _render_manifests(path: Path) -> None:
    """values.schema.json is written from the registry: the project's own generator, run in the copy."""
    copy = path.parents[3]
    subprocess.run([sys.executable, "deploy/render_manifests.py"], cwd=copy, env=_env(copy), check=True,
                   capture_output=True, timeout=120)


BACKEND_STEPS: dict[str, Step] = {
    f"{PACKAGE}/gang/lsf.py": lambda p: p.write_text(BACKEND_MODULE),
    f"{PACKAGE}/gang/backends.py": _edits(
        ("register(NoGangBackend)\n", "register(NoGangBackend)\nregister(LsfBackend)\n"),
        ("from tfjob_operator.gang.none import", "from tfjob_operator.gang.lsf import LsfBackend\n"
                                                 "from tfjob_operator.gang.none import")),
    "deploy/helm/tfjob-operator/values.schema.json": _render_manifests,
    "docs/gang.md": _edits(("| `none` |", "| `lsf` | LSF schedules your pods | creates pods with `schedulerName: "
                                          "lsf-scheduler` | LSF on Kubernetes |\n| `none` |")),
    "tests/gang/test_gang_backends.py": _edits(
        ('    ("none", set()),\n', '    ("none", set()),\n    ("lsf", set()),\n'),
        ('    ("none", None),\n', '    ("none", None),\n    ("lsf", "lsf-scheduler"),\n'),
        ('["builtin", "kueue", "none", "scheduler-plugins", "volcano"]',
         '["builtin", "kueue", "lsf", "none", "scheduler-plugins", "volcano"]')),
}


@pytest.mark.parametrize("skip", ["", f"{PACKAGE}/gang/backends.py", "deploy/helm/tfjob-operator/values.schema.json",
                                  "docs/gang.md", "tests/gang/test_gang_backends.py"])
def test_adding_a_gang_backend_with_its_own_scheduler_takes_the_files_the_map_names(tmp_path: Path,
                                                                                    skip: str) -> None:
    copy = _copy(tmp_path)
    _walk("add a gang backend with its own scheduler", BACKEND_STEPS, copy, skip)
    run = _pytest(copy, "tests/gang/test_gang_backends.py", "tests/deploy/test_chart.py", "-k",
                  "registered or capabilities or offer_exactly or backends_table or own_scheduler or up_to_date")
    assert (run.returncode != 0) if skip else (run.returncode == 0), run.stdout[-3000:] + run.stderr[-2000:]


# ---------------------------------------------------------------- add a condition reason the code writes

# A kubelet's termination of a pod (graceful node shutdown: DisruptionTarget TerminationByKubelet) recorded as its
# own reason, NodeShutDown, rather than PodEvicted.
REASON_STEPS: dict[str, Step] = {
    f"{PACKAGE}/reconcile/reasons.py": _edits(('    POD_DISRUPTED = "PodDisrupted", C.RESTARTING\n',
                                               '    POD_DISRUPTED = "PodDisrupted", C.RESTARTING\n'
                                               '    NODE_SHUT_DOWN = "NodeShutDown", C.RESTARTING\n')),
    f"{PACKAGE}/reconcile/observe.py": _edits(('"TerminationByKubelet": Reason.POD_EVICTED,',
                                               '"TerminationByKubelet": Reason.NODE_SHUT_DOWN,')),
    "docs/operator.md": _edits(("| Restarting | `Resized` |", "| Restarting | `NodeShutDown` | the kubelet stopped "
                                "the pod (its node shuts down; does not count) |\n| Restarting | `Resized` |")),
    "tests/unit/test_reconcile.py": _edits(('    Case("node loss restarts the gang",', '''    Case("a node shutting \
down restarts the gang", tfjob(status=started(RUNNING)),
         pods=[pod("worker-0"), pod("worker-1", "Failed", code=143, disruption="TerminationByKubelet")],
         state="Restarting", reason="NodeShutDown", deletes=("j-worker-0", "j-worker-1"), events=("NodeShutDown",),
         restarts=1),
    Case("node loss restarts the gang",''')),
}


@pytest.mark.parametrize("skip", ["", *REASON_STEPS])
def test_adding_a_condition_reason_the_code_writes_takes_the_files_the_map_names(tmp_path: Path, skip: str) -> None:
    copy = _copy(tmp_path)
    _walk("add a condition reason the code writes", REASON_STEPS, copy, skip)
    run = _pytest(copy, "tests/unit/test_reasons.py", "tests/unit/test_reconcile.py",
                  "tests/unit/test_local_elastic.py")
    assert (run.returncode != 0) if skip else (run.returncode == 0), run.stdout[-3000:] + run.stderr[-2000:]


# ---------------------------------------------------------------- change how a lost worker is handled

# A worker deleted behind the operator's back (someone's `kubectl delete pod`) counts toward backoffLimit.
LOST_WORKER_STEPS: dict[str, Step] = {
    f"{PACKAGE}/reconcile/failure_policy.py": _edits(('out.append(Failure(pod, "disruption", Reason.POD_DELETED,',
                                                      'out.append(Failure(pod, "retryable", Reason.POD_DELETED,')),
    "tests/unit/test_reconcile.py": _edits(
        ('reason="PodDeleted", deletes=("j-worker-0",), events=("PodDeleted",), restarts=1),',
         'reason="PodDeleted", deletes=("j-worker-0",), events=("PodDeleted",), restarts=1,\n'
         '         failure_restarts=1),'),
        ('assert restarting(departed)[:4] == ("Restarting", 1, 0, "PodDeleted")',
         'assert restarting(departed)[:4] == ("Restarting", 1, 1, "PodDeleted")')),
}


@pytest.mark.parametrize("skip", ["", *LOST_WORKER_STEPS])
def test_changing_how_a_lost_worker_is_handled_takes_the_files_the_map_names(tmp_path: Path, skip: str) -> None:
    copy = _copy(tmp_path)
    _walk("change how a lost worker is handled", LOST_WORKER_STEPS, copy, skip)
    run = _pytest(copy, "tests/unit/test_reconcile.py")
    assert (run.returncode != 0) if skip else (run.returncode == 0), run.stdout[-3000:] + run.stderr[-2000:]
