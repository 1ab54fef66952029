"""Readiness probes (kubelet's prober): exec, tcpSocket and httpGet against the local process."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from kubelocal import containers as ct
from kubelocal.lifeline import Lifeline, spawn

from .container import Container, Run, killpg


async def run_probe(probe: Mapping[str, Any], container: Mapping[str, Any], spec: ct.ProcessSpec,
                    timeout: float, lifeline: Lifeline | None = None) -> bool:
    """One exec, tcpSocket or httpGet probe against the local process; grpc probes are not checked locally."""
    try:
        async with asyncio.timeout(timeout):
            if "exec" in probe:
                proc = spawn(spec.command(probe["exec"].get("command") or []), cwd=spec.cwd, env=spec.env,
                             stdout=subprocess.DEVNULL, lifeline=lifeline)
                try:
                    return await proc.wait() == 0
                finally:
                    if proc.returncode is None:
                        killpg(proc.pid, signal.SIGKILL)
                        await proc.wait()
                    if lifeline is not None:
                        lifeline.forget(proc.pid)
            if "tcpSocket" in probe:
                port = ct.probe_port(container, probe["tcpSocket"].get("port"))
                _, writer = await asyncio.open_connection(ct.LOCAL_IP, port)
                writer.close()
                return True
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = ct.probe_port(container, get.get("port"))
                url = f"{(get.get('scheme') or 'HTTP').lower()}://{ct.LOCAL_IP}:{port}{get.get('path') or '/'}"
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
                async with aiohttp.ClientSession() as session, session.get(url, headers=headers, ssl=False) as resp:
                    return 200 <= resp.status < 400
    except (TimeoutError, OSError, aiohttp.ClientError, ct.ContainerConfigError):
        return False
    return True


async def readiness_loop(c: Container, run: Run, spec: ct.ProcessSpec, lifeline: Lifeline,
                         changed: Callable[[], None]) -> None:
    """Readiness as kubelet's prober: unready until successThreshold passes, again after failureThreshold;
    `changed` is called whenever the container's readiness flips."""
    probe = c.spec["readinessProbe"]
    period = max(1, int(probe.get("periodSeconds") or 10))
    timeout = max(1, int(probe.get("timeoutSeconds") or 1))
    needed = max(1, int(probe.get("successThreshold") or 1))
    allowed = max(1, int(probe.get("failureThreshold") or 3))
    await asyncio.sleep(int(probe.get("initialDelaySeconds") or 0))
    successes = failures = 0
    while run.code is None:
        ok = await run_probe(probe, c.spec, spec, timeout, lifeline)
        successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
        ready = True if successes >= needed else False if failures >= allowed else c.probe_ready
        if ready != c.probe_ready and run.code is None:
            c.probe_ready = ready
            changed()
        await asyncio.sleep(period)
