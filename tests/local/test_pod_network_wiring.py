"""The plane with its pod network on: pods get their own IP in status, cluster DNS, the kubelet's files and
in-cluster config; a pod that looks its peer up before the peer exists still joins; a cut link loses packets
until healed; the plane leaves no namespace behind.

Needs root on Linux (CI runs as root); skips elsewhere with the reason.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from local_helpers import core_api, pod_dict, python_pod, unique
from polling import wait_for

from kubelocal.cluster import LocalClusterThread
from kubelocal.network import iproute, pod_network_available
from kubelocal.network.plane import choose

AVAILABLE, WHY_NOT = pod_network_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"pod network unavailable: {WHY_NOT}")


@pytest.fixture(scope="module")
def net_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterThread]:
    with LocalClusterThread(nodes="2x{cpu:8,memory:16Gi}", workdir=tmp_path_factory.mktemp("netcluster"),
                            restart_backoff=(0.1, 0.4), max_grace_seconds=3.0, pod_network="on") as c:
        yield c


@pytest.fixture(scope="module")
def api(net_cluster: LocalClusterThread) -> Iterator[kubernetes.client.CoreV1Api]:
    client = core_api(net_cluster.url)
    yield client
    client.api_client.close()


def _log(api: kubernetes.client.CoreV1Api, name: str) -> str:
    """The pod's log; empty while its container waits to start."""
    try:
        return str(api.read_namespaced_pod_log(name, "default"))
    except kubernetes.client.ApiException as exc:
        if exc.status == 400:
            return ""
        raise


def _finished(api: kubernetes.client.CoreV1Api, name: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod = pod_dict(api, name)
        return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None

    return wait_for(done, 60, what=f"pod {name} to finish")


def _headless(api: kubernetes.client.CoreV1Api, name: str) -> None:
    api.create_namespaced_service("default", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"peer-of": name},
                 "ports": [{"name": "p", "port": 2222}]},
    })


def test_choose_modes() -> None:
    assert choose("off") == (False, "pod network off")
    assert choose("auto") == (True, "")
    with pytest.raises(ValueError, match="pod_network: 'maybe' is not one of auto, on, off"):
        choose("maybe")


IN_POD = textwrap.dedent("""
    import json, os, socket, ssl, urllib.request
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
    req = urllib.request.Request(f"https://{host}:{port}/api/v1/namespaces/default/pods/" + os.environ["NAME"],
                                 headers={"Authorization": "Bearer " + open(sa + "/token").read()})
    me = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))
    print(json.dumps({
        "hostname": socket.gethostname(),
        "resolv": open("/etc/resolv.conf").read(),
        "hosts": open("/etc/hosts").read(),
        "own_fqdn": socket.gethostbyname(os.environ["FQDN"]),
        "api_name": me["metadata"]["name"],
        "namespace": open(sa + "/namespace").read(),
        "env_ip": os.environ["MY_IP"],
    }))
""")


def test_pod_has_ip_dns_files_and_in_cluster_config(net_cluster: LocalClusterThread,
                                                    api: kubernetes.client.CoreV1Api) -> None:
    name = unique("netpod")
    _headless(api, name)
    # The pod's mounted token authenticates it as the ServiceAccount, which RBAC lets read pods, as on a cluster.
    rbac = kubernetes.client.RbacAuthorizationV1Api(api.api_client)
    rbac.create_namespaced_role("default", {"metadata": {"name": name}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding("default", {
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]})
    fqdn = f"{name}.{name}.default.svc.cluster.local"
    env = [{"name": "NAME", "value": name}, {"name": "FQDN", "value": fqdn},
           {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    pod = python_pod(name, IN_POD, hostname=name, subdomain=name, container={"env": env})
    pod["metadata"]["labels"]["peer-of"] = name
    api.create_namespaced_pod("default", pod)
    done = _finished(api, name)
    assert done["status"]["phase"] == "Succeeded", _log(api, name)
    ip = done["status"]["podIP"]
    assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("10.244.0.0/16")
    assert done["status"]["podIPs"] == [{"ip": ip}]
    seen = json.loads(_log(api, name).strip().splitlines()[-1])
    assert seen["hostname"] == name
    assert seen["resolv"] == ("search default.svc.cluster.local svc.cluster.local cluster.local\n"
                              "nameserver 10.96.0.10\noptions ndots:5\n")
    assert f"{ip}\t{fqdn}\t{name}" in seen["hosts"]
    assert seen["own_fqdn"] == ip
    assert seen["api_name"] == name
    assert seen["namespace"] == "default"
    assert seen["env_ip"] == ip


PEER_WAITER = textwrap.dedent("""
    import os, socket
    from tfjob_worker import peers
    address = os.environ["PEER"] + ":2222"
    try:
        socket.gethostbyname(os.environ["PEER"])
        print("peer already resolvable", flush=True)
    except socket.gaierror as exc:
        print(f"peer not resolvable yet: {exc}", flush=True)
    peers.wait_reachable(address)  # the worker runtime's own wait for its leader
    with socket.create_connection((os.environ["PEER"], 2222), timeout=5) as s:
        print("joined:", s.recv(16).decode(), flush=True)
""")

PEER_SERVER = textwrap.dedent("""
    import socket
    srv = socket.create_server(("", 2222))
    while True:
        conn, _ = srv.accept()
        conn.sendall(b"hello")
        conn.close()
""")


def test_pod_that_starts_before_its_peers_record_exists_still_joins(api: kubernetes.client.CoreV1Api) -> None:
    svc = unique("race")
    _headless(api, svc)
    early, late = f"{svc}-0", f"{svc}-1"
    worker_image = Path(__file__).resolve().parents[2] / "worker_image"
    waiter = python_pod(early, PEER_WAITER, hostname=early, subdomain=svc,
                        container={"env": [{"name": "PEER", "value": f"{late}.{svc}.default.svc"},
                                           {"name": "PYTHONPATH", "value": str(worker_image)}]})
    waiter["metadata"]["labels"]["peer-of"] = svc
    api.create_namespaced_pod("default", waiter)
    # The early pod has looked its peer up, and found no record, before the peer exists at all.
    wait_for(lambda: "peer not resolvable yet" in _log(api, early), 30, what=f"{early} failing to resolve its peer")
    server = python_pod(late, PEER_SERVER, hostname=late, subdomain=svc)
    server["metadata"]["labels"]["peer-of"] = svc
    api.create_namespaced_pod("default", server)
    assert _finished(api, early)["status"]["phase"] == "Succeeded"
    assert _log(api, early).strip().splitlines()[-1] == "joined: hello"


def test_cut_link_loses_packets_until_healed_and_shaping_delays_them(net_cluster: LocalClusterThread,
                                             api: kubernetes.client.CoreV1Api) -> None:
    svc = unique("cut")
    _headless(api, svc)
    talker = python_pod(svc, textwrap.dedent("""
        import socket, sys, time
        srv = socket.create_server(("", 2222))
        print("listening", flush=True)
        while True:
            conn, _ = srv.accept()
            conn.sendall(b"pong")
            conn.close()
    """), restart="Always", hostname=svc, subdomain=svc)
    talker["metadata"]["labels"]["peer-of"] = svc
    api.create_namespaced_pod("default", talker)
    wait_for(lambda: "listening" in _log(api, svc), 30, what="the server pod listening")
    ip = pod_dict(api, svc)["status"]["podIP"]  # type: ignore[index]
    network = net_cluster.cluster.network
    assert network is not None

    def ping() -> bool:
        try:
            reader_writer = net_cluster.call(network.net.open_connection(ip, 2222, timeout=1.0))
        except (OSError, TimeoutError):
            return False
        reader_writer[1].close()
        return True

    assert wait_for(ping, 10, what="the pod reachable")
    # A command exec'd in the container runs in the pod's namespaces: its hostname, its resolv.conf, its IP.
    spec = net_cluster.kubelet.exec_spec("default", svc, None)
    shell = "hostname; grep nameserver /etc/resolv.conf; ip -4 -o addr show eth0"
    seen = subprocess.run(spec.command(["sh", "-c", shell]), env=spec.env, cwd=spec.cwd, capture_output=True,
                          text=True, timeout=10)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.splitlines()[:2] == [svc, "nameserver 10.96.0.10"]
    assert f"inet {ip}/16" in seen.stdout
    net_cluster.call(net_cluster.kubelet.partition("default", svc))
    assert not ping()
    net_cluster.call(net_cluster.kubelet.heal("default", svc))
    assert wait_for(ping, 10, what="the pod reachable again after heal")

    def connect_seconds() -> float:
        began = time.monotonic()
        assert ping()
        return time.monotonic() - began

    net_cluster.call(net_cluster.kubelet.shape("default", svc, delay_ms=150))
    assert connect_seconds() >= 0.3  # SYN and SYN-ACK each held 150 ms
    net_cluster.call(net_cluster.kubelet.unshape("default", svc))
    assert connect_seconds() < 0.3
    api.delete_namespaced_pod(svc, "default", grace_period_seconds=0)


def test_stopping_the_plane_removes_its_namespaces(tmp_path: Path) -> None:
    with LocalClusterThread(nodes="1x{cpu:2,memory:4Gi}", workdir=tmp_path, pod_network="on") as c:
        client = core_api(c.url)
        name = unique("gone")
        client.create_namespaced_pod("default", python_pod(name, "import time; time.sleep(600)"))
        wait_for(lambda: (pod_dict(client, name) or {}).get("status", {}).get("podIP"), 30, what="a pod IP")
        network = c.cluster.network
        assert network is not None
        prefix = network.net.netns
        assert any(n.startswith(prefix + "-") for n in iproute.netns_names())
        client.api_client.close()
    assert not [n for n in iproute.netns_names() if n.startswith(prefix)]


def test_no_serviceaccount_files_when_the_pod_opts_out(api: kubernetes.client.CoreV1Api) -> None:
    name = unique("nosa")
    code = "import os; print(os.path.exists('/var/run/secrets/kubernetes.io/serviceaccount/token'))"
    api.create_namespaced_pod("default", python_pod(name, code, automountServiceAccountToken=False))
    assert _finished(api, name)["status"]["phase"] == "Succeeded"
    assert _log(api, name).strip() == "False"


def test_port_forward_reaches_the_pods_own_port_not_the_hosts(api: kubernetes.client.CoreV1Api) -> None:
    """A pod on the network has a loopback of its own: port-forward (the official client's, through the API
    server) dials the pod's IP from the plane's namespace, as kubelet's does, never this host's 127.0.0.1."""
    from kubernetes.stream import portforward

    name = unique("pf")
    api.create_namespaced_pod("default", python_pod(name, PEER_SERVER, restart="Always"))
    wait_for(lambda: (pod_dict(api, name) or {}).get("status", {}).get("phase") == "Running", 60,
             what=f"pod {name} Running")

    def greeting() -> bytes:
        forward = portforward(api.connect_get_namespaced_pod_portforward, name, "default", ports="2222")
        sock = forward.socket(2222)
        sock.setblocking(True)
        try:
            return bytes(sock.recv(16))
        finally:
            sock.close()

    # the server may still be binding when the pod turns Running: bounded retries until it answers
    assert wait_for(greeting, 30, interval=0.5, what="the pod's greeting through port-forward") == b"hello"
    api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
