"""pods/portforward as kubectl 1.31+ speaks it: SPDY/3.1 tunnelled over a WebSocket
(subprotocol `SPDY/3.1+portforward.k8s.io`; each binary message carries bytes of the SPDY session).
A client that asks for the v4 channel protocol (the official Python client) is served by portforward_ws.

The port-forward protocol (`portforward.k8s.io`) over SPDY: for each connection it accepts locally,
kubectl opens two streams with headers `streamtype: error|data`, `port: N`, `requestid: R`. The server
replies to each stream, connects the data stream to the pod's port and copies both ways; an error
(the port refuses) is written on the error stream as text. Where the pod's ports are is the caller's
`PodAddress`: by default 127.0.0.1 (pods sharing this host's network); the kubelet API gives the pod's
own IP on the pod network, reached from inside the plane's namespace.

Only what port-forward needs of SPDY/3.1 is here: SYN_STREAM/SYN_REPLY with zlib-compressed header
blocks (the spec's dictionary), DATA with FIN, RST_STREAM, PING echo, GOAWAY; SETTINGS and
WINDOW_UPDATE are read and ignored (kubectl's spdystream does no flow control that needs them).
Plain SPDY (HTTP `Upgrade: SPDY/3.1`) is not served: kubectl only falls back to it when the
WebSocket upgrade is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from . import portforward_ws
from .errors import ApiError
from .faults import RECORD
from .remotecommand import check_upgrade

log = logging.getLogger(__name__)

PROTOCOL = "SPDY/3.1+portforward.k8s.io"

# SPDY/3 control frame types and flags.
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
RST_CANCEL = 5

#: The SPDY/3 header-compression dictionary (spec section 2.6.10.1): these names, each prefixed by its
#: length as a 32-bit big-endian integer (one of them, "200 OK", holds a space), then the tail verbatim.
_DICT_WORDS = tuple(
    word.replace("_", " ")
    for word in (
        "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
        "allow authorization cache-control connection content-base content-encoding content-language content-length "
        "content-location content-md5 content-range content-type date etag expect expires from host if-match "
        "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
        "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
        "user-agent vary via warning www-authenticate method get status 200_OK version HTTP/1.1 url public set-cookie "
        "keep-alive origin"
    ).split()
)
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
ZDICT = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICT_WORDS) + _DICT_TAIL.encode()


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """An uncompressed SPDY/3 header block."""
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        n, v = name.lower().encode(), value.encode()
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, str]:
    (count,) = struct.unpack_from(">I", block, 0)
    pos, out = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from(">I", block, pos)
        name = block[pos + 4 : pos + 4 + n].decode()
        pos += 4 + n
        (m,) = struct.unpack_from(">I", block, pos)
        out[name] = block[pos + 4 : pos + 4 + m].decode()
        pos += 4 + m
    return out


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8003, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


@dataclass
class Forward:
    """One forwarded connection: its error and data streams and the socket to the pod's port."""

    port: int
    error_stream: int | None = None
    data_stream: int | None = None
    writer: asyncio.StreamWriter | None = None
    pending: list[bytes] = field(default_factory=list)
    pending_fin: bool = False


class SpdySession:
    """The server end of a SPDY/3.1 session that serves portforward.k8s.io streams."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], pod_name: str,
                 address: portforward_ws.PodAddress = portforward_ws.PodAddress()) -> None:
        self._send = send
        self.pod_name = pod_name
        self.address = address
        self._buf = b""
        self._inflate = zlib.decompressobj(zdict=ZDICT)
        self._deflate = zlib.compressobj(zdict=ZDICT)
        self._forwards: dict[str, Forward] = {}
        self._by_stream: dict[int, Forward] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self.closed = False

    async def send(self, frame: bytes) -> None:
        async with self._lock:  # the compressor's state and frame order must follow one sequence
            if not self.closed:
                await self._send(frame)

    async def reply(self, stream_id: int) -> None:
        async with self._lock:
            block = self._deflate.compress(encode_headers({})) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
            if not self.closed:
                await self._send(control_frame(SYN_REPLY, 0, struct.pack(">I", stream_id) + block))

    async def feed(self, data: bytes) -> None:
        """Bytes from the client; handles every complete frame."""
        self._buf += data
        while len(self._buf) >= 8:
            (length,) = struct.unpack_from(">I", self._buf, 4)
            length &= 0xFFFFFF
            if len(self._buf) < 8 + length:
                return
            head, payload = self._buf[:8], self._buf[8 : 8 + length]
            self._buf = self._buf[8 + length :]
            flags = head[4]
            if head[0] & 0x80:
                (kind,) = struct.unpack_from(">H", head, 2)
                await self._control(kind, flags, payload)
            else:
                (stream_id,) = struct.unpack_from(">I", head, 0)
                await self._data(stream_id, flags, payload)

    async def _control(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == SYN_STREAM:
            (stream_id,) = struct.unpack_from(">I", payload, 0)
            headers = decode_headers(self._inflate.decompress(payload[10:]))
            await self._open(stream_id & 0x7FFFFFFF, headers, fin=bool(flags & FLAG_FIN))
        elif kind == PING:
            await self.send(control_frame(PING, 0, payload))
        elif kind == RST_STREAM:
            (stream_id,) = struct.unpack_from(">I", payload, 0)
            forward = self._by_stream.get(stream_id & 0x7FFFFFFF)
            if forward is not None and forward.writer is not None and stream_id == forward.data_stream:
                forward.writer.close()
        elif kind == GOAWAY:
            self.closed = True
        elif kind == HEADERS:
            self._inflate.decompress(payload[4:])  # keep the shared decompressor in step
        # SETTINGS, WINDOW_UPDATE: nothing to do

    async def _open(self, stream_id: int, headers: dict[str, str], fin: bool) -> None:
        await self.reply(stream_id)
        request_id = headers.get("requestid", "")
        try:
            port = int(headers.get("port", ""))
        except ValueError:
            await self.send(control_frame(RST_STREAM, 0, struct.pack(">II", stream_id, 1)))
            return
        forward = self._forwards.setdefault(request_id, Forward(port))
        self._by_stream[stream_id] = forward
        if headers.get("streamtype") == "error":
            forward.error_stream = stream_id
        elif headers.get("streamtype") == "data":
            forward.data_stream = stream_id
            forward.pending_fin = fin
            task = asyncio.create_task(self._connect(request_id, forward))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, request_id: str, forward: Forward) -> None:
        assert forward.data_stream is not None
        try:
            reader, writer = await self.address.open(forward.port)
        except OSError as e:
            message = (
                f"error forwarding port {forward.port} to pod {self.pod_name}: failed to connect to "
                f"{self.address.ip}:{forward.port}: {e.strerror or e}"
            )
            if forward.error_stream is not None:
                await self.send(data_frame(forward.error_stream, FLAG_FIN, message.encode()))
            await self.send(data_frame(forward.data_stream, FLAG_FIN, b""))
            return
        forward.writer = writer
        for chunk in forward.pending:
            writer.write(chunk)
        forward.pending.clear()
        if forward.pending_fin and writer.can_write_eof():
            writer.write_eof()
        try:
            while chunk := await reader.read(32768):
                await self.send(data_frame(forward.data_stream, 0, chunk))
        except (ConnectionResetError, OSError):
            pass
        finally:
            await self.send(data_frame(forward.data_stream, FLAG_FIN, b""))
            if forward.error_stream is not None:
                await self.send(data_frame(forward.error_stream, FLAG_FIN, b""))
            writer.close()
            self._forwards.pop(request_id, None)

    async def _data(self, stream_id: int, flags: int, payload: bytes) -> None:
        forward = self._by_stream.get(stream_id)
        if forward is None or stream_id != forward.data_stream:
            return  # the client's error stream only ever closes
        fin = bool(flags & FLAG_FIN)
        if forward.writer is None:
            forward.pending.append(payload)
            forward.pending_fin = forward.pending_fin or fin
            return
        if payload:
            forward.writer.write(payload)
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                await forward.writer.drain()
        if fin and forward.writer.can_write_eof() and not forward.writer.is_closing():
            forward.writer.write_eof()

    async def close(self) -> None:
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for forward in self._forwards.values():
            if forward.writer is not None:
                forward.writer.close()


async def serve(request: web.Request, pod: Mapping[str, Any],
                address: portforward_ws.PodAddress = portforward_ws.PodAddress()) -> web.StreamResponse:
    """GET pods/{name}/portforward (WebSocket: SPDY tunnelled, or v4 channels as portforward_ws serves them), to
    the pod's ports at `address`."""
    check_upgrade(request)
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    # The client's first protocol that is served wins; no subprotocol at all is binary channels, as kubelet.
    chosen = next((p for p in offered if p == PROTOCOL or p in portforward_ws.PROTOCOLS), None)
    if offered and chosen is None:
        served = ", ".join((PROTOCOL, *portforward_ws.PROTOCOLS))
        raise ApiError(
            400,
            f"unable to upgrade connection: no supported port-forward subprotocol in {offered} (serves {served})",
            reason="BadRequest",
        )
    if ((pod.get("status") or {}).get("phase")) != "Running":
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        raise ApiError(400, f"unable to upgrade connection: pod is not running - status: {phase}", reason="BadRequest")
    if chosen != PROTOCOL:
        return await portforward_ws.serve(request, pod, request[RECORD], address)
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), autoping=True, max_msg_size=0)
    await ws.prepare(request)
    request[RECORD](101)
    session = SpdySession(ws.send_bytes, pod["metadata"]["name"], address)
    try:
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                await session.feed(msg.data)
            if session.closed:
                break
    except ConnectionResetError:
        pass
    finally:
        await session.close()
        with contextlib.suppress(Exception):
            await ws.close()
    return ws
