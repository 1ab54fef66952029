"""End to end on the pod network (`tfjob local --pod-network on`): the pods' TF_CONFIG is the one rendered
for a cluster, byte for byte; real TensorFlow workers train to Succeeded over cluster DNS; a worker whose
link is cut mid-step is noticed by its peer (TensorFlow's coordination-service heartbeat timeout), the gang
restarts and resumes from the backup, and every epoch is trained.

Needs root on Linux (CI runs as root); skips elsewhere with the reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from e2e_helpers import REPO, held_example

from kubelocal.network import pod_network_available

AVAILABLE, WHY_NOT = pod_network_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"pod network unavailable: {WHY_NOT}")

TFJOB = [sys.executable, "-m", "tfjob_operator"]
DNS_LINE = "addressing: dns (pod network"


def tfjob(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TFJOB, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def pod_logs(workdir: Path, pod: str) -> list[str]:
    """Every run's log of every pod of this name (each attempt is a pod of its own uid)."""
    return [p.read_text(errors="replace") for p in sorted(workdir.glob(f"pods/default_{pod}_*/logs/*/*.log"))]


PRINT_JOB = """
apiVersion: tfjob.dev/v1
kind: TFJob
metadata: {name: addr}
spec:
  successPolicy: AllWorkers  # else worker 0's exit ends the job, and a worker 1 slow to start is deleted unprinted
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: tensorflow
            image: python:3.11
            command: ["python", "-c", "import os; print('TF_CONFIG=' + os.environ['TF_CONFIG'])"]
"""


@pytest.mark.timeout(180)
def test_local_tf_config_is_the_clusters_byte_for_byte(tmp_path: Path) -> None:
    manifest = tmp_path / "addr.yaml"
    manifest.write_text(PRINT_JOB)
    workdir = tmp_path / "work"
    result = tfjob("local", str(manifest), "--workdir", str(workdir), "--plain", "--pod-network", "on", timeout=170)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines()[0].split("] ", 1)[1].startswith(DNS_LINE)
    rendered = tfjob("render", str(manifest))
    assert rendered.returncode == 0, rendered.stderr
    expected = {}
    for doc in yaml.safe_load_all(rendered.stdout):
        if doc and doc.get("kind") == "Pod":
            env = {e["name"]: e.get("value") for e in doc["spec"]["containers"][0]["env"]}
            expected[doc["metadata"]["name"]] = env["TF_CONFIG"]
    assert set(expected) == {"addr-worker-0", "addr-worker-1"}
    assert "addr-worker-1.addr.default.svc:2222" in expected["addr-worker-0"]
    for pod, tf_config in expected.items():
        printed = [line.removeprefix("TF_CONFIG=") for log in pod_logs(workdir, pod) for line in log.splitlines()
                   if line.startswith("TF_CONFIG=")]
        assert printed == [tf_config], (pod, printed)


@pytest.mark.timeout(180)
def test_loopback_fallback_still_addresses_peers_by_port(tmp_path: Path) -> None:
    manifest = tmp_path / "addr.yaml"
    manifest.write_text(PRINT_JOB)
    workdir = tmp_path / "work"
    result = tfjob("local", str(manifest), "--workdir", str(workdir), "--plain", "--pod-network", "off", timeout=170)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines()[0].split("] ", 1)[1] == (
        "addressing: loopback (127.0.0.1, a port per pod; pod network off)")
    printed = [json.loads(line.removeprefix("TF_CONFIG=")) for log in pod_logs(workdir, "addr-worker-0")
               for line in log.splitlines() if line.startswith("TF_CONFIG=")]
    assert len(printed) == 1
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in printed[0]["cluster"]["worker"]), printed


_TF_STAMP = re.compile(r"^[EWI]\d{4} \d\d:\d\d:(\d+\.\d+) .*StartAbort", re.MULTILINE)


@pytest.mark.timeout(480)
def test_mnist_trains_over_the_pod_network_and_a_partitioned_worker_is_noticed_and_the_gang_resumes(
        tmp_path: Path) -> None:
    # Worker 1 of the first attempt holds 5 steps into epoch 2 (20 steps an epoch), its peer waiting for it in the
    # next collective: the cut after epoch 1 lands mid-training however fast the machine runs.
    manifest = held_example("mnist-cpu", tmp_path / "manifest", "25 task=worker:1 attempt=0")
    result = tfjob("local", str(manifest), "--workdir", str(tmp_path), "--plain", "--pod-network", "on",
                   "--partition-worker-after", "0")
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert out.splitlines()[0].split("] ", 1)[1].startswith(DNS_LINE)
    assert "TFJob mnist-cpu: Succeeded" in out
    cut = re.search(r"cut mnist-cpu-worker-1's network link at (\S+)Z", out)
    assert cut, out[-3000:]
    assert "2 attempts (1 gang restarts)" in out
    # The peer that kept its link noticed the silent one: its collective aborted, it exited "peer lost".
    lost = [log for log in pod_logs(tmp_path, "mnist-cpu-worker-0") if "lost a peer" in log]
    assert len(lost) == 1, "worker 0's first attempt should end with 'lost a peer'"
    noticed = float(_TF_STAMP.findall(lost[0])[0])  # TensorFlow's stamp: seconds since the epoch
    detection = noticed - datetime.fromisoformat(cut[1] + "+00:00").timestamp()
    print(f"peer noticed the partition after {detection:.1f}s")
    assert 0 < detection < 60
    # the example trains over cluster DNS to its accuracy, every epoch, the second attempt from the backup
    metrics = json.loads((tmp_path / "volumes/default/tfjob-shared/mnist-cpu/result.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["resumed_from_epoch"] is not None and metrics["resumed_from_epoch"] >= 1
    assert [h["epoch"] for h in metrics["history"]] == list(range(1, 7))
    assert metrics["test_accuracy"] >= 0.9
