"""Cluster DNS: the records CoreDNS's kubernetes plugin serves, from the plane's own objects.

`<svc>.<ns>.svc.<domain>`: a ClusterIP Service's IP; a headless Service's ready pods (all of its pods with
an IP when `publishNotReadyAddresses` is set). `<hostname>.<subdomain>.<ns>.svc.<domain>`: a pod whose
`spec.hostname`/`spec.subdomain` name it, selected by the headless Service named `subdomain` (the same
readiness rule; this is where the start-up race of peers looking each other up comes from).
`<a-b-c-d>.<ns>.pod.<domain>`: that IP ("pods insecure"). Anything else is NXDOMAIN: nothing is forwarded
upstream. Names that exist but have no record of the asked type answer NOERROR with no answers.

Records come from a `ClusterRecords` object (the plane's store), called on the server's thread, so the
rules here are testable without sockets and the server without a plane.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from kubelocal.network.podfiles import CLUSTER_DOMAIN

#: Seconds a client may cache an answer (CoreDNS's kubernetes plugin default).
TTL = 5
_POLL = 0.2  # how often the server threads look at the stop flag


class ClusterRecords(Protocol):
    """What the DNS server reads: Services and Pods as the API returns them (plain dicts).

    A source that also has `endpoints(namespace, service)` (IP and hostname of each ready endpoint, from the
    Service's EndpointSlices, as CoreDNS reads them) is asked that instead of choosing pods itself."""

    def service(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def pods(self, namespace: str) -> Iterable[Mapping[str, Any]]: ...


def lookup(qname: str, records: ClusterRecords, *, domain: str = CLUSTER_DOMAIN) -> list[str] | None:
    """The IPv4 addresses of `qname`: None if the name does not exist, [] if it exists with none."""
    name = qname.lower().rstrip(".")
    suffix = "." + domain
    if not name.endswith(suffix):
        return None
    labels = name[: -len(suffix)].split(".")
    if len(labels) == 3 and labels[2] == "svc":
        service_name, namespace = labels[0], labels[1]
        service = records.service(namespace, service_name)
        if service is None:
            return None
        spec = service.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return []
        cluster_ip = spec.get("clusterIP")
        if cluster_ip and cluster_ip != "None":
            return [cluster_ip]
        return [ip for ip, _ in _addresses(service, records, namespace, service_name)]
    if len(labels) == 4 and labels[3] == "svc":
        hostname, subdomain, namespace = labels[0], labels[1], labels[2]
        service = records.service(namespace, subdomain)
        if service is None or (service.get("spec") or {}).get("clusterIP") not in ("None", None, ""):
            return None
        ips = [ip for ip, host in _addresses(service, records, namespace, subdomain) if host == hostname]
        return ips or None
    if len(labels) == 3 and labels[2] == "pod":
        try:
            return [str(ipaddress.IPv4Address(labels[0].replace("-", ".")))]
        except ValueError:
            return None
    return None


def _addresses(service: Mapping[str, Any], records: ClusterRecords, namespace: str,
               name: str) -> list[tuple[str, str | None]]:
    """(IP, hostname) of each endpoint of the Service: from its EndpointSlices when the records have them, else
    the pods the endpoints controller would choose (a pod's hostname counts where its subdomain is the Service)."""
    from_slices = getattr(records, "endpoints", None)
    if from_slices is not None:
        return sorted(from_slices(namespace, name), key=lambda e: ipaddress.IPv4Address(e[0]))
    return [(_ip(pod), (pod.get("spec") or {}).get("hostname")
             if (pod.get("spec") or {}).get("subdomain") == name else None)
            for pod in _endpoints(service, records, namespace)]


def _endpoints(service: Mapping[str, Any], records: ClusterRecords, namespace: str) -> list[Mapping[str, Any]]:
    """The pods the endpoints controller would list for this Service, in a stable order."""
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    if not selector:
        return []  # a Service without a selector has only the endpoints someone writes; the plane writes none
    publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
    chosen = []
    for pod in records.pods(namespace):
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if meta.get("deletionTimestamp") or not _ip(pod):
            continue
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        if publish_not_ready or _ready(status):
            chosen.append(pod)
    return sorted(chosen, key=lambda pod: ipaddress.IPv4Address(_ip(pod)))


def _ip(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def _ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def answer(query: dns.message.Message, records: ClusterRecords, *, domain: str = CLUSTER_DOMAIN) -> dns.message.Message:
    """The response to one query."""
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA
    response.flags &= ~dns.flags.RA
    if len(query.question) != 1:
        response.set_rcode(dns.rcode.FORMERR)
        return response
    question = query.question[0]
    addresses = lookup(question.name.to_text(), records, domain=domain)
    if addresses is None:
        response.set_rcode(dns.rcode.NXDOMAIN)
    elif question.rdtype in (dns.rdatatype.A, dns.rdatatype.ANY) and addresses:
        rrset = dns.rrset.from_text_list(question.name, TTL, dns.rdataclass.IN, dns.rdatatype.A, addresses)
        response.answer.append(rrset)
    if not response.answer:
        soa = f"ns.dns.{domain}. hostmaster.{domain}. 1 7200 1800 86400 {TTL}"
        response.authority.append(dns.rrset.from_text(f"{domain}.", TTL, "IN", "SOA", soa))
    return response


def _wire(query: dns.message.Message, records: ClusterRecords, domain: str, max_size: int) -> bytes:
    """The response as bytes, truncated (TC set, no records) if it does not fit in `max_size`."""
    response = answer(query, records, domain=domain)
    try:
        return response.to_wire(max_size=max_size)
    except dns.exception.TooBig:
        short = dns.message.make_response(query)
        short.flags |= dns.flags.TC | dns.flags.AA
        return short.to_wire()


class DnsServer:
    """Answers on a UDP and a TCP socket (already bound, e.g. in the plane's namespace), each on a thread."""

    def __init__(
        self, udp: socket.socket, tcp: socket.socket, records: ClusterRecords, *, domain: str = CLUSTER_DOMAIN
    ) -> None:
        self.udp, self.tcp, self.records, self.domain = udp, tcp, records, domain
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve_udp, name="kubelocal-dns-udp", daemon=True),
            threading.Thread(target=self._serve_tcp, name="kubelocal-dns-tcp", daemon=True),
        ]

    def start(self) -> DnsServer:
        self.udp.settimeout(_POLL)
        self.tcp.settimeout(_POLL)
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and close both sockets."""
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        self.udp.close()
        self.tcp.close()

    def _serve_udp(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.udp.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                query = dns.message.from_wire(data)
            except dns.exception.DNSException:
                continue  # not DNS: no answer, as a server does with garbage
            limit = query.payload if query.edns >= 0 else 512
            try:
                self.udp.sendto(_wire(query, self.records, self.domain, max(512, limit)), peer)
            except OSError:
                continue

    def _serve_tcp(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    while True:
                        head = _read_exactly(conn, 2)
                        if not head:
                            break
                        query = dns.message.from_wire(_read_exactly(conn, struct.unpack("!H", head)[0]))
                        reply = _wire(query, self.records, self.domain, 65535)
                        conn.sendall(struct.pack("!H", len(reply)) + reply)
                except (OSError, dns.exception.DNSException):
                    continue


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            if data:
                raise ConnectionError("DNS over TCP: connection closed mid-message")
            return b""
        data += chunk
    return data
