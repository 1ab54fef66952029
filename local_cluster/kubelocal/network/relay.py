"""Netem's delay and loss in this process, for kernels built without the netem qdisc.

The pod's veth end leaves the bridge and a second veth pair takes its place; a relay copies every frame
between the two, holding each for the delay and dropping the given share. Frames cross with their
virtio-net header (PACKET_VNET_HDR), so checksum offload and segmentation state pass through unchanged.
It shapes test traffic (handshakes, heartbeats, small tensors), not bulk transfers at line rate.
"""

from __future__ import annotations

import collections
import random
import select
import socket
import threading
import time

SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
ETH_P_ALL = 0x0003
_FRAME = 65536 + 10  # a GSO frame and its virtio-net header
_IDLE = 0.1  # seconds a pump waits for a frame before looking at the stop flag


def packet_socket(sock: socket.socket, ifname: str) -> socket.socket:
    """Make `sock` (an AF_PACKET socket of the right namespace) see every frame `ifname` receives."""
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)  # not the frames this relay sends out of it
    sock.bind((ifname, ETH_P_ALL))
    return sock


class Relay:
    """Copies frames both ways between two packet sockets, each held `delay` seconds, a `loss` share dropped."""

    def __init__(self, a: socket.socket, b: socket.socket, *, delay: float, loss: float) -> None:
        self.a, self.b, self.delay, self.loss = a, b, delay, loss
        self._stop = threading.Event()
        self._random = random.Random()
        self._threads = [
            threading.Thread(target=self._pump, args=(a, b), name="kubelocal-relay", daemon=True),
            threading.Thread(target=self._pump, args=(b, a), name="kubelocal-relay", daemon=True),
        ]

    def start(self) -> Relay:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop both pumps (frames still held are dropped) and close the sockets."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.a.close()
        self.b.close()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        held: collections.deque[tuple[float, bytes]] = collections.deque()  # a constant delay keeps FIFO order
        while not self._stop.is_set():
            wait = max(0.0, held[0][0] - time.monotonic()) if held else _IDLE
            try:
                readable, _, _ = select.select([src], [], [], wait)
            except (OSError, ValueError):
                return
            if readable:
                while True:
                    try:
                        frame = src.recv(_FRAME, socket.MSG_DONTWAIT)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break  # e.g. the link went down (a cut): nothing to read now
                    if self._random.random() >= self.loss:
                        held.append((time.monotonic() + self.delay, frame))
            now = time.monotonic()
            while held and held[0][0] <= now:
                try:
                    dst.send(held.popleft()[1])
                except OSError:
                    pass  # a full queue or a cut link loses the frame, as a wire would
