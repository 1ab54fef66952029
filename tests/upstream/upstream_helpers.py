"""What the upstream tier's tests share: the real kubectl against one kubeconfig."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KUBECTL = str(Path(sys.executable).parent / "kubectl")


class Kubectl:
    """The real kubectl against one kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOME": str(self.kubeconfig.parent)})

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        done = self.run(*args, stdin=stdin, timeout=timeout)
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout
