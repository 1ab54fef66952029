"""examples/helm_local.py, the README's way to try the chart, as a user runs it before a cluster is up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ports import unreachable_kubeconfig

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "helm_local.py"


def _run(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={"KUBECONFIG": kubeconfig, "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_no_cluster_yet_is_one_line_saying_to_start_one(tmp_path: Path, action: str) -> None:
    done = _run(action, kubeconfig=str(tmp_path / "kubeconfig"))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"helm_local: KUBECONFIG={str(tmp_path / 'kubeconfig')!r} is not a file: start a cluster first "
        "(`tfjob local up` prints the export to run) or point KUBECONFIG at one"]


def test_an_unreachable_cluster_is_helms_one_line_not_a_traceback(tmp_path: Path) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    done = _run("uninstall", kubeconfig=str(kubeconfig))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("helm_local: uninstall failed: kubernetes cluster unreachable")


def test_an_unknown_action_prints_the_usage(tmp_path: Path) -> None:
    done = _run("instal", kubeconfig=str(tmp_path / "kubeconfig"))
    usage = "usage: python examples/helm_local.py install|upgrade|uninstall"
    assert (done.returncode, done.stderr.strip()) == (1, usage)
