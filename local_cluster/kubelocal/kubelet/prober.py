"""Readiness probes (kubelet's prober): exec, tcpSocket and httpGet against the pod (the host's loopback, or the
pod's IP on the pod network, dialled from the plane's namespace)."""

from __future__ import annotations

import asyncio
import signal
import ssl
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from kubelocal import containers as ct
from kubelocal.lifeline import Lifeline, spawn
from kubelocal.nodes import PROBE_USER_AGENT

from .container import Container, Run, killpg

Dial = Callable[[str, int, float], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@dataclass(frozen=True)
class ProbeTarget:
    """The pod's address, and how to connect to it when the host cannot (None: a plain connection)."""

    ip: str
    dial: Dial | None = None

    async def connect(self, port: int, timeout: float,
                      tls: bool = False) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.dial is None:
            context = _insecure() if tls else None
            return await asyncio.open_connection(self.ip, port, ssl=context)
        reader, writer = await self.dial(self.ip, port, timeout)
        if tls:
            await writer.start_tls(_insecure(), server_hostname=self.ip)
        return reader, writer


def _insecure() -> ssl.SSLContext:
    """kubelet's HTTPS probes skip certificate verification."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _http_get(target: ProbeTarget, port: int, get: Mapping[str, Any], timeout: float) -> bool:
    """One GET over a connection of our own (the pod network's dial); success is a 2xx or 3xx status."""
    tls = (get.get("scheme") or "HTTP").upper() == "HTTPS"
    reader, writer = await target.connect(port, timeout, tls)
    try:
        headers = {"Host": f"{target.ip}:{port}", "User-Agent": PROBE_USER_AGENT, "Connection": "close"}
        headers.update({h["name"]: h["value"] for h in get.get("httpHeaders") or []})
        request = f"GET {get.get('path') or '/'} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write((request + "\r\n").encode())
        await writer.drain()
        parts = (await reader.readline()).split()
        return len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 400
    finally:
        writer.close()


async def run_probe(probe: Mapping[str, Any], container: Mapping[str, Any], spec: ct.ProcessSpec,
                    timeout: float, lifeline: Lifeline | None = None, target: ProbeTarget | None = None) -> bool:
    """One exec, tcpSocket or httpGet probe against the pod; grpc probes are not checked locally."""
    target = target or ProbeTarget(ct.LOCAL_IP)
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
                _, writer = await target.connect(port, timeout)
                writer.close()
                return True
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = ct.probe_port(container, get.get("port"))
                if target.dial is not None:
                    return await _http_get(target, port, get, timeout)
                url = f"{(get.get('scheme') or 'HTTP').lower()}://{ct.LOCAL_IP}:{port}{get.get('path') or '/'}"
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
                async with aiohttp.ClientSession() as session, session.get(url, headers=headers, ssl=False) as resp:
                    return 200 <= resp.status < 400
    except (TimeoutError, OSError, aiohttp.ClientError, ct.ContainerConfigError):
        return False
    return True


async def readiness_loop(c: Container, run: Run, spec: ct.ProcessSpec, lifeline: Lifeline,
                         changed: Callable[[], None], target: ProbeTarget | None = None) -> None:
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
        ok = await run_probe(probe, c.spec, spec, timeout, lifeline, target)
        successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
        ready = True if successes >= needed else False if failures >= allowed else c.probe_ready
        if ready != c.probe_ready and run.code is None:
            c.probe_ready = ready
            changed()
        await asyncio.sleep(period)
