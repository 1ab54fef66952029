"""`tfjob local up --control-plane upstream` stopped by SIGINT or SIGTERM, or SIGKILLed and then run again, leaves
nothing behind: no process (etcd, kube-apiserver, its peers, pods), no network namespace of its plane, and its
etcd data and certificates only inside the workdir."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from polling import wait_for
from processes import alive, cmdline
from upstream_helpers import Kubectl

from kubelocal.network import iproute
from kubelocal.network.available import pod_network_available

pytestmark = pytest.mark.timeout(600)
TFJOB = str(Path(sys.executable).parent / "tfjob")
SLEEPER = """
apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  containers:
  - {name: main, image: python:3.11, command: [python, -c, "import time; time.sleep(600)  # upstream-cleanup"]}
"""


def start_up(workdir: Path) -> tuple[subprocess.Popen[str], str]:
    """`tfjob local up --control-plane upstream` in its own process, once its banner (returned) is out."""
    proc = subprocess.Popen([TFJOB, "local", "up", "--control-plane", "upstream", "--workdir", str(workdir),
                             "--nodes", "1x{cpu:4}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    seen = []
    deadline = time.monotonic() + 300
    while not seen or "Press Ctrl-C" not in seen[-1]:
        try:
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            proc.kill()
            raise AssertionError("no banner from tfjob local up in 300 s:\n" + "".join(seen)) from None
    return proc, "".join(seen)


def memory_cgroup(banner: str) -> Path | None:
    """The kubelet's memory cgroup the banner names (`... a cgroup per container under PATH`), if it made one."""
    match = re.search(r"a cgroup per container under (\S+)", banner)
    return Path(match[1]) if match else None


def of_workdir(workdir: Path) -> list[psutil.Process]:
    """Running processes started for this workdir: the plane's (their flags name its files) and the pods'."""
    found = []
    for proc in psutil.process_iter():
        try:
            if str(workdir) in " ".join(cmdline(proc)) or str(workdir) in proc.cwd():
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for p in alive(found) if p.pid != os.getpid()]


def plane_namespaces() -> set[str]:
    return {name for name in iproute.netns_names() if name.startswith("kubelocal-")}


def own_namespaces(pod_pid: int, new: set[str]) -> set[str]:
    """Of the namespaces made since the test began, this plane's: those of its id (`kubelocal-<id>[-<pod>]`), read
    from the pod process's own namespace, not the others that tests running beside this one made meanwhile."""
    named = subprocess.run(["ip", "netns", "identify", str(pod_pid)], capture_output=True, text=True).stdout.split()
    if not named:  # no pod network here: the pods share the host's
        return set()
    plane = "kubelocal-" + named[0].removeprefix("kubelocal-").split("-", 1)[0]
    return {name for name in new if name == plane or name.startswith(plane + "-")}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_nothing_is_left_behind(sig: signal.Signals, tmp_path: Path, upstream_binaries: dict[str, Path]) -> None:
    workdir = tmp_path / "work"
    before = plane_namespaces()
    proc, banner = start_up(workdir)
    try:
        kubectl = Kubectl(workdir / "kubeconfig")
        kubectl("apply", "-f", "-", stdin=SLEEPER)
        kubectl("wait", "pod/sleeper", "--for=jsonpath={.status.phase}=Running", "--timeout=120s")
        started = of_workdir(workdir)
        programs = {Path(cmdline(p)[0]).name for p in started if cmdline(p)}
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= programs
        pod = [p for p in started if "upstream-cleanup" in " ".join(cmdline(p))]
        assert pod, "the pod's process"
        ours = own_namespaces(pod[0].pid, plane_namespaces() - before)
        assert ours or not pod_network_available()[0], "the pod runs in a namespace of the plane's"
    finally:
        proc.send_signal(sig)
        proc.wait(timeout=120)
    if sig == signal.SIGKILL:
        wait_for(lambda: not alive(started), timeout=30, interval=0.2,
                 what=f"the guardian to kill {[' '.join(cmdline(p))[:80] for p in alive(started)]}")
        second, _ = start_up(workdir)  # a new start removes what the dead plane left in the kernel
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=120) == 0
    else:
        assert proc.returncode == 0
    assert not of_workdir(workdir)
    assert not alive(started)
    assert not ours & plane_namespaces()
    assert (workdir / "upstream" / "etcd").is_dir() and (workdir / "upstream" / "pki" / "ca.key").is_file()
    assert not Path("/var/run/kubernetes").exists(), "a certificate directory outside the workdir"
    cgroup = memory_cgroup(banner)
    assert cgroup is None or not cgroup.exists(), f"the kubelet's memory cgroup {cgroup} is left"
