"""What the plane itself keeps in the API for its clients, as kube-apiserver and kubeadm do on a cluster.

- `kube-public/pod-addressing`: how pods of this plane reach each other, so that a client (the TFJob operator)
  follows the plane instead of a setting kept in step by hand. `data.addressing` is `dns` (a pod network:
  each pod has its own IP and the cluster DNS answers for it) or `loopback` (pods share this machine's network:
  a distinct 127.0.0.1 port per pod); `data.detail` says why in words. Like kubeadm's `kube-public/cluster-info`
  it is readable by every authenticated caller (a Role and RoleBinding of the plane's own), and only the plane
  writes it. A cluster has no such ConfigMap: its pods use its DNS.
- On a pod network, the `default/kubernetes` Service (ClusterIP 10.96.0.1, port 443), which kube-apiserver keeps
  on every cluster: `kubernetes.default.svc` then resolves in pods, as on a cluster.
"""

from __future__ import annotations

import ssl
from typing import Any

from kubelocal.kubeclient import ApiError, KubeClient

NAMESPACE = "kube-public"
NAME = "pod-addressing"
#: Who may read it: every authenticated caller (a ServiceAccount's token, a user), as cluster-info.
READERS = ("system:authenticated", "system:unauthenticated")
API_SERVICE_PORT = 443


def addressing_data(pod_network: bool, why_not: str) -> dict[str, str]:
    """The ConfigMap's data for a plane with or without a pod network."""
    if pod_network:
        return {"addressing": "dns", "detail": "pod network: each pod has its own IP (10.244.0.0/16) and the "
                "cluster DNS (10.96.0.10) answers <pod>.<service>.<namespace>.svc, as on a cluster"}
    return {"addressing": "loopback", "detail": f"pods share this machine's network ({why_not}) and reach each "
            "other at 127.0.0.1, a distinct port per pod"}


def objects(pod_network: bool, why_not: str, api_ip: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for everything published, in the order to create them."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + NAMESPACE
    out: list[tuple[str, dict[str, Any]]] = [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        (f"/api/v1/namespaces/{NAMESPACE}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NAMESPACE},
            "data": addressing_data(pod_network, why_not)}),
        (f"{rbac}/roles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": f"kubelocal-{NAME}-reader", "namespace": NAMESPACE},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NAME], "verbs": ["get"]}]}),
        (f"{rbac}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"kubelocal-{NAME}-reader", "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"kubelocal-{NAME}-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in READERS]}),
    ]
    if pod_network and api_ip:
        out.append(("/api/v1/namespaces/default/services", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": api_ip, "type": "ClusterIP",
                     "ports": [{"name": "https", "port": API_SERVICE_PORT, "protocol": "TCP",
                                "targetPort": API_SERVICE_PORT}]}}))
    return out


async def publish(url: str, pod_network: bool, why_not: str, api_ip: str | None = None, *,
                  tls: ssl.SSLContext | None = None) -> None:
    """Create what the plane publishes (as the local admin: `tls` holds its credentials on a TLS server); what exists
    already is kept."""
    client = KubeClient(url, "kubelocal-publisher", tls=tls)
    try:
        for path, obj in objects(pod_network, why_not, api_ip):
            try:
                await client.post(path, obj)
            except ApiError as exc:
                if exc.status != 409:
                    raise
    finally:
        await client.close()
