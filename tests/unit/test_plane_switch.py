"""One switch for the plane: `pytest --control-plane upstream` is what TFJOB_CONTROL_PLANE=upstream is, for the
pytest plugin's fixtures and for everything that reads the variable (the operator harness, `tfjob local`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SEEN = """
import os
from kubelocal import planes

def test_the_plane():
    print("plane:", os.environ.get("TFJOB_CONTROL_PLANE"), planes.choose())
"""


@pytest.mark.parametrize(("option", "expected"), [([], "plane: None kubelocal"),
                                                  (["--control-plane", "upstream"], "plane: upstream upstream")])
def test_the_pytest_option_sets_the_variable_every_part_reads(tmp_path: Path, option: list[str], expected: str) -> None:
    (tmp_path / "test_seen.py").write_text(SEEN)
    env = {k: v for k, v in os.environ.items() if k != "TFJOB_CONTROL_PLANE"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *option,
                             str(tmp_path / "test_seen.py")], capture_output=True, text=True, env=env, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected in result.stdout
