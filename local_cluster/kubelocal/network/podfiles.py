"""What a kubelet writes for a pod on a cluster network: /etc/hosts, /etc/resolv.conf, the ServiceAccount
mount and the `kubernetes` Service's environment variables.

Pure renderers plus one function that writes the files into the pod's directory; `enter` bind-mounts them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
SERVICEACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The `kubernetes` Service's port as pods see it (kube-apiserver's secure port behind the ClusterIP).
API_SERVICE_PORT = 443


def pod_hostname(pod: Mapping[str, Any]) -> str:
    """The pod's hostname as the kubelet sets it: spec.hostname, else the pod's name cut to 63 characters."""
    spec = pod.get("spec") or {}
    name = spec.get("hostname") or (pod.get("metadata") or {}).get("name", "")
    return str(name)[:63].rstrip("-.")


def render_hosts(pod: Mapping[str, Any], pod_ip: str, *, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """/etc/hosts as the kubelet writes it: localhost lines, the pod's IP with its FQDN, then hostAliases."""
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    hostname = pod_hostname(pod)
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
    ]
    subdomain = spec.get("subdomain")
    if subdomain:
        lines.append(f"{pod_ip}\t{hostname}.{subdomain}.{namespace}.svc.{cluster_domain}\t{hostname}")
    else:
        lines.append(f"{pod_ip}\t{hostname}")
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        for alias in aliases:
            lines.append(f"{alias.get('ip', '')}\t" + "\t".join(alias.get("hostnames") or []))
    return "\n".join(lines) + "\n"


def render_resolv_conf(namespace: str, nameserver: str, *, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """/etc/resolv.conf for dnsPolicy ClusterFirst: the cluster DNS, the namespace's search path, ndots:5."""
    search = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
    return f"search {' '.join(search)}\nnameserver {nameserver}\noptions ndots:5\n"


def in_cluster_env(api_ip: str, port: int = API_SERVICE_PORT) -> dict[str, str]:
    """The `kubernetes` Service's variables a kubelet gives every pod; client libraries read the first two."""
    url = f"tcp://{api_ip}:{port}"
    return {
        "KUBERNETES_SERVICE_HOST": api_ip,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": url,
        f"KUBERNETES_PORT_{port}_TCP": url,
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": api_ip,
    }


@dataclass(frozen=True)
class PodFiles:
    """Host paths of the files to bind-mount into the pod (serviceaccount is a directory, or None)."""

    hosts: Path
    resolv_conf: Path
    serviceaccount: Path | None = None

    def binds(self) -> list[tuple[Path, str]]:
        """(host path, path in the pod) pairs, in mount order."""
        out = [(self.hosts, "/etc/hosts"), (self.resolv_conf, "/etc/resolv.conf")]
        if self.serviceaccount is not None:
            out.append((self.serviceaccount, SERVICEACCOUNT_MOUNT))
        return out


def write_pod_files(
    directory: Path,
    pod: Mapping[str, Any],
    pod_ip: str,
    nameserver: str,
    *,
    serviceaccount: tuple[str, str] | None = None,
    cluster_domain: str = CLUSTER_DOMAIN,
) -> PodFiles:
    """Write hosts, resolv.conf and (given (token, CA PEM)) the ServiceAccount directory under `directory`."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    directory.mkdir(parents=True, exist_ok=True)
    hosts = directory / "hosts"
    hosts.write_text(render_hosts(pod, pod_ip, cluster_domain=cluster_domain))
    resolv = directory / "resolv.conf"
    resolv.write_text(render_resolv_conf(namespace, nameserver, cluster_domain=cluster_domain))
    sa_dir = None
    if serviceaccount is not None:
        token, ca_pem = serviceaccount
        sa_dir = prepare_serviceaccount_dir(directory / "serviceaccount", token, ca_pem, namespace)
    return PodFiles(hosts=hosts, resolv_conf=resolv, serviceaccount=sa_dir)


def prepare_serviceaccount_dir(directory: Path, token: str, ca_pem: str, namespace: str) -> Path:
    """The projected ServiceAccount volume's files (token, ca.crt, namespace), readable by the owner only."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, text in (("token", token), ("ca.crt", ca_pem), ("namespace", namespace)):
        path = directory / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)  # a token refresh replaces the file whole, as the kubelet's atomic writer does
    return directory


