"""A pod network for the local control plane, as a CNI bridge plugin makes it, kept inside network
namespaces the plane creates: pod IPs, cluster DNS, the files a kubelet writes, and link faults.

Nothing here imports the kubelet; the kubelet calls `PodNetwork.add_pod`, `write_pod_files` and
`enter_argv` (see docs/local-cluster.md, "Pod network").
"""

from kubelocal.network.apiaccess import server_ssl_context, serving_certificate
from kubelocal.network.available import netem_available, pod_network_available
from kubelocal.network.dns import ClusterRecords, DnsServer
from kubelocal.network.enter import enter_argv
from kubelocal.network.faults import cut, heal, is_cut, shape, unshape
from kubelocal.network.ipam import Ipam, IpamExhausted
from kubelocal.network.iproute import NetworkError
from kubelocal.network.nssocket import Listen
from kubelocal.network.podfiles import (
    SERVICEACCOUNT_MOUNT,
    PodFiles,
    in_cluster_env,
    render_hosts,
    render_resolv_conf,
    write_pod_files,
)
from kubelocal.network.podnet import PodAttachment, PodNetwork, cleanup_stale

__all__ = [
    "SERVICEACCOUNT_MOUNT",
    "ClusterRecords",
    "DnsServer",
    "Ipam",
    "IpamExhausted",
    "Listen",
    "NetworkError",
    "PodAttachment",
    "PodFiles",
    "PodNetwork",
    "cleanup_stale",
    "cut",
    "enter_argv",
    "heal",
    "in_cluster_env",
    "is_cut",
    "netem_available",
    "pod_network_available",
    "render_hosts",
    "render_resolv_conf",
    "server_ssl_context",
    "serving_certificate",
    "shape",
    "unshape",
    "write_pod_files",
]
