"""Launch real `python -m tfjob_worker` processes with TF_CONFIG on loopback ports, and clean them up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_ports

REPO = Path(__file__).resolve().parents[2]


def loopback_cluster(**counts: int) -> dict[str, list[str]]:
    """{'chief': [...], 'worker': [...], ...} with fresh loopback addresses."""
    ports = iter(free_ports(sum(counts.values())))
    return {role: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for role, n in counts.items() if n}


@dataclass
class Proc:
    """One worker process and its log files."""

    name: str
    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def describe(self) -> str:
        tail = "\n".join(self.stderr.splitlines()[-25:])
        return f"--- {self.name} rc={self.popen.poll()}\nstdout:\n{self.stdout}\nstderr (tail):\n{tail}"


@dataclass
class Launcher:
    """Starts worker processes into a temp dir; `close()` kills any still running."""

    tmp: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, args: list[str], tf_config: dict[str, object] | None = None,
              env: dict[str, str] | None = None) -> Proc:
        full_env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")}
        full_env["PYTHONPATH"] = os.pathsep.join([str(REPO / "worker_image"), str(REPO / "tests" / "worker")])
        full_env["PYTHONUNBUFFERED"] = "1"
        if tf_config is not None:
            full_env["TF_CONFIG"] = json.dumps(tf_config)
        full_env.update(env or {})
        out, err = self.tmp / f"{name}.out", self.tmp / f"{name}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            popen = subprocess.Popen([sys.executable, "-m", "tfjob_worker", *args], stdout=o, stderr=e,
                                     env=full_env, cwd=self.tmp, start_new_session=True)
        proc = Proc(name, popen, out, err)
        self.procs.append(proc)
        return proc

    def start_cluster(self, cluster: dict[str, list[str]], args: list[str],
                      extra: Callable[[str, int], list[str]] | None = None, tag: str = "",
                      env: dict[str, str] | None = None) -> dict[str, Proc]:
        """One process per task in `cluster`; keys like 'worker0'."""
        started = {}
        for role, tasks in cluster.items():
            for index in range(len(tasks)):
                config = {"cluster": cluster, "task": {"type": role, "index": index}}
                more = extra(role, index) if extra else []
                started[f"{role}{index}"] = self.start(f"{tag}{role}{index}", [*args, *more], config, env)
        return started

    def close(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=30)

    def dump(self) -> str:
        return "\n".join(p.describe() for p in self.procs)



def line(text: str, prefix: str) -> str | None:
    """The last stdout line starting with prefix."""
    found = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    return found[-1] if found else None


def fields(progress_line: str) -> dict[str, str]:
    """key=value pairs of a progress line."""
    return dict(part.split("=", 1) for part in progress_line.split() if "=" in part)
