"""The upstream plane's command lines: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, from one
`Layout` (the plane's directory, ports and addresses). Pure functions, so each flag is testable without a binary.

Choices, each checked against the v1.37.2 / etcd v3.7.0 sources:
- etcd on loopback, its data inside the plane's directory, `--unsafe-no-fsync` (a throwaway store).
- kube-apiserver on loopback with TLS and one CA; `Node,RBAC` and the NodeRestriction admission plugin (off by
  default, so named); ServiceAccount tokens signed with the plane's key; `--enable-aggregator-routing`, so
  webhooks, CRD conversion and APIServices are dialled at a ready endpoint (the pod's IP), not the ClusterIP.
- Its "cluster" traffic (to kubelets, webhooks, aggregated APIs) goes through an egress selector: an HTTP CONNECT
  proxy of the plane's own on an abstract unix socket, which reaches the pod network's addresses from inside its
  namespace (`egress.py`). The pod network has no route from the host (docs/local-cluster.md, "Pod network").
- The advertised address must not be loopback: EndpointSlice validation refuses 127.0.0.0/8 (`ValidateEndpointIP`).
- kube-controller-manager with a client identity per controller (`--use-service-account-credentials`) and the
  node lifecycle timings made explicit (1.37's grace default is 50 s).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

#: kubeadm's Service range; its first address (10.96.0.1) is the `kubernetes` Service's ClusterIP.
SERVICE_CIDR = "10.96.0.0/12"
KUBERNETES_SERVICE_IP = "10.96.0.1"
CLUSTER_NAME = "tfjob-local"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: How often the node lifecycle controller looks at nodes (kube-controller-manager's default), at most.
NODE_MONITOR_PERIOD = 5.0


@dataclass(frozen=True)
class Ports:
    """Loopback ports of the plane's processes."""

    apiserver: int
    etcd_client: int
    etcd_peer: int
    controller_manager: int
    scheduler: int


@dataclass(frozen=True)
class Layout:
    """Where the plane keeps its files, which ports it listens on, and what it advertises."""

    dir: Path
    ports: Ports
    #: The address kube-apiserver advertises (the `kubernetes` EndpointSlice's): not loopback.
    advertise_address: str
    #: The egress proxy's unix socket ("@name": abstract, gone with its process).
    egress_socket: str
    #: The node lifecycle controller's grace before a silent node is unreachable, in seconds.
    node_monitor_grace: float = 50.0
    #: tolerationSeconds DefaultTolerationSeconds gives pods for not-ready / unreachable nodes (kube: 300).
    default_toleration_seconds: int = 300
    extra_apiserver_flags: tuple[str, ...] = field(default=())

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.dir / "etcd"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def kubeconfig(self, component: str) -> Path:
        return self.dir / f"{component}.kubeconfig"

    @property
    def egress_config(self) -> Path:
        return self.dir / "egress-selector.yaml"


def etcd(layout: Layout) -> list[str]:
    p = layout.ports
    client, peer = f"http://127.0.0.1:{p.etcd_client}", f"http://127.0.0.1:{p.etcd_peer}"
    return [
        "--name=tfjob-local",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=tfjob-local={peer}",
        "--unsafe-no-fsync",
        "--auto-compaction-mode=periodic", "--auto-compaction-retention=5m",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def apiserver(layout: Layout) -> list[str]:
    pki = layout.pki
    return [
        f"--etcd-servers=http://127.0.0.1:{layout.ports.etcd_client}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports.apiserver}",
        f"--advertise-address={layout.advertise_address}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--cert-dir={layout.dir / 'certs'}",  # never its default /var/run/kubernetes
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--enable-aggregator-routing=true",
        f"--egress-selector-config-file={layout.egress_config}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--default-not-ready-toleration-seconds={layout.default_toleration_seconds}",
        f"--default-unreachable-toleration-seconds={layout.default_toleration_seconds}",
        "--profiling=false",
        *layout.extra_apiserver_flags,
    ]


def egress_selector_config(layout: Layout) -> str:
    """Send the API server's "cluster" traffic (kubelets, webhooks by Service, aggregated APIs) through the
    plane's HTTP CONNECT proxy; control-plane and etcd traffic stays direct."""
    return (
        "apiVersion: apiserver.k8s.io/v1beta1\n"
        "kind: EgressSelectorConfiguration\n"
        "egressSelections:\n"
        "- name: cluster\n"
        "  connection:\n"
        "    proxyProtocol: HTTPConnect\n"
        "    transport:\n"
        "      uds:\n"
        f"        udsName: {json.dumps(layout.egress_socket)}\n"  # quoted: "@" cannot start a YAML scalar
    )


def _seconds(value: float) -> str:
    return f"{value:g}s"


def controller_manager(layout: Layout) -> list[str]:
    pki, kubeconfig = layout.pki, layout.kubeconfig("kube-controller-manager")
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={layout.ports.controller_manager}",
        f"--cert-dir={layout.dir / 'certs'}",
        "--leader-elect=false",
        f"--cluster-name={CLUSTER_NAME}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allocate-node-cidrs=false",  # pod IPs come from the pod network's plane-wide IPAM, not per node
        # the period must stay under the grace (a test's 4 s grace): a quarter of it, at most the default
        f"--node-monitor-period={_seconds(min(NODE_MONITOR_PERIOD, layout.node_monitor_grace / 4))}",
        f"--node-monitor-grace-period={_seconds(layout.node_monitor_grace)}",
        "--profiling=false",
    ]


def scheduler(layout: Layout) -> list[str]:
    kubeconfig = layout.kubeconfig("kube-scheduler")
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={layout.ports.scheduler}",
        f"--cert-dir={layout.dir / 'certs'}",
        "--leader-elect=false",
        "--profiling=false",
    ]
