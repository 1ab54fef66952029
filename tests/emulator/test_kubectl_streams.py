"""kubectl exec, attach and port-forward (1.37, over WebSocket) against a local cluster's running pods."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes
import pytest
import requests
from emulator_helpers import KUBECTL
from kubernetes.stream import stream
from polling import wait_for
from ports import free_port

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


def test_kubectl_port_forward_reaches_the_pods_port(kc: Kubectl, cluster: LocalClusterThread, tmp_path: Path) -> None:
    remote, local = free_port(), free_port()
    (tmp_path / "index.html").write_text("hello from the pod\n")
    run_pod(kc, "web", "python", "-m", "http.server", str(remote), "--bind", "127.0.0.1", "--directory", str(tmp_path))
    wait_for(lambda: _listening(remote), timeout=30, what=f"the pod's server on port {remote}")
    forward = subprocess.Popen(
        [str(KUBECTL), "--kubeconfig", str(tmp_path / "kubeconfig"), "port-forward", "pod/web", f"{local}:{remote}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        assert f"Forwarding from 127.0.0.1:{local} -> {remote}" in line, forward.stderr.read() if forward.stderr else ""
        for _ in range(2):  # a second connection through the same session works too
            got = requests.get(f"http://127.0.0.1:{local}/index.html", timeout=10)
            assert (got.status_code, got.text) == (200, "hello from the pod\n")
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_kubectl_attach_streams_the_running_containers_output_until_it_ends(kc: Kubectl) -> None:
    ticker = "import time\nfor i in range(40):\n    print('tick', i, flush=True); time.sleep(0.1)"
    run_pod(kc, "ticker", "python", "-c", ticker)
    out = kc("attach", "ticker")
    assert out.returncode == 0, out.stderr
    assert "tick 39" in out.stdout


def test_kubectl_port_forward_to_a_closed_port_reports_the_pods_error(kc: Kubectl, tmp_path: Path) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)")
    remote, local = free_port(), free_port()
    forward = subprocess.Popen(
        [
            str(KUBECTL),
            "--kubeconfig",
            str(tmp_path / "kubeconfig"),
            "port-forward",
            "pod/sleeper",
            f"{local}:{remote}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None and forward.stderr is not None
        assert "Forwarding from" in forward.stdout.readline()
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{local}/", timeout=10)
        assert f"error forwarding port {remote} to pod sleeper" in forward.stderr.readline()
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def test_the_official_clients_exec_stream_gets_output_and_exit_code(kc: Kubectl, cluster: LocalClusterThread) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)")
    cfg = kubernetes.client.Configuration()
    cfg.host = cluster.url
    with kubernetes.client.ApiClient(cfg) as api:
        core = kubernetes.client.CoreV1Api(api)
        command = ["python", "-c", "import sys; print('out'); sys.exit(4)"]
        resp = stream(
            core.connect_get_namespaced_pod_exec,
            "sleeper",
            "default",
            command=command,
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
            _preload_content=False,
        )
        resp.run_forever(timeout=30)
        assert resp.read_stdout() == "out\n"
        assert resp.returncode == 4


def test_exec_as_a_service_account_needs_create_on_pods_exec(kc: Kubectl) -> None:
    run_pod(kc, "sleeper", "python", "-c", "import time; time.sleep(600)")
    sa = "system:serviceaccount:default:debugger"
    for args in (
        ("create", "role", "exec-get", "--verb=get", "--resource=pods,pods/exec"),
        ("create", "rolebinding", "debugger-get", "--role=exec-get", "--serviceaccount=default:debugger"),
    ):
        assert kc(*args).returncode == 0
    denied = kc("exec", f"--as={sa}", "sleeper", "--", "python", "-c", "print(1)")
    assert denied.returncode == 1
    assert f'User "{sa}" cannot create resource "pods/exec" in API group "" in the namespace "default"' in denied.stderr
    for args in (
        ("create", "role", "exec-create", "--verb=create", "--resource=pods/exec"),
        ("create", "rolebinding", "debugger-create", "--role=exec-create", "--serviceaccount=default:debugger"),
    ):
        assert kc(*args).returncode == 0
    allowed = kc("exec", f"--as={sa}", "sleeper", "--", "python", "-c", "print(1)")
    assert (allowed.returncode, allowed.stdout) == (0, "1\n"), allowed.stderr
