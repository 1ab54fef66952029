"""`tfjob local` leaves nothing behind: stopped by SIGTERM or SIGHUP as by Ctrl-C, and even when SIGKILLed
the operator and every pod it started exit by themselves (they die with it)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from e2e_helpers import REPO
from polling import wait_for
from processes import alive, cmdline

SLEEPER = "import time; time.sleep(600)  # tfjob-local-signals"
#: A pod that takes its whole grace period to stop, so the clean-up after a stop signal lasts a while.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)  # tfjob-local-signals"


def job(code: str) -> dict[str, Any]:
    return {
        "apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "sleepers"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "python:3.11", "command": ["python", "-c", code],
                            "resources": {"requests": {"cpu": "100m"}}}]}}}}},
    }


def start_with_pods_running(tmp_path: Path, code: str = SLEEPER) -> tuple[subprocess.Popen[str], list[psutil.Process]]:
    """`tfjob local` running the two-pod job; returns it and every process it started (operator, pods)."""
    manifest = tmp_path / "sleepers.yaml"
    manifest.write_text(json.dumps(job(code)))
    local = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "local", str(manifest), "--plain",
                              "--workdir", str(tmp_path / "work")], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    me = psutil.Process(local.pid)

    def started() -> list[psutil.Process]:
        kids = me.children(recursive=True)
        pods = [p for p in kids if "tfjob-local-signals" in " ".join(cmdline(p))]
        operators = [p for p in kids if "operator" in cmdline(p)]
        return kids if len(pods) == 2 and operators else []

    try:
        return local, wait_for(started, timeout=120, interval=0.2, what="the operator and both pods running")
    except BaseException:
        local.kill()
        raise


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_stops_the_operator_and_every_pod_then_exits(tmp_path: Path, sig: signal.Signals) -> None:
    local, children = start_with_pods_running(tmp_path)
    local.send_signal(sig)
    _, err = local.communicate(timeout=90)
    assert local.returncode == 128 + sig
    assert "stopping the operator and every pod" in err
    assert "Traceback" not in err
    assert alive(children) == []


@pytest.mark.timeout(180)
def test_when_tfjob_local_is_sigkilled_its_operator_and_pods_exit_by_themselves(tmp_path: Path) -> None:
    local, children = start_with_pods_running(tmp_path)
    local.kill()
    local.wait(timeout=30)
    wait_for(lambda: not alive(children), timeout=15, interval=0.2,
             what=f"every process of the run to exit: {[p.pid for p in alive(children)]}")


@pytest.mark.timeout(180)
def test_a_second_stop_signal_exits_at_once_and_still_leaves_nothing_behind(tmp_path: Path) -> None:
    local, children = start_with_pods_running(tmp_path, STUBBORN)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(local.stderr or []), daemon=True)
    reader.start()
    local.send_signal(signal.SIGTERM)
    wait_for(lambda: any("stopping the operator" in line for line in lines), timeout=30,
             what="tfjob local to start stopping")
    local.send_signal(signal.SIGTERM)
    assert local.wait(timeout=30) == 128 + signal.SIGTERM
    reader.join(timeout=10)
    assert any("SIGTERM again: exiting now" in line for line in lines)
    wait_for(lambda: not alive(children), timeout=15, interval=0.2, what="every process of the run to exit")
