"""The upstream plane's parts that need no binary: its certificates (a real TLS handshake, identities as
kube-apiserver reads them), its kubeconfigs (read by the official client), the egress proxy (real sockets)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path

import kubernetes
import pytest
import yaml

from kubelocal.upstream import flags
from kubelocal.upstream.egress import EgressProxy, parse_connect
from kubelocal.upstream.pki import PlanePki, kubeconfig, subject, write_kubeconfig


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PlanePki:
    return PlanePki.create(tmp_path_factory.mktemp("pki"), ["127.0.0.1", "10.244.0.1", "10.96.0.1"])


def test_component_identities_are_the_users_and_groups_the_authorizers_expect(pki: PlanePki) -> None:
    assert subject(pki.load("admin").cert_pem) == ("kubernetes-admin", ["system:masters"])
    assert subject(pki.load("kube-controller-manager").cert_pem) == ("system:kube-controller-manager", [])
    assert subject(pki.load("kube-scheduler").cert_pem) == ("system:kube-scheduler", [])
    assert subject(pki.node_identity("node-0").cert_pem) == ("system:node:node-0", ["system:nodes"])


def test_keys_are_owner_only_and_everything_stays_in_the_directory(pki: PlanePki) -> None:
    for key in pki.dir.glob("*.key"):
        assert key.stat().st_mode & 0o077 == 0, key
    assert {p.parent for p in pki.dir.rglob("*")} == {pki.dir}


def _serve_once(context: ssl.SSLContext, sock: socket.socket, seen: list[object]) -> None:
    conn, _ = sock.accept()
    with context.wrap_socket(conn, server_side=True) as tls:
        seen.append(tls.getpeercert())
        tls.sendall(b"ok")


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost"])
def test_a_client_certificate_and_the_api_servers_certificate_complete_a_handshake(pki: PlanePki,
                                                                                   address: str) -> None:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.path("ca.crt")))
    server.load_cert_chain(pki.path("apiserver.crt"), pki.path("apiserver.key"))
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=str(pki.path("ca.crt")))
    client.load_cert_chain(pki.path("admin.crt"), pki.path("admin.key"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        seen: list[object] = []
        thread = threading.Thread(target=_serve_once, args=(server, listener, seen))
        thread.start()
        with socket.create_connection(listener.getsockname()) as raw, \
                client.wrap_socket(raw, server_hostname=address) as tls:
            assert tls.recv(2) == b"ok"
        thread.join(5)
    assert seen, "the server saw no client certificate"


def test_the_admin_kubeconfig_is_read_by_the_official_client(pki: PlanePki, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig",
                            kubeconfig("https://127.0.0.1:6443", pki.ca.cert_pem, pki.load("admin")))
    assert path.stat().st_mode & 0o077 == 0
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(path), client_configuration=config)
    assert config.host == "https://127.0.0.1:6443"
    assert Path(config.ssl_ca_cert).read_text() == pki.ca.cert_pem
    assert Path(config.cert_file).read_text() == pki.load("admin").cert_pem


def test_the_controller_manager_period_stays_under_a_short_grace(tmp_path: Path) -> None:
    layout = flags.Layout(tmp_path, flags.Ports(1, 2, 3, 4, 5), "10.244.0.1", "@x", node_monitor_grace=4.0)
    argv = flags.controller_manager(layout)
    assert "--node-monitor-grace-period=4s" in argv
    assert "--node-monitor-period=1s" in argv


def test_a_connect_request_is_read_and_anything_else_refused() -> None:
    assert parse_connect(b"CONNECT 10.244.0.5:8443 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") == ("10.244.0.5", 8443)
    assert parse_connect(b"CONNECT [::1]:10250 HTTP/1.1\r\n\r\n") == ("::1", 10250)
    for bad in (b"GET / HTTP/1.1\r\n\r\n", b"CONNECT nowhere HTTP/1.1\r\n\r\n"):
        with pytest.raises(ValueError):
            parse_connect(bad)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.read(100))
    await writer.drain()
    writer.close()


async def _connect(proxy: EgressProxy, target: str) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection("\0" + proxy.name)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return await reader.readuntil(b"\r\n\r\n"), reader, writer


async def test_the_egress_proxy_tunnels_to_what_its_dialler_reaches() -> None:
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = echo.sockets[0].getsockname()[1]
    asked: list[tuple[str, int]] = []

    async def dial(host: str, wanted: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        asked.append((host, wanted))
        if host != "10.244.0.7":
            raise OSError("no route to host")
        return await asyncio.open_connection("127.0.0.1", port)

    proxy = EgressProxy(f"kubelocal-test-egress-{id(asked)}", dial)
    await proxy.start()
    try:
        head, reader, writer = await _connect(proxy, "10.244.0.7:8443")
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(b"hello through the tunnel")
        assert await reader.read(100) == b"hello through the tunnel"
        writer.close()
        head, _, writer = await _connect(proxy, "192.0.2.9:10250")
        assert head.startswith(b"HTTP/1.1 502")
        writer.close()
        assert asked == [("10.244.0.7", 8443), ("192.0.2.9", 10250)]
    finally:
        await proxy.stop()
        echo.close()


def test_the_egress_selector_names_the_abstract_socket_as_kube_apiserver_reads_it(tmp_path: Path) -> None:
    layout = flags.Layout(tmp_path, flags.Ports(1, 2, 3, 4, 5), "10.244.0.1", "@kubelocal-egress-1")
    config = yaml.safe_load(flags.egress_selector_config(layout))
    (selection,) = config["egressSelections"]
    assert selection["name"] == "cluster"
    assert selection["connection"]["transport"]["uds"]["udsName"] == "@kubelocal-egress-1"


def test_the_upstream_planes_kubelets_take_every_fault_as_one_kubelet_takes_it() -> None:
    """`tfjob local --kill-worker-after` and the chaos faults call the same methods on either plane: the upstream
    plane's Kubelets (one per node) must accept exactly what ProcessKubelet accepts (it once lacked `why`)."""
    import inspect

    from kubelocal.kubelet import ProcessKubelet
    from kubelocal.upstream.kubelets import Kubelets

    faults = [name for name, member in vars(Kubelets).items()
              if inspect.iscoroutinefunction(member) and name not in ("start", "stop")]  # the agents' own lifecycle
    assert {"kill_container", "evict", "lose_node", "restore_node", "partition"} <= set(faults)
    for name in faults:
        assert inspect.signature(getattr(Kubelets, name)) == inspect.signature(getattr(ProcessKubelet, name)), name
