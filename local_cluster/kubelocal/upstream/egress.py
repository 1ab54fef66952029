"""The API server's way into the cluster network: an HTTP CONNECT proxy (what konnectivity's HTTPConnect mode is),
listening on an abstract unix socket that kube-apiserver's egress selector dials for "cluster" traffic.

kube-apiserver sends `CONNECT host:port HTTP/1.1`, waits for `200`, then speaks TLS through the tunnel (to a
kubelet, a webhook's pod, an aggregated API's pod). The proxy dials with `dial(host, port)`: the plane's choice
of where that address lives (a pod IP is reached from inside the pod network's namespace, which the host has
no route to). An abstract socket has no file, so nothing is left behind when the plane dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Dial = Callable[[str, int], Awaitable[Streams]]
#: The CONNECT request's head may not be larger than this (Go's default header limit is 1 MiB; ours is smaller).
MAX_HEAD = 16 * 1024


def abstract_address(name: str) -> str:
    """The address Go dials for an abstract socket ('@name'); Python binds it as '\\0name'."""
    return "@" + name


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end-of-file, then half-close the other side."""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def splice(a: Streams, b: Streams) -> None:
    """Relay both ways between two connections until both directions end, then close both."""
    try:
        await asyncio.gather(pipe(a[0], b[1]), pipe(b[0], a[1]))
    finally:
        for _, writer in (a, b):
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


def parse_connect(head: bytes) -> tuple[str, int]:
    """(host, port) of a `CONNECT host:port HTTP/1.1` request head; ValueError otherwise."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not a CONNECT request: {line[:100]!r}")
    host, sep, port = parts[1].rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"CONNECT target {parts[1]!r}: expected host:port")
    return host.strip("[]"), int(port)


class EgressProxy:
    """`start()` listens on the abstract socket `name`; each CONNECT is dialled with `dial` and spliced."""

    def __init__(self, name: str, dial: Dial, *, connect_timeout: float = 10.0) -> None:
        self.name = name
        self.dial = dial
        self.connect_timeout = connect_timeout
        self._server: asyncio.AbstractServer | None = None
        self._tunnels: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return abstract_address(self.name)

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + self.name)
        except BaseException:
            sock.close()
            raise
        self._server = await asyncio.start_unix_server(self._serve, sock=sock)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tunnels):
            task.cancel()
        await asyncio.gather(*self._tunnels, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tunnels.add(task)
        try:
            await self._tunnel(reader, writer)
        finally:
            if task is not None:
                self._tunnels.discard(task)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        try:
            host, port = parse_connect(head[:MAX_HEAD])
        except ValueError as exc:
            await self._refuse(writer, "400 Bad Request", str(exc))
            return
        try:
            upstream = await asyncio.wait_for(self.dial(host, port), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            log.debug("egress: dialling %s:%d failed: %s", host, port, exc)
            await self._refuse(writer, "502 Bad Gateway", f"dial {host}:{port}: {exc}")
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await splice((reader, writer), upstream)

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, status: str, message: str) -> None:
        body = message.encode()
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
        writer.close()
