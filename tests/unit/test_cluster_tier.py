"""The real-cluster tier (tests/cluster) fails, not skips, when KUBECONFIG names a cluster it cannot use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ports import unreachable_kubeconfig

ROOT = Path(__file__).resolve().parents[2]


def test_a_kubeconfig_naming_an_unreachable_cluster_fails_the_cluster_tier(tmp_path: Path) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cluster"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "names a cluster not usable for tfjob tests" in proc.stdout
    assert " skipped" not in proc.stdout.splitlines()[-1]
