"""`tfjob local up`: the control plane alone, used with the real kubectl binary."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from polling import wait_for
from processes import alive, cmdline

from tfjob_operator.client.local.up import EXIT_USAGE, run_local_up

pytestmark = pytest.mark.timeout(120)
KUBECTL = str(Path(sys.executable).parent / "kubectl")

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: python:3.11
    command: [python, -c, "import os; print('hello from', os.environ['HOSTNAME'])"]
"""


#: A pod whose process starts a child of its own (same process group), then both sleep.
FAMILY = ("import subprocess, sys, time; "
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # local-up-lifeline']); "
          "time.sleep(600)  # local-up-lifeline")
FAMILY_POD = f"""
apiVersion: v1
kind: Pod
metadata:
  name: family
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: python:3.11
    command: [python, -c, "{FAMILY}"]
"""


def start_local_up(tmp_path: Path, nodes: str) -> tuple[subprocess.Popen[str], Path, queue.Queue[str]]:
    """`tfjob local up` in its own process, once its banner is out; its output lines arrive on the queue."""
    kubeconfig = tmp_path / "kubeconfig"
    code = ("import sys; from pathlib import Path; from tfjob_operator.client.local.up import run_local_up; "
            f"sys.exit(run_local_up(0, Path({str(kubeconfig)!r}), {nodes!r}, Path({str(tmp_path)!r})))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    return proc, kubeconfig, lines


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def test_local_up_serves_kubectl_until_sigterm(tmp_path: Path) -> None:
    proc, kubeconfig, lines = start_local_up(tmp_path, "2x{cpu:4,gpu:1}")
    try:
        banner = []
        deadline = time.monotonic() + 60
        while not banner or "Press Ctrl-C" not in banner[-1]:
            banner.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        text = "".join(banner)
        assert f"Kubeconfig written to {kubeconfig}" in text and "node-0: cpu=4" in text

        assert kubectl(kubeconfig, "get", "nodes", "-o", "name").split() == ["node/node-0", "node/node-1"]
        assert "tfjobs.tfjob.dev" in kubectl(kubeconfig, "get", "crd", "-o", "name")
        kubectl(kubeconfig, "apply", "-f", "-", stdin=POD)
        kubectl(kubeconfig, "wait", "pod/hello", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s")
        assert kubectl(kubeconfig, "logs", "hello") == "hello from hello\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert "stopping" in "".join(rest)


def test_when_local_up_is_sigkilled_its_pod_processes_and_their_children_exit(tmp_path: Path) -> None:
    proc, kubeconfig, lines = start_local_up(tmp_path, "1x{cpu:4}")
    try:
        deadline = time.monotonic() + 60
        while "Press Ctrl-C" not in lines.get(timeout=max(0.1, deadline - time.monotonic())):
            pass
        kubectl(kubeconfig, "apply", "-f", "-", stdin=FAMILY_POD)
        me = psutil.Process(proc.pid)

        def family() -> list[psutil.Process]:
            found = [p for p in me.children(recursive=True) if "local-up-lifeline" in " ".join(cmdline(p))]
            return found if len(found) == 2 else []

        pod_processes = wait_for(family, timeout=60, interval=0.2, what="the pod's process and its child running")
    finally:
        proc.kill()
        proc.wait(timeout=30)
    wait_for(lambda: not alive(pod_processes), timeout=15, interval=0.2,
             what=f"the pod's processes to exit: {[p.pid for p in alive(pod_processes)]}")



def test_local_up_refuses_a_bad_node_spec_before_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_local_up(0, tmp_path / "kubeconfig", "2x{gpus:4}", tmp_path) == EXIT_USAGE
    assert "unknown key 'gpus'" in capsys.readouterr().err
    assert not (tmp_path / "kubeconfig").exists()


@pytest.mark.parametrize("speed", [0.0, -60.0])
def test_local_up_refuses_a_sim_speed_that_is_not_positive(tmp_path: Path, speed: float,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert run_local_up(0, tmp_path / "kubeconfig", "2x{sim:true}", tmp_path, sim_speed=speed) == EXIT_USAGE
    assert f"--sim-speed {speed:g}: must be a positive number" in capsys.readouterr().err


def test_local_up_reports_a_port_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run_local_up(port, tmp_path / "kubeconfig", None, tmp_path) == 1
    assert f"cannot start the API server on port {port}" in capsys.readouterr().err
