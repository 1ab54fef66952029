"""pods/exec and pods/attach over WebSocket, as kubectl 1.30+ speaks them (`v5.channel.k8s.io`, then
`v4.channel.k8s.io`; the shape of kube-apiserver's wsstream and kubelet's remotecommand server).

Each binary message is one byte of channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize) followed
by data (a client may send text messages of the same bytes, as kube-apiserver reads either); v5 adds
message `255 <channel>`: the peer closed that channel (kubectl sends it for stdin at EOF). The error
channel carries the exit as a v1 Status just before the server closes the socket: `Success`, or
`Failure`/`NonZeroExitCode` with the code in `details.causes` (kubectl exits with it).
SPDY is not served: kubectl only falls back to it when the WebSocket upgrade is refused.

The command runs as a child of the API server in the container's process environment (env, work
dir, mapped mount paths; `python` means this interpreter), as the process kubelet starts containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from .codec import truthy
from .errors import ApiError
from .faults import RECORD, LogSource
from .portforward_ws import PodAddress

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE = 255  # v5: "this channel is closed" (the next byte names it)


class ProcessEnv(Protocol):
    """A container's process environment (kubelocal.containers.ProcessSpec satisfies it)."""

    @property
    def env(self) -> dict[str, str]: ...

    @property
    def cwd(self) -> Path: ...

    def command(self, command: list[Any]) -> list[str]: ...


class ExecSource(Protocol):
    """Where pods/exec finds a running container's environment (the kubelet); KeyError when there is none."""

    def exec_spec(self, namespace: str, pod: str, container: str | None) -> ProcessEnv: ...

    def pod_address(self, namespace: str, pod: str) -> PodAddress:
        """Where port-forward reaches the pod's ports (its own IP on the pod network); KeyError when not running."""
        ...


def exit_status(code: int) -> dict[str, Any]:
    """The Status the error channel carries when the command ends (what kubelet sends)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def failure_status(message: str) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message}


def is_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def check_upgrade(request: web.Request) -> None:
    """kube-apiserver refuses a non-WebSocket exec it cannot upgrade; we serve WebSocket only, and say so."""
    if not is_upgrade(request):
        raise ApiError(
            400,
            "Upgrade request required: this API server serves pods/exec, pods/attach and pods/portforward over "
            "WebSocket only (kubectl 1.30+ uses it by default; SPDY is not served)",
            reason="BadRequest",
        )


def container_of(pod: Mapping[str, Any], name: str | None) -> str:
    containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    every = containers + [c["name"] for c in (pod.get("spec") or {}).get("initContainers") or []]
    pod_name = pod["metadata"]["name"]
    if not name:
        if len(containers) != 1:
            raise ApiError(
                400, f"a container name must be specified for pod {pod_name}, choose one of: [{' '.join(containers)}]"
            )
        return containers[0]
    if name not in every:
        raise ApiError(400, f"container {name} is not valid for pod {pod_name}")
    return name


class Channels:
    """The server end of a v4/v5 channel WebSocket."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.v5 = ws.ws_protocol == PROTOCOLS[0]

    async def send(self, channel: int, data: bytes) -> None:
        if not self.ws.closed:
            await self.ws.send_bytes(bytes([channel]) + data)

    async def finish(self, status: Mapping[str, Any]) -> None:
        """Send the exit Status on the error channel and close (normal closure)."""
        with contextlib.suppress(ConnectionResetError):
            await self.send(ERROR, json.dumps(status).encode())
            await self.ws.close()

    async def incoming(self) -> AsyncIterator[tuple[int, bytes]]:
        """(channel, data) per message; (CLOSE, channel) when the peer closes a channel; ends at socket close."""
        async for msg in self.ws:
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT) or not msg.data:
                continue
            # A text message is channel and data as UTF-8 (the official Python client writes str stdin so).
            data: bytes = msg.data.encode() if msg.type is WSMsgType.TEXT else msg.data
            if data[0] == CLOSE and self.v5 and len(data) > 1:
                yield CLOSE, data[1:2]
            else:
                yield data[0], data[1:]


async def accept(request: web.Request) -> Channels:
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True, max_msg_size=0)
    await ws.prepare(request)
    request[RECORD](101)
    return Channels(ws)


async def serve_exec(request: web.Request, pod: Mapping[str, Any], source: ExecSource | None) -> web.StreamResponse:
    """GET/POST pods/{name}/exec?command=...&stdin=&stdout=&stderr=&tty=&container= (WebSocket)."""
    query = request.query
    command = query.getall("command", [])
    if not command:
        raise ApiError(400, "you must specify at least 1 command", reason="BadRequest")
    check_upgrade(request)
    meta = pod["metadata"]
    container = container_of(pod, query.get("container"))
    if source is None:
        raise ApiError(400, f'container "{container}" in pod "{meta["name"]}" is waiting to start', reason="BadRequest")
    try:
        spec = source.exec_spec(meta.get("namespace", "default"), meta["name"], container)
    except KeyError as e:
        raise ApiError(400, f"unable to upgrade connection: {e.args[0]}", reason="BadRequest") from None
    want_in, want_out, want_err = (truthy(query.get(k)) for k in ("stdin", "stdout", "stderr"))
    channels = await accept(request)
    try:
        proc = await asyncio.create_subprocess_exec(
            *spec.command(command),
            cwd=spec.cwd,
            env=spec.env,
            stdin=subprocess.PIPE if want_in else subprocess.DEVNULL,
            stdout=subprocess.PIPE if want_out else subprocess.DEVNULL,
            # Like a container runtime without a TTY: stderr is its own stream (dropped when not asked for).
            stderr=subprocess.PIPE if want_err else subprocess.DEVNULL,
        )
    except OSError as e:
        detail = e.strerror or str(e)
        await channels.finish(
            failure_status(f'failed to exec in container: exec: "{command[0]}": {detail.lower()}: unknown')
        )
        return channels.ws

    async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            await channels.send(channel, chunk)

    async def feed() -> None:
        stdin = proc.stdin
        async for channel, data in channels.incoming():
            if stdin is None:
                continue
            if channel == STDIN:
                stdin.write(data)
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    await stdin.drain()
            elif channel == CLOSE and data == bytes([STDIN]):
                stdin.close()
        # The client went away (or closed the socket): the command loses its input.
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    feeder = asyncio.create_task(feed())
    try:
        await asyncio.gather(pump(proc.stdout, STDOUT), pump(proc.stderr, STDERR))
        code = await proc.wait()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    await channels.finish(exit_status(code if code >= 0 else 128 - code))
    feeder.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
        await feeder
    return channels.ws


async def serve_attach(request: web.Request, pod: Mapping[str, Any], source: LogSource | None) -> web.StreamResponse:
    """pods/{name}/attach (WebSocket): the running container's output from now on, until it ends.

    Containers here read no stdin (the process kubelet starts them with none), so stdin sent to an
    attach is dropped; resize is ignored (no TTY)."""
    check_upgrade(request)
    meta = pod["metadata"]
    container = container_of(pod, request.query.get("container"))
    if source is None:
        raise ApiError(400, f'container "{container}" in pod "{meta["name"]}" is waiting to start', reason="BadRequest")
    stream = source.stream(
        meta.get("namespace", "default"), meta["name"], container, follow=True, tail_lines=0, previous=False
    )
    channels = await accept(request)

    async def drain_input() -> None:
        async for _ in channels.incoming():
            pass

    reader = asyncio.create_task(drain_input())
    try:
        async for chunk in stream:
            await channels.send(STDOUT, chunk)
            if reader.done():  # the client detached
                break
    except KeyError as e:
        await channels.finish(failure_status(str(e.args[0])))
        return channels.ws
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()  # type: ignore[attr-defined]
    await channels.finish(exit_status(0))
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
        await reader
    return channels.ws
