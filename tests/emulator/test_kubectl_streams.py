"""kubectl exec, attach and port-forward (1.37, over WebSocket) against a local cluster's running pods."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from emulator_helpers import KUBECTL

from kubelocal.apiserver import write_kubeconfig
from kubelocal.cluster import LocalClusterThread

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalClusterThread]:
    with LocalClusterThread(workdir=tmp_path / "kubelocal", max_grace_seconds=1.0) as c:
        yield c


@pytest.fixture
def kc(cluster: LocalClusterThread, tmp_path: Path) -> Kubectl:
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, cluster.url)
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

    def run(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KUBECTL), "--cache-dir", str(tmp_path / "cache"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )

    return run


def run_pod(kc: Kubectl, name: str, *command: str, env: dict[str, str] | None = None) -> None:
    env_flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    made = kc("run", name, "--image=python:3.11", "--restart=Never", *env_flags, "--command", "--", *command)
    assert made.returncode == 0, made.stderr
    waited = kc("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    assert waited.returncode == 0, waited.stderr


def test_kubectl_exec_prints_the_command_output_in_the_pods_environment(kc: Kubectl) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)", env={"GREETING": "hello"})
    out = kc("exec", "sleeper", "--", "python", "-c", "import os; print(42, os.environ['GREETING'])")
    assert (out.returncode, out.stdout) == (0, "42 hello\n"), out.stderr


def test_kubectl_exec_propagates_the_exit_code_and_stderr(kc: Kubectl) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)")
    out = kc("exec", "sleeper", "--", "python", "-c", "import sys; sys.stderr.write('bad\\n'); sys.exit(3)")
    assert out.returncode == 3
    assert "bad" in out.stderr


def test_kubectl_exec_i_feeds_stdin_until_eof(kc: Kubectl) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)")
    code = "import sys; print(sys.stdin.read().upper(), end='')"
    out = kc("exec", "-i", "sleeper", "--", "python", "-c", code, stdin="one\ntwo\n")
    assert (out.returncode, out.stdout) == (0, "ONE\nTWO\n"), out.stderr


def test_kubectl_exec_of_a_missing_program_fails_with_its_name(kc: Kubectl) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)")
    out = kc("exec", "sleeper", "--", "no-such-program")
    assert out.returncode != 0
    assert "no-such-program" in out.stderr
