"""The pod network as the plane runs it: the namespaces, the cluster DNS, and the API server's sockets inside.

`choose(mode)` decides whether the plane gets one (`auto`: where namespaces can be made; `on`: or fail
saying why; `off`: loopback ports). `PlaneNetwork.start` makes the network, starts the DNS and opens two
API server sockets in the plane's namespace: the `kubernetes` Service's ClusterIP:443 (TLS, for pods) and
the namespace's own 127.0.0.1 at the host listener's port (plain HTTP, as on the host). Pods have a
loopback of their own and cannot reach the second; a process of the plane's run in the plane's namespace
(`tfjob local`'s operator, which must reach pod IPs as an in-cluster operator does) uses it with the
host's kubeconfig unchanged.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

from kubelocal.network.apiaccess import server_ssl_context, serving_certificate
from kubelocal.network.available import pod_network_available
from kubelocal.network.dns import ClusterRecords, DnsServer
from kubelocal.network.enter import NETNS_DIR
from kubelocal.network.nssocket import Listen
from kubelocal.network.podnet import PodNetwork
from kubelocal.pki import CertificateAuthority

MODES = ("auto", "on", "off")


def choose(mode: str) -> tuple[bool, str]:
    """(use a pod network, why not) for `--pod-network auto|on|off`; ValueError for `on` where none can be made."""
    if mode not in MODES:
        raise ValueError(f"pod_network: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "off":
        return False, "pod network off"
    ok, reason = pod_network_available()
    if ok:
        return True, ""
    if mode == "on":
        raise ValueError(f"pod_network: on, but this machine cannot make pod namespaces: {reason}")
    return False, reason


@dataclass
class PlaneSockets:
    """The API server's sockets in the plane's namespace, with the TLS context of the first."""

    api_tls: socket.socket
    api_local: socket.socket
    ssl_context: ssl.SSLContext


class PlaneNetwork:
    """The plane's `PodNetwork` with its DNS server and the API server's sockets; `start()`, then `stop()`."""

    def __init__(self, records: ClusterRecords, ca: CertificateAuthority) -> None:
        self.records = records
        self.ca = ca
        self.net = PodNetwork()
        self.dns: DnsServer | None = None
        self.sockets: PlaneSockets | None = None

    @property
    def netns_path(self) -> str:
        """The plane namespace's path, for `nsenter --net=`."""
        return f"{NETNS_DIR}/{self.net.netns}"

    def start(self, api_port: int) -> PlaneSockets:
        """Make the network (blocking: run it off the event loop), start the DNS, open the API server's sockets."""
        self.net.start()
        try:
            udp, tcp, api_tls, api_local = self.net.open_sockets([
                Listen("udp", self.net.dns_ip, 53), Listen("tcp", self.net.dns_ip, 53),
                Listen("tcp", self.net.api_ip, 443), Listen("tcp", "127.0.0.1", api_port),
            ])
            self.dns = DnsServer(udp, tcp, self.records).start()
            context = server_ssl_context(*serving_certificate(self.ca, [self.net.api_ip]))
            self.sockets = PlaneSockets(api_tls, api_local, context)
        except BaseException:
            self.stop()
            raise
        return self.sockets

    def stop(self) -> None:
        """Stop the DNS, close the sockets, remove every namespace. Call after the pods' processes are gone."""
        if self.dns is not None:
            self.dns.stop()
            self.dns = None
        if self.sockets is not None:
            for sock in (self.sockets.api_tls, self.sockets.api_local):
                sock.close()
            self.sockets = None
        self.net.teardown()

    def enter_plane(self, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` in the plane's namespace (it reaches every pod IP and the API at 127.0.0.1)."""
        return ["nsenter", f"--net={self.netns_path}", "--", *argv]
