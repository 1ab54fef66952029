"""Example: a toy kopf operator tested against kubelocal with kubectl, no TFJob anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from polling import wait_for

HERE = Path(__file__).parent
KUBECTL = str(Path(sys.executable).parent / "kubectl")
GREETING = """
apiVersion: example.com/v1
kind: Greeting
metadata: {name: hello}
spec: {message: "hello from kubelocal"}
"""


def test_toy_operator_creates_an_owned_config_map_and_it_is_collected(kubelocal_kubeconfig: Path,
                                                                         tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(kubelocal_kubeconfig), "HOME": str(tmp_path)}

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)

    operator = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace=default", str(HERE / "greeter.py")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert kubectl("apply", "-f", "-", stdin=GREETING).returncode == 0
        cm = wait_for(lambda: kubectl("get", "configmap", "hello-greeting", "-o", "json").stdout, timeout=60,
                      what="the operator's ConfigMap")
        assert json.loads(cm)["data"] == {"message": "hello from kubelocal"}
        status = wait_for(lambda: json.loads(kubectl("get", "greeting", "hello", "-o", "json").stdout).get("status"),
                          timeout=30, what="the Greeting's status")
        assert status["greeted"] is True
        assert kubectl("delete", "greeting", "hello").returncode == 0
        wait_for(lambda: kubectl("get", "configmap", "hello-greeting").returncode != 0, timeout=30,
                 what="garbage collection of the owned ConfigMap")
    finally:
        operator.terminate()
        operator.wait(timeout=30)
