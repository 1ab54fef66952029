"""`tfjob local up --kubeflow` plus the operator serving Kubeflow's API, as a user starts them (subprocesses), for
the tests that drive it with Kubeflow's own tools (kubectl manifests, the training SDK)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from operator_harness import KUBECTL, Operator
from polling import wait_for

from tfjob_operator.client.local.processes import stop_process


@dataclass
class KubeflowLocal:
    kubeconfig: Path
    workdir: Path
    operator: Operator

    def kubectl(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args], capture_output=True,
                              text=True, timeout=timeout, check=True)
        return done.stdout


@contextlib.contextmanager
def kubeflow_local(workdir: Path, nodes: str = "1x{cpu:64,memory:128Gi}") -> Iterator[KubeflowLocal]:
    """The local control plane with Kubeflow's TFJob CRD and the operator with TFJOB_KUBEFLOW_API=all. The
    operator runs on the host (operator_harness), which reaches no pod IP of a pod network: the plane keeps loopback
    ports (`--pod-network off`), which the operator follows."""
    kubeconfig = workdir / "kubeconfig"
    log = (workdir / "local-up.log").open("wb")
    up = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "local", "up", "--kubeflow", "--nodes", nodes,
                           "--pod-network", "off", "--workdir", str(workdir / "cluster"),
                           "--kubeconfig", str(kubeconfig)],
                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        wait_for(lambda: "Press Ctrl-C" in (workdir / "local-up.log").read_text() or up.poll() is not None, 120,
                 what="tfjob local up")
        assert up.poll() is None, (workdir / "local-up.log").read_text()
        operator = Operator(kubeconfig, workdir / "operator.log", TFJOB_KUBEFLOW_API="all").start()
        try:
            yield KubeflowLocal(kubeconfig, workdir, operator)
        finally:
            operator.stop()
    finally:
        stop_process(up, 30, signal.SIGINT)
