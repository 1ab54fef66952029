"""The pod network: pods reach each other and the plane's own servers by IP and by cluster DNS name, never
the host; faults cut and shape one pod's link; teardown (and a later start, after a crash) leaves nothing.

Tests that make namespaces need root on Linux (CI runs as root) and skip elsewhere with the reason; the
rules (DNS records, IPAM, rendered files) run everywhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest

from kubelocal.network import (
    DnsServer,
    Ipam,
    IpamExhausted,
    Listen,
    NetworkError,
    PodAttachment,
    PodNetwork,
    cut,
    enter_argv,
    heal,
    in_cluster_env,
    is_cut,
    netem_available,
    pod_network_available,
    render_hosts,
    render_resolv_conf,
    server_ssl_context,
    serving_certificate,
    shape,
    unshape,
    write_pod_files,
)
from kubelocal.network import dns as cluster_dns
from kubelocal.network.podnet import NAME_PREFIX
from kubelocal.pki import new_ca

AVAILABLE, WHY_NOT = pod_network_available()
needs_netns = pytest.mark.skipif(not AVAILABLE, reason=f"pod network unavailable: {WHY_NOT}")
STEP = 10.0  # seconds any one step in a pod may take


# -- records, as the plane's store would give them ------------------------------------------------------------


def pod(name: str, ip: str, *, ready: bool = True, labels: Mapping[str, str] | None = None, **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "namespace": "train", "labels": dict(labels or {"job": "mnist"})},
        "spec": spec,
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def service(name: str, cluster_ip: str = "None", *, publish_not_ready: bool = False, **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "namespace": "train"},
        "spec": {"clusterIP": cluster_ip, "selector": {"job": "mnist"},
                 "publishNotReadyAddresses": publish_not_ready, **spec},
    }


class Records:
    """An in-memory store: what the DNS server reads."""

    def __init__(self, services: Iterable[dict] = (), pods: Iterable[dict] = ()) -> None:
        self.services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
        self.pod_list = list(pods)

    def service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.services.get((namespace, name))

    def pods(self, namespace: str) -> Iterable[Mapping[str, Any]]:
        return [p for p in self.pod_list if p["metadata"]["namespace"] == namespace]


W0 = pod("w0", "10.244.0.5", hostname="worker-0", subdomain="workers")
W1 = pod("w1", "10.244.0.6", ready=False, hostname="worker-1", subdomain="workers")
OTHER = pod("x", "10.244.0.7", labels={"job": "other"}, hostname="worker-0", subdomain="workers")
DONE = pod("w2", "10.244.0.8", hostname="worker-2", subdomain="workers")
DONE["status"]["phase"] = "Succeeded"

DNS_CASES = [
    # (name, services, expected addresses; None = NXDOMAIN)
    ("workers.train.svc.cluster.local", [service("workers")], ["10.244.0.5"]),
    ("workers.train.svc.cluster.local", [service("workers", publish_not_ready=True)], ["10.244.0.5", "10.244.0.6"]),
    ("WORKERS.train.svc.cluster.local.", [service("workers")], ["10.244.0.5"]),
    ("api.train.svc.cluster.local", [service("api", "10.96.3.4")], ["10.96.3.4"]),
    ("worker-0.workers.train.svc.cluster.local", [service("workers")], ["10.244.0.5"]),
    ("worker-1.workers.train.svc.cluster.local", [service("workers")], None),
    ("worker-1.workers.train.svc.cluster.local", [service("workers", publish_not_ready=True)], ["10.244.0.6"]),
    ("worker-2.workers.train.svc.cluster.local", [service("workers", publish_not_ready=True)], None),
    ("worker-0.workers.train.svc.cluster.local", [service("workers", "10.96.3.4")], None),
    ("worker-0.workers.train.svc.cluster.local", [], None),
    ("workers.other.svc.cluster.local", [service("workers")], None),
    ("workers.train.svc.cluster.local", [service("workers", selector={"job": "none"})], []),
    ("10-244-0-9.train.pod.cluster.local", [], ["10.244.0.9"]),
    ("example.com", [service("workers")], None),
    ("train.svc.cluster.local", [service("workers")], None),
]


@pytest.mark.parametrize(("name", "services", "expected"), DNS_CASES)
def test_cluster_dns_records(name: str, services: list[dict], expected: list[str] | None) -> None:
    records = Records(services, [W0, W1, OTHER, DONE])
    assert cluster_dns.lookup(name, records) == expected


def test_dns_answers_nxdomain_for_unknown_names_and_nodata_for_other_types() -> None:
    records = Records([service("workers")], [W0])
    reply = cluster_dns.answer(dns.message.make_query("nope.train.svc.cluster.local", "A"), records)
    assert reply.rcode() == dns.rcode.NXDOMAIN and not reply.answer
    reply = cluster_dns.answer(dns.message.make_query("workers.train.svc.cluster.local", "AAAA"), records)
    assert reply.rcode() == dns.rcode.NOERROR and not reply.answer and reply.authority


def test_ipam_hands_out_each_address_once_and_reuses_freed_ones_last() -> None:
    ipam = Ipam("10.244.0.0/29")  # gateway .1, pods .2-.6
    got = [str(ipam.allocate(f"pod-{i}")) for i in range(5)]
    assert got == ["10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6"]
    assert str(ipam.allocate("pod-2")) == "10.244.0.4"
    with pytest.raises(IpamExhausted, match=r"10\.244\.0\.0/29"):
        ipam.allocate("pod-5")
    assert str(ipam.release("pod-1")) == "10.244.0.3"
    assert str(ipam.allocate("pod-5")) == "10.244.0.3"


def test_ipam_survives_many_pods_coming_and_going() -> None:
    ipam = Ipam("10.244.0.0/16")
    for i in range(200_000):
        ipam.allocate(f"p{i}")
        if i >= 100:
            ipam.release(f"p{i - 100}")
    assert len(ipam.in_use()) == 100
    assert len(set(ipam.in_use().values())) == 100


def test_pod_files_are_the_ones_a_kubelet_writes() -> None:
    hosts = render_hosts(pod("w0", "", hostname="worker-0", subdomain="workers"), "10.244.0.5")
    assert hosts.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert hosts.endswith("10.244.0.5\tworker-0.workers.train.svc.cluster.local\tworker-0\n")
    assert render_hosts(pod("plain", ""), "10.244.0.9").endswith("10.244.0.9\tplain\n")
    assert render_resolv_conf("train", "10.96.0.10") == (
        "search train.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    )
    env = in_cluster_env("10.96.0.1")
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("10.96.0.1", "443")


# -- in namespaces ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def net() -> Iterator[PodNetwork]:
    if not AVAILABLE:
        pytest.skip(f"pod network unavailable: {WHY_NOT}")
    with PodNetwork() as network:
        yield network


def add(net: PodNetwork, name: str) -> PodAttachment:
    return net.add_pod(str(uuid.uuid4()), "train", name)


def run_in(pod: PodAttachment, code: str, *, binds: Iterable[tuple[Path, str]] = (), hostname: str | None = None,
           env: Mapping[str, str] | None = None, timeout: float = STEP) -> subprocess.CompletedProcess[str]:
    argv = enter_argv(pod.netns, list(binds), [sys.executable, "-I", "-c", textwrap.dedent(code)], hostname=hostname)
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env)


def connect_code(ip: str, port: int, timeout: float) -> str:
    return f"""
        import socket, time
        start = time.monotonic()
        try:
            s = socket.create_connection(({ip!r}, {port}), timeout={timeout})
            print("ok", s.recv(16).decode(), time.monotonic() - start)
        except OSError as exc:
            print("failed", type(exc).__name__, exc)
    """


@contextmanager
def serve_in(pod: PodAttachment, port: int) -> Iterator[None]:
    """A TCP server in the pod that greets every connection with the pod's name."""
    code = f"""
        import socket
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", {port})); s.listen(16); print("ready", flush=True)
        while True:
            c, _ = s.accept(); c.sendall({pod.name!r}.encode()); c.close()
    """
    argv = enter_argv(pod.netns, [], [sys.executable, "-I", "-c", textwrap.dedent(code)])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], STEP)
        assert ready and proc.stdout.readline().strip() == "ready", "server in the pod did not start"
        yield
    finally:
        proc.kill()
        proc.wait(STEP)


def connect(pod: PodAttachment, ip: str, port: int, timeout: float = 2.0) -> list[str]:
    return run_in(pod, connect_code(ip, port, timeout)).stdout.split()


@needs_netns
def test_two_pods_reach_each_other_by_ip(net: PodNetwork) -> None:
    a, b = add(net, "a"), add(net, "b")
    assert a.ip != b.ip and ipaddress.IPv4Address(a.ip) in net.ipam.network
    (eth0,) = json.loads(subprocess.run(["ip", "-n", a.netns, "-j", "addr", "show", "eth0"],
                                        capture_output=True, text=True, check=True).stdout)
    assert [x["local"] for x in eth0["addr_info"] if x["family"] == "inet"] == [a.ip]
    with serve_in(b, 2222):
        assert connect(a, b.ip, 2222)[:2] == ["ok", "b"]
    with serve_in(a, 2222):
        assert connect(b, a.ip, 2222)[:2] == ["ok", "a"]


@needs_netns
def test_pod_resolves_headless_service_and_pod_hostname_through_cluster_dns(net: PodNetwork, tmp_path: Path) -> None:
    a, b = add(net, "dns-a"), add(net, "dns-b")
    pod_a = pod("dns-a", a.ip, hostname="worker-0", subdomain="workers")
    pod_b = pod("dns-b", b.ip, hostname="worker-1", subdomain="workers")
    pod_not_ready = pod("dns-c", "10.244.255.200", ready=False, hostname="worker-2", subdomain="workers")
    many = [pod(f"m{i}", f"10.244.200.{i}", labels={"job": "big"}) for i in range(1, 101)]
    big = service("big", selector={"job": "big"})
    records = Records([service("workers"), service("api", "10.96.3.4"), big], [pod_a, pod_b, pod_not_ready, *many])
    udp, tcp = net.open_sockets([Listen("udp", net.dns_ip, 53), Listen("tcp", net.dns_ip, 53)])
    server = DnsServer(udp, tcp, records).start()
    had_secrets = Path("/var/run/secrets").exists()
    try:
        files = write_pod_files(tmp_path / "a", pod_a, a.ip, net.dns_ip, serviceaccount=("tok3n", "CA PEM"))
        done = run_in(a, """
            import json, socket
            def lookup(name):
                try:
                    return sorted({ai[4][0] for ai in socket.getaddrinfo(name, 2222, socket.AF_INET)})
                except socket.gaierror as exc:
                    return exc.errno == socket.EAI_NONAME and "NXDOMAIN"
            names = ["big", "workers", "worker-1.workers", "worker-2.workers", "api.train.svc.cluster.local", "nowhere"]
            sa = "/var/run/secrets/kubernetes.io/serviceaccount"
            print(json.dumps({
                **{n: lookup(n) for n in names},
                "hostname": socket.gethostname(),
                "fqdn": socket.getfqdn(),
                "token": open(sa + "/token").read(),
                "namespace": open(sa + "/namespace").read(),
            }))
        """, binds=files.binds(), hostname="worker-0")
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
    finally:
        server.stop()
    assert seen == {
        "big": sorted(f"10.244.200.{i}" for i in range(1, 101)),  # 100 records: over UDP's 512 bytes, via TCP
        "workers": sorted([a.ip, b.ip]),  # via the search path: workers.train.svc.cluster.local
        "worker-1.workers": [b.ip],
        "worker-2.workers": "NXDOMAIN",  # not ready, and the Service does not publish not-ready addresses
        "api.train.svc.cluster.local": ["10.96.3.4"],
        "nowhere": "NXDOMAIN",
        "hostname": "worker-0",
        "fqdn": "worker-0.workers.train.svc.cluster.local",
        "token": "tok3n",
        "namespace": "train",
    }
    assert not Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()  # the mount stayed private
    if not had_secrets:  # nor was its mount point made in the host's tree, where host tools would think they run
        assert not Path("/var/run/secrets").exists()  # in a pod (Kubeflow's SDK checks that directory)


API_VERSIONS = {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.96.0.1:443"}]}


@needs_netns
def test_in_cluster_config_reaches_the_api_endpoint_over_tls_with_the_token(net: PodNetwork, tmp_path: Path) -> None:
    ca = new_ca()
    cert, key = serving_certificate(ca, [net.api_ip])
    seen_auth: list[str | None] = []

    class ApiStandIn(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen_auth.append(self.headers.get("Authorization"))
            body = json.dumps(API_VERSIONS).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    (sock,) = net.open_sockets([Listen("tcp", net.api_ip, 443)])
    httpd = HTTPServer((net.api_ip, 443), ApiStandIn, bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = server_ssl_context(cert, key).wrap_socket(sock, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    client = add(net, "api-client")
    files = write_pod_files(tmp_path / "c", pod("api-client", client.ip), client.ip, net.dns_ip,
                            serviceaccount=("s3cret-token", ca.cert_pem))
    try:
        done = run_in(client, """
            import kubernetes
            kubernetes.config.load_incluster_config()  # env, token and CA where client libraries look
            print(kubernetes.client.CoreApi().get_api_versions().versions)
        """, binds=files.binds(), env=in_cluster_env(net.api_ip), timeout=30)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['v1']"
    assert [auth.partition(" ")[2] for auth in seen_auth if auth] == ["s3cret-token"]  # "bearer <token>"


@needs_netns
def test_partitioned_pod_cannot_be_reached_until_healed(net: PodNetwork) -> None:
    a, b = add(net, "part-a"), add(net, "part-b")
    with serve_in(b, 2222):
        assert connect(a, b.ip, 2222)[:2] == ["ok", "part-b"]
        cut(net, b)
        assert is_cut(net, b)
        assert connect(a, b.ip, 2222, timeout=1.0)[:2] == ["failed", "TimeoutError"]
        heal(net, b)
        assert not is_cut(net, b)
        deadline = time.monotonic() + STEP
        while (seen := connect(a, b.ip, 2222))[:1] != ["ok"] and time.monotonic() < deadline:
            pass
        assert seen[:2] == ["ok", "part-b"]


NETEM, WHY_NO_NETEM = netem_available() if AVAILABLE else (False, WHY_NOT)


SHAPERS = [pytest.param(False, id="relay"),
           pytest.param(True, id="netem", marks=pytest.mark.skipif(not NETEM, reason=WHY_NO_NETEM))]


@needs_netns
@pytest.mark.parametrize("netem", SHAPERS)
def test_delay_shows_in_connect_time_until_unshaped(net: PodNetwork, netem: bool) -> None:
    a, b = add(net, "slow-a"), add(net, "slow-b")
    with serve_in(b, 2222):
        fast = connect(a, b.ip, 2222)
        shape(net, b, delay_ms=100, netem=netem)
        slow = connect(a, b.ip, 2222)
        unshape(net, b)
        again = connect(a, b.ip, 2222)
    assert fast[:2] == slow[:2] == again[:2] == ["ok", "slow-b"]
    assert float(fast[2]) < 0.1 and float(again[2]) < 0.1
    assert 0.2 <= float(slow[2]) < 1.0  # the SYN is held on its way in, the SYN-ACK on its way out


@needs_netns
@pytest.mark.parametrize("netem", SHAPERS)
def test_total_loss_blocks_a_pod_until_unshaped(net: PodNetwork, netem: bool) -> None:
    a, b = add(net, "lossy-a"), add(net, "lossy-b")
    with serve_in(b, 2222):
        shape(net, b, loss_percent=100, netem=netem)
        assert connect(a, b.ip, 2222, timeout=1.0)[:2] == ["failed", "TimeoutError"]
        unshape(net, b)
        assert connect(a, b.ip, 2222)[:2] == ["ok", "lossy-b"]


@needs_netns
@pytest.mark.skipif(NETEM, reason="this kernel has netem")
def test_shaping_without_netem_says_what_the_kernel_lacks(net: PodNetwork) -> None:
    a = add(net, "unshaped")
    with pytest.raises(NetworkError, match=r"cannot shape pod train/unshaped's packets: no netem qdisc"):
        shape(net, a, delay_ms=100, netem=True)


def test_without_root_the_plane_keeps_loopback_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert pod_network_available() == (
        False, "not root: creating network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN")


@needs_netns
def test_the_plane_reaches_a_pods_port_for_probes_and_port_forward(net: PodNetwork) -> None:
    target = add(net, "probed")

    async def greeting() -> bytes:
        reader, writer = await net.open_connection(target.ip, 2222, timeout=STEP)
        try:
            return await asyncio.wait_for(reader.read(16), STEP)
        finally:
            writer.close()

    with serve_in(target, 2222):
        assert asyncio.run(greeting()) == b"probed"


@needs_netns
def test_launcher_command_line_mounts_the_pod_files(net: PodNetwork, tmp_path: Path) -> None:
    target = add(net, "cli")
    files = write_pod_files(tmp_path, pod("cli", target.ip), target.ip, net.dns_ip)
    done = subprocess.run(
        [sys.executable, "-m", "kubelocal.network.enter", "--netns", target.netns, "--hosts", str(files.hosts),
         "--resolv", str(files.resolv_conf), "--", "sh", "-c", "cat /etc/resolv.conf /etc/hosts; ip -j -4 addr"],
        capture_output=True, text=True, timeout=STEP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(files.resolv_conf.read_text() + files.hosts.read_text())
    assert f'"local":"{target.ip}"' in done.stdout
    bad = subprocess.run([sys.executable, "-m", "kubelocal.network.enter", "--netns", "no-such", "--", "true"],
                         capture_output=True, text=True, timeout=STEP)
    assert bad.returncode == 2 and "--netns 'no-such': no such network namespace" in bad.stderr


def host_addresses() -> list[str]:
    """The host's own IPv4 addresses other than loopback (in the host's namespace)."""
    links = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True).stdout)
    return [a["local"] for link in links for a in link.get("addr_info", []) if not a["local"].startswith("127.")]


@needs_netns
def test_pod_cannot_reach_the_hosts_addresses(net: PodNetwork) -> None:
    targets = host_addresses()
    if not targets:
        pytest.skip("the host has no address besides loopback")
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    try:
        socket.create_connection((targets[0], port), timeout=2).close()  # reachable from the host itself
        probe = add(net, "escape")
        for address in targets:
            assert connect(probe, address, port, timeout=1.0)[0] == "failed", address
    finally:
        listener.close()


def netns_and_links(plane_id: str) -> tuple[set[str], set[str]]:
    """The plane's namespaces (other planes may run beside it) and the host's links (a plane adds none: its bridge
    and veths live in its own namespaces)."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout)
    return {n for n in netns if plane_id in n}, {link["ifname"] for link in links}


@needs_netns
def test_teardown_leaves_no_namespace_or_link() -> None:
    network = PodNetwork()
    _, links_before = netns_and_links(network.plane_id)
    network.start()
    pods = [network.add_pod(str(uuid.uuid4()), "train", f"p{i}") for i in range(3)]
    network.remove_pod(pods[0].uid)
    during_ns, _ = netns_and_links(network.plane_id)
    assert {network.netns, pods[1].netns, pods[2].netns} <= during_ns and pods[0].netns not in during_ns
    network.teardown()
    assert netns_and_links(network.plane_id) == (set(), links_before)


@needs_netns
def test_a_later_start_removes_what_a_crashed_plane_left() -> None:
    crashed = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time
        from kubelocal.network import PodNetwork
        net = PodNetwork(); net.start(); net.add_pod("uid-1", "train", "p0")
        print(net.netns, flush=True); time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert crashed.stdout is not None
    ready, _, _ = select.select([crashed.stdout], [], [], STEP)
    assert ready
    left = crashed.stdout.readline().strip()
    crashed.send_signal(signal.SIGKILL)
    crashed.wait(STEP)
    crashed_id = left.removeprefix(NAME_PREFIX)
    assert left in netns_and_links(crashed_id)[0]
    with PodNetwork() as later:
        assert netns_and_links(crashed_id)[0] == set()  # the plane and its pod's namespace
        assert later.netns in netns_and_links(later.plane_id)[0]
    assert netns_and_links(later.plane_id)[0] == set()
