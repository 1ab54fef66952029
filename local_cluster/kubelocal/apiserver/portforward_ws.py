"""pods/portforward over the WebSocket channel protocol (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`,
or no subprotocol: binary), as kubelet serves it behind kube-apiserver; the official Python client uses it.

The ports come with the request (`?ports=8080,9090`, repeatable). Port i gets two channels: data 2i and
error 2i+1; the first message on each carries the port number as 2 little-endian bytes. The server connects
to each port at once and copies the data channel to and from it; a port it cannot reach gets kubelet's
message on its error channel. There is no per-channel close: a port is done when the pod's side ends, and
the socket closes when every port is done or the client leaves. Binary messages are one channel byte and
data; base64 ones are text, the channel as an ASCII digit and the data base64-encoded. The pod's port N is
127.0.0.1:N (a local pod is a set of processes on this host), never another address.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from .errors import ApiError

BINARY, BASE64 = "v4.channel.k8s.io", "v4.base64.channel.k8s.io"
PROTOCOLS = (BINARY, BASE64)
LOCAL_IP = "127.0.0.1"


@dataclass(frozen=True)
class PodAddress:
    """Where a pod's ports are: its IP and how to connect there (None: from this host, as to the loopback where
    pods share this machine's network; a kubelet on a pod network connects from inside the plane's namespace)."""

    ip: str = LOCAL_IP
    connect: Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] | None = None

    async def open(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await (self.connect or asyncio.open_connection)(self.ip, port)


def requested_ports(values: list[str]) -> list[int]:
    """`ports` as kubelet parses its `port`: comma-separated, repeatable, each 1..65535; a 400 names the value."""
    if not values:
        raise ApiError(400, 'query parameter "ports" is required', reason="BadRequest")
    ports: list[int] = []
    for value in values:
        for part in value.split(","):
            try:
                port = int(part)
            except ValueError:
                raise ApiError(400, f'unable to parse "{value}" as a port', reason="BadRequest") from None
            if not 0 < port < 65536:
                raise ApiError(400, f'port "{value}" must be > 0 and < 65536', reason="BadRequest")
            ports.append(port)
    return ports


class ChannelSocket:
    """The server end of a v4 channel WebSocket: frames out in order, (channel, data) in."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.base64 = ws.ws_protocol == BASE64
        self._lock = asyncio.Lock()

    async def send(self, channel: int, data: bytes) -> None:
        async with self._lock:
            if self.ws.closed:
                return
            with contextlib.suppress(ConnectionResetError):
                if self.base64:
                    await self.ws.send_str(str(channel) + base64.b64encode(data).decode())
                else:
                    await self.ws.send_bytes(bytes([channel]) + data)

    def decode(self, msg: Any) -> tuple[int, bytes] | None:
        if msg.type is WSMsgType.BINARY and msg.data:
            return msg.data[0], msg.data[1:]
        if msg.type is WSMsgType.TEXT and msg.data:
            text: str = msg.data
            if self.base64 and text[0].isdigit():
                return int(text[0]), base64.b64decode(text[1:])
            raw = text.encode()
            return raw[0], raw[1:]
        return None


class Port:
    """One forwarded port: input from the client queued until the pod's port is connected."""

    def __init__(self, index: int, number: int) -> None:
        self.data_channel, self.error_channel = 2 * index, 2 * index + 1
        self.number = number
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()

    async def forward(self, sock: ChannelSocket, pod: Mapping[str, Any], address: PodAddress) -> None:
        meta = pod["metadata"]
        try:
            reader, writer = await address.open(self.number)
        except OSError as e:
            message = (
                f"error forwarding port {self.number} to pod {meta['name']}, uid {meta.get('uid', '')}: "
                f"failed to connect to {address.ip}:{self.number}: {(e.strerror or str(e)).lower()}"
            )
            await sock.send(self.error_channel, message.encode())
            return

        async def to_pod() -> None:
            while True:
                writer.write(await self.inbox.get())
                await writer.drain()

        feeding = asyncio.create_task(to_pod())
        try:
            while chunk := await reader.read(65536):
                await sock.send(self.data_channel, chunk)
        except OSError:
            pass
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await feeding
            writer.close()


async def serve(request: web.Request, pod: Mapping[str, Any], record: Any,
                address: PodAddress = PodAddress()) -> web.WebSocketResponse:
    """The session: port frames first, then one forwarding task per port until all end or the client leaves."""
    ports = [Port(i, n) for i, n in enumerate(requested_ports(request.query.getall("ports", [])))]
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True, max_msg_size=0)
    await ws.prepare(request)
    record(101)
    sock = ChannelSocket(ws)
    for port in ports:
        number = struct.pack("<H", port.number)
        await sock.send(port.data_channel, number)
        await sock.send(port.error_channel, number)
    by_channel = {p.data_channel: p for p in ports}

    async def forward_all() -> None:
        await asyncio.gather(*(p.forward(sock, pod, address) for p in ports))

    forwards = asyncio.create_task(forward_all())

    async def read_client() -> None:
        async for msg in ws:
            decoded = sock.decode(msg)
            if decoded is not None and decoded[0] in by_channel and decoded[1]:
                by_channel[decoded[0]].inbox.put_nowait(decoded[1])

    reading = asyncio.create_task(read_client())
    try:
        await asyncio.wait([reading, forwards], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reading, forwards):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await ws.close()
    return ws
