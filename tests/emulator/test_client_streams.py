"""The official Python client's streams against a local cluster's running pods: exec with stdin (text and
binary messages, v5's channel close) and port-forward over the WebSocket channel protocol (v4.channel.k8s.io:
per-port data and error channels, each opened by the port number in 2 little-endian bytes)."""

from __future__ import annotations

import base64
import json
import select
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import websocket
from kubernetes.stream import portforward, stream
from kubernetes.stream.ws_client import ERROR_CHANNEL
from polling import wait_for
from ports import free_port

from kubelocal.cluster import LocalClusterThread

pytestmark = pytest.mark.timeout(120)

#: An echo server on each port given (loopback only), as the client's own e2e suite runs in its pod.
ECHO = """
import socket, sys, threading
def serve(port):
    srv = socket.create_server(("127.0.0.1", port))
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(1024), b"")],
                         daemon=True).start()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
threading.Event().wait()
"""


@pytest.fixture
def core(tmp_path: Path) -> Iterator[kubernetes.client.CoreV1Api]:
    with LocalClusterThread(workdir=tmp_path / "kubelocal", max_grace_seconds=1.0) as cluster:
        cfg = kubernetes.client.Configuration()
        cfg.host = cluster.url
        with kubernetes.client.ApiClient(cfg) as api:
            yield kubernetes.client.CoreV1Api(api)


def run_pod(core: kubernetes.client.CoreV1Api, name: str, *command: str) -> None:
    core.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "main", "image": "python:3.11", "command": list(command)}]}})
    wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase == "Running", timeout=60,
             what=f"pod {name} running")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("binary", [False, True])
def test_exec_reads_a_shells_stdin_and_reports_its_exit(core: kubernetes.client.CoreV1Api, binary: bool) -> None:
    run_pod(core, "sleeper", "python", "-c", "import time; time.sleep(600)")
    resp = stream(core.connect_post_namespaced_pod_exec, "sleeper", "default", command=["/bin/sh"],
                  stdin=True, stdout=True, stderr=True, tty=False, binary=binary, _preload_content=False)
    as_sent = (lambda text: text.encode()) if binary else (lambda text: text)
    try:
        resp.write_stdin(as_sent("echo test string 1\n"))  # str: a text message; bytes: a binary one
        assert resp.readline_stdout(timeout=10) == as_sent("test string 1")
        resp.write_stdin(as_sent("echo test string 2 >&2\n"))
        assert resp.readline_stderr(timeout=10) == as_sent("test string 2")
        resp.write_stdin(as_sent("exit 0\n"))
        wait_for(lambda: resp.update(timeout=1) or resp.peek_channel(ERROR_CHANNEL), timeout=10,
                 what="the exit status on the error channel")
        assert json.loads(resp.read_channel(ERROR_CHANNEL))["status"] == "Success"
        wait_for(lambda: resp.update(timeout=1) or not resp.is_open(), timeout=10, what="the stream closed")
    finally:
        resp.close()


def test_exec_ends_when_the_client_closes_stdin_v5(core: kubernetes.client.CoreV1Api) -> None:
    run_pod(core, "sleeper", "python", "-c", "import time; time.sleep(600)")
    resp = stream(core.connect_post_namespaced_pod_exec, "sleeper", "default", command=["/bin/sh", "-c", "cat"],
                  stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False)
    try:
        assert resp.subprotocol == "v5.channel.k8s.io"
        resp.write_stdin("test-close\n")
        assert resp.readline_stdout(timeout=10) == "test-close"
        resp.close_channel(0)
        resp.run_forever(timeout=15)
        assert not resp.is_open() and resp.returncode == 0
    finally:
        resp.close()


def _echoed(sock: socket.socket, sent: bytes) -> bytes:
    sock.sendall(sent)
    got = b""
    while len(got) < len(sent):
        ready, _, _ = select.select([sock], [], [], 10)
        assert ready, f"no echo after {got!r}"
        chunk = sock.recv(1024)
        assert chunk, "the forwarded socket closed"
        got += chunk
    return got


def test_websocket_port_forward_echoes_per_port_and_reports_a_closed_port(core: kubernetes.client.CoreV1Api) -> None:
    one, two, closed = free_port(), free_port(), free_port()
    run_pod(core, "echo", sys.executable, "-c", ECHO, str(one), str(two))
    wait_for(lambda: _listening(one) and _listening(two), timeout=30, what="the pod's echo ports")
    for attempt in range(2):  # one session after another
        pf = portforward(core.connect_get_namespaced_pod_portforward, "echo", "default",
                         ports=f"{one},{two},{closed}")
        assert pf.connected
        sockets = [pf.socket(one), pf.socket(two)]
        for sock in sockets:
            sock.setblocking(True)
        for port, sock in zip((one, two), sockets, strict=True):
            sent = f"session {attempt} port {port}".encode()
            assert _echoed(sock, sent) == sent
        refused = pf.socket(closed)
        refused.setblocking(True)
        assert refused.recv(1024) == b""
        assert pf.error(closed).startswith(f"error forwarding port {closed} to pod echo, uid ")
        assert pf.error(one) is None and pf.error(two) is None
        for sock in (*sockets, refused):
            sock.close()
        wait_for(lambda: not pf.connected, timeout=10, what="the session closed after its sockets")  # noqa: B023


def test_websocket_port_forward_carries_http_until_the_pod_closes(core: kubernetes.client.CoreV1Api,
                                                                 tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "index.html").write_text("<h1>Welcome</h1>\n")
    run_pod(core, "web", "python", "-m", "http.server", str(port), "--bind", "127.0.0.1",
            "--directory", str(tmp_path))
    wait_for(lambda: _listening(port), timeout=30, what=f"the pod's server on port {port}")
    pf = portforward(core.connect_get_namespaced_pod_portforward, "web", "default", ports=str(port))
    sock = pf.socket(port)
    sock.setblocking(True)
    sock.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
    reply = b""
    while chunk := sock.recv(4096):  # the server closes after an HTTP/1.0 answer: the socket sees the end
        reply += chunk
    assert reply.startswith(b"HTTP/1.0 200 ") and reply.endswith(b"\r\n\r\n<h1>Welcome</h1>\n")
    assert pf.error(port) is None


def test_base64_channel_port_forward_and_a_missing_ports_query(core: kubernetes.client.CoreV1Api) -> None:
    """`v4.base64.channel.k8s.io`: text messages, the channel as a digit and base64 data; no `ports` is a 400."""
    port = free_port()
    run_pod(core, "echo", sys.executable, "-c", ECHO, str(port))
    wait_for(lambda: _listening(port), timeout=30, what="the pod's echo port")
    host = core.api_client.configuration.host.replace("http", "ws", 1)
    url = f"{host}/api/v1/namespaces/default/pods/echo/portforward"
    ws = websocket.create_connection(f"{url}?ports={port}", subprotocols=["v4.base64.channel.k8s.io"], timeout=10)
    try:
        opening = base64.b64encode(struct.pack("<H", port)).decode()
        assert [ws.recv(), ws.recv()] == ["0" + opening, "1" + opening]
        ws.send("0" + base64.b64encode(b"hello").decode())
        assert ws.recv() == "0" + base64.b64encode(b"hello").decode()
    finally:
        ws.close()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(url, subprotocols=["v4.channel.k8s.io"], timeout=10)
    assert refused.value.status_code == 400
    assert b'query parameter \\"ports\\" is required' in refused.value.resp_body
