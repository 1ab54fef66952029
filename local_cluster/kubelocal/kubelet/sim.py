"""Simulated pods, as kwok's stages: on a node labelled `kubelocal.dev/sim=true` a pod runs no process.

Its containers go from waiting (ContainerCreating) to running after the pod's start delay, then each ends
after its duration with its exit code, and the restartPolicy applies as for a process; the status reports
states, exit codes, reasons and times as a real kubelet does. The pod's annotations set the plan for all its
containers, a container's own env (a literal `value`) overrides them for that container:

| annotation                       | env                          | default                |
|----------------------------------|------------------------------|------------------------|
| `kubelocal.dev/sim-start-delay`  | `KUBELOCAL_SIM_START_DELAY`  | 0: running at once     |
| `kubelocal.dev/sim-duration`     | `KUBELOCAL_SIM_DURATION`     | none: runs until deleted |
| `kubelocal.dev/sim-exit-code`    | `KUBELOCAL_SIM_EXIT_CODE`    | 0                      |

Delays and durations are simulated seconds (`90`, `1.5`, `90s`, `5m`, `1h30m`); the kubelet's `sim_speed`
simulated seconds pass per wall second. Init containers take their env only (default: done at once, exit 0).
A value that cannot be read leaves the pod Pending, its containers `CreateContainerConfigError` with a
message naming the annotation or env variable.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubelocal.kubeclient import now_rfc3339, wait_event

from .container import Container, Run
from .pod_worker import KubeletHost, PodWorker
from .rules import terminated_reason

START_DELAY = "kubelocal.dev/sim-start-delay"
DURATION = "kubelocal.dev/sim-duration"
EXIT_CODE = "kubelocal.dev/sim-exit-code"
#: The env variable that sets each annotation's value for one container.
ENV = {START_DELAY: "KUBELOCAL_SIM_START_DELAY", DURATION: "KUBELOCAL_SIM_DURATION",
       EXIT_CODE: "KUBELOCAL_SIM_EXIT_CODE"}

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|h|m|s))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class SimConfigError(ValueError):
    """A simulation setting that cannot be read; the message names where it was set."""


@dataclass(frozen=True)
class SimPlan:
    """One container's simulated run: how long (simulated seconds; None: until deleted) and how it ends."""

    duration: float | None = None
    exit_code: int = 0


def parse_seconds(where: str, value: str) -> float:
    """Seconds from `90`, `1.5`, `90s`, `5m` or `1h30m`; SimConfigError naming `where` otherwise."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        if not _DURATION.match(text):
            raise SimConfigError(f"{where}: {value!r} is not a duration (seconds, or e.g. 90s, 5m, 1h30m)") from None
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))
    if not seconds >= 0 or seconds == float("inf"):
        raise SimConfigError(f"{where}: {value!r} must be a finite, non-negative duration")
    return seconds


def parse_exit_code(where: str, value: str) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) > 255:
        raise SimConfigError(f"{where}: {value!r} must be a whole number from 0 to 255")
    return int(text)


def _setting(pod: Mapping[str, Any], container: Mapping[str, Any] | None, key: str) -> tuple[str, str] | None:
    """The value of one setting and where it was found: the container's env first, then the pod's annotation."""
    if container is not None:
        for var in container.get("env") or []:
            if var.get("name") == ENV[key] and "value" in var:
                return f'container "{container.get("name")}" env {ENV[key]}', str(var["value"])
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if key in annotations:
        return f"pod annotation {key}", str(annotations[key])
    return None


def start_delay(pod: Mapping[str, Any]) -> float:
    """Simulated seconds from the pod's first sync until its containers start (its annotation, else the first
    app container's env)."""
    containers = (pod.get("spec") or {}).get("containers") or [None]
    found = _setting(pod, None, START_DELAY) or _setting(pod, containers[0], START_DELAY)
    return parse_seconds(*found) if found else 0.0


def container_plan(pod: Mapping[str, Any], container: Mapping[str, Any], *, init: bool = False) -> SimPlan:
    """How the container's runs go: its env, else (app containers) the pod's annotations, else the defaults."""
    scope: Mapping[str, Any] = {} if init else pod
    duration = _setting(scope, container, DURATION)
    code = _setting(scope, container, EXIT_CODE)
    return SimPlan(duration=parse_seconds(*duration) if duration else (0.0 if init else None),
                   exit_code=parse_exit_code(*code) if code else 0)


class SimPod(PodWorker):
    """A pod on a simulated node: containers whose runs are timers, not processes."""

    def __init__(self, kubelet: KubeletHost, pod: dict[str, Any], speed: float) -> None:
        super().__init__(kubelet, pod)
        #: Simulated seconds per wall second.
        self.speed = speed
        self.plans: dict[str, SimPlan] = {}

    async def _prepare(self) -> bool:
        try:
            delay = start_delay(self.pod)
            self.plans = {c.name: container_plan(self.pod, c.spec, init=c.init) for c in self.all_containers}
        except SimConfigError as exc:
            for c in self.all_containers:
                c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
            self.mark()
            await self.kubelet.post_event(self.pod, "Warning", "Failed", f"Error: {exc}")
            return False
        if self.init_containers:
            for c in self.containers:
                c.waiting_reason = "PodInitializing"
        if delay > 0 and await wait_event(self.stopping, delay / self.speed):
            return False
        return not self.stopping.is_set()

    def _start_run(self, c: Container) -> Run:
        restart = len(c.runs)
        # No log is ever written: `kubectl logs` reads an empty one.
        pod_dir = self.kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid}"
        log_path = pod_dir / "logs" / c.name / f"{restart}.log"
        run = Run(restart=restart, log_path=log_path, started_at=now_rfc3339(),
                  runtime_id=f"sim://{self.uid}/{c.name}/{restart}")
        c.runs.append(run)
        self.mark()
        return run

    async def _await_run(self, c: Container, run: Run) -> int:
        duration = self.plans[c.name].duration
        if duration is None:
            await run.exited.wait()
        elif not await wait_event(run.exited, duration / self.speed):
            _end(run, self.plans[c.name].exit_code)
        return run.code if run.code is not None else 0

    def kill(self, run: Run, sig: int) -> None:
        _end(run, 128 + sig, run.forced_reason)

    async def _stop_containers(self, grace: float) -> None:
        for c in self.all_containers:  # a simulated process stops as soon as it is asked to
            if c.running is not None:
                self.kill(c.running, signal.SIGTERM)

    def _kill_containers(self) -> None:
        for c in self.all_containers:
            if c.running is not None:
                self.kill(c.running, signal.SIGKILL)


def _end(run: Run, code: int, reason: str | None = None) -> None:
    if run.code is not None:
        return
    run.code, run.finished_at = code, now_rfc3339()
    run.reason = reason or terminated_reason(code)
    run.message = run.forced_message if reason else None
    run.exited.set()
