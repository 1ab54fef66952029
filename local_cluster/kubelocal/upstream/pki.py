"""The upstream plane's certificates, as kubeadm lays them out: one CA (`kubelocal.pki.new_ca`) signing the API
server's serving certificate, a client certificate per component (its user and groups are the certificate's CN
and O), each node's `system:node:<name>` identity and kubelet serving certificate, and the ServiceAccount
signing key pair.

Everything is written under the plane's own directory (`<workdir>/upstream/pki`), keys owner-only; nothing
goes anywhere else. Kubeconfigs embed their certificates (`*-data`), so a kubeconfig is one file to hand out.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelocal.pki import CertificateAuthority, new_ca

#: The names in-cluster clients and kubectl use for the API server.
API_DNS_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                 "localhost")
#: The user kube-apiserver presents to kubelets (kubeadm's name); bound to the kubelet API by RBAC below.
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
#: The aggregator's client identity towards extension API servers (`--requestheader-allowed-names`).
FRONT_PROXY_CLIENT = "front-proxy-client"
NODES_GROUP = "system:nodes"
MASTERS_GROUP = "system:masters"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM."""

    cert_pem: str
    key_pem: str


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def issue(ca: CertificateAuthority, common_name: str, *, organizations: Sequence[str] = (),
          dns_names: Sequence[str] = (), ips: Sequence[str] = (), server: bool = False, client: bool = False,
          days: int = 365) -> KeyPair:
    """A certificate signed by `ca` for this subject (CN = user, O = groups), with these SANs and usages."""
    if not (server or client):
        raise ValueError(f"certificate {common_name!r}: give it a use (server, client or both)")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
                         x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usages = [*([ExtendedKeyUsageOID.SERVER_AUTH] if server else []),
              *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(key))


def signing_key_pair() -> KeyPair:
    """The ServiceAccount token signing key (ES256): `cert_pem` holds the public key, `key_pem` the private one."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return KeyPair(public, _pem_key(key))


def subject(cert_pem: str) -> tuple[str, list[str]]:
    """(CN, [O...]) of a certificate: the user and groups kube-apiserver reads from a client certificate."""
    name = x509.load_pem_x509_certificate(cert_pem.encode()).subject
    cn = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return (str(cn[0].value) if cn else "", [str(o.value) for o in orgs])


def _write(path: Path, text: str, *, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


class PlanePki:
    """The plane's certificates in one directory: `ca.crt`, `apiserver.crt`, `<component>.crt`, `sa.key`/`sa.pub`...

    `PlanePki.create(directory, api_ips)` makes them all; nodes get theirs as they join (`node_identity`).
    """

    def __init__(self, directory: Path, ca: CertificateAuthority) -> None:
        self.dir = Path(directory)
        self.ca = ca

    @classmethod
    def create(cls, directory: Path, api_ips: Sequence[str], ca: CertificateAuthority | None = None) -> PlanePki:
        """A fresh CA (unless given) and every control-plane certificate; the API server's serving certificate
        covers `api_ips` (loopback, the advertised address, the `kubernetes` Service's ClusterIP)."""
        pki = cls(directory, ca or new_ca())
        pki.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write(pki.path("ca.crt"), pki.ca.cert_pem)
        _write(pki.path("ca.key"), pki.ca.key_pem, private=True)
        pki.save("apiserver", issue(pki.ca, "kube-apiserver", dns_names=API_DNS_NAMES, ips=api_ips, server=True))
        pki.save("apiserver-kubelet-client", issue(pki.ca, APISERVER_KUBELET_CLIENT, client=True))
        pki.save("front-proxy-client", issue(pki.ca, FRONT_PROXY_CLIENT, client=True))
        pki.save("admin", issue(pki.ca, "kubernetes-admin", organizations=[MASTERS_GROUP], client=True))
        pki.save("kube-controller-manager", issue(pki.ca, "system:kube-controller-manager", client=True))
        pki.save("kube-scheduler", issue(pki.ca, "system:kube-scheduler", client=True))
        sa = signing_key_pair()
        _write(pki.path("sa.pub"), sa.cert_pem)
        _write(pki.path("sa.key"), sa.key_pem, private=True)
        return pki

    def path(self, name: str) -> Path:
        return self.dir / name

    def save(self, name: str, pair: KeyPair) -> KeyPair:
        """Write `<name>.crt` and `<name>.key` (owner-only)."""
        _write(self.path(f"{name}.crt"), pair.cert_pem)
        _write(self.path(f"{name}.key"), pair.key_pem, private=True)
        return pair

    def load(self, name: str) -> KeyPair:
        return KeyPair(self.path(f"{name}.crt").read_text(), self.path(f"{name}.key").read_text())

    def node_identity(self, node: str) -> KeyPair:
        """The node's client certificate, `system:node:<node>` in `system:nodes` (what the Node authorizer and
        NodeRestriction recognise), written as `node-<node>.crt`."""
        return self.save(f"node-{node}", issue(self.ca, f"system:node:{node}", organizations=[NODES_GROUP],
                                               client=True))

    def kubelet_serving(self, node: str, ips: Sequence[str]) -> KeyPair:
        """The certificate the node's kubelet API serves with (the API server checks it against the CA)."""
        return self.save(f"kubelet-{node}", issue(self.ca, f"system:node:{node}", organizations=[NODES_GROUP],
                                                  dns_names=[node, "localhost"], ips=ips, server=True))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig(server: str, ca_pem: str, credentials: KeyPair | None, *, namespace: str = "default",
               context: str = "tfjob-local", token: str | None = None) -> dict[str, Any]:
    """A kubeconfig for `server` trusting `ca_pem`, authenticating with a client certificate (or a bearer token,
    or nothing), laid out as kubelocal's (`kubelocal.apiserver.write_kubeconfig`): one cluster, user and context
    named `context`."""
    user: dict[str, str] = {}
    if credentials is not None:
        user = {"client-certificate-data": _b64(credentials.cert_pem), "client-key-data": _b64(credentials.key_pem)}
    elif token is not None:
        user = {"token": token}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    """Write a kubeconfig (owner-only: it holds a private key or a token)."""
    return _write(Path(path), yaml.safe_dump(config, sort_keys=False), private=True)
