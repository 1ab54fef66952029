"""How pods reach the API server: a TLS listener inside the plane's namespace, at the `kubernetes` Service's
ClusterIP and port, with a serving certificate that in-cluster clients accept.

The plane's namespace has no link to the host's, so the API server takes a second listening socket that
lives in there (`PodNetwork.open_sockets`); pods reach it through the bridge and nothing else does. Safer
than a veth to the host (which would need a route and a filter to keep pods off every other host port).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelocal.pki import CertificateAuthority

#: The names kube-apiserver's serving certificate carries for in-cluster clients.
API_DNS_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)


def serving_certificate(
    ca: CertificateAuthority, ips: Sequence[str], dns_names: Sequence[str] = API_DNS_NAMES, *, days: int = 365
) -> tuple[str, str]:
    """(certificate PEM, key PEM) for the API server, signed by the plane's CA, valid for these IPs and names."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
    )


def server_ssl_context(cert_pem: str, key_pem: str) -> ssl.SSLContext:
    """A TLS server context holding this certificate and key (the key touches disk only in a private temp dir)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="kubelocal-tls-") as tmp:
        cert_file, key_file = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_file.write_text(cert_pem)
        key_file.touch(mode=0o600)
        key_file.write_text(key_pem)
        context.load_cert_chain(cert_file, key_file)
    return context
