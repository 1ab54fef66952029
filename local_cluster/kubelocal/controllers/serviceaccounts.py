"""The ServiceAccount controller and the root-CA publisher: every active namespace gets a `default`
ServiceAccount and a `kube-root-ca.crt` ConfigMap holding the cluster CA, and gets them back if
someone deletes or edits them (kube-controller-manager's `serviceaccount` and `root-ca-cert-publisher`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kubelocal.kubeclient import KubeClient

from .runtime import Controller, create_or_exists, ignore_missing

NS_PATH = "/api/v1/namespaces"
DEFAULT_SA = "default"
ROOT_CA = "kube-root-ca.crt"
ROOT_CA_KEY = "ca.crt"


class ServiceAccountController(Controller):
    name = "serviceaccount-controller"

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.namespaces = self.watch(NS_PATH, self._on_namespace)
        self.accounts = self.watch("/api/v1/serviceaccounts", self._on_account,
                                   params={"fieldSelector": f"metadata.name={DEFAULT_SA}"})

    def _on_namespace(self, kind: str, ns: dict[str, Any]) -> None:
        if kind != "DELETED":
            self.queue.add(ns["metadata"]["name"])

    def _on_account(self, kind: str, sa: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.queue.add(sa["metadata"]["namespace"])

    async def started(self) -> None:
        for _, ns in list(self.namespaces.cache.items()):
            self._on_namespace("ADDED", ns)

    async def sync(self, key: Hashable) -> None:
        ns = self.namespaces.cache.get(("", str(key)))
        if ns is None or ns["metadata"].get("deletionTimestamp") or ("", str(key)) in self.accounts.cache:
            return
        await create_or_exists(self.client.post(f"{NS_PATH}/{key}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT_SA}}))


class RootCAPublisher(Controller):
    name = "root-ca-cert-publisher"

    def __init__(self, client: KubeClient, ca_pem: str) -> None:
        super().__init__(client)
        self.ca_pem = ca_pem
        self.namespaces = self.watch(NS_PATH, self._on_namespace)
        self.maps = self.watch("/api/v1/configmaps", self._on_map, params={"fieldSelector": f"metadata.name={ROOT_CA}"})

    def _on_namespace(self, kind: str, ns: dict[str, Any]) -> None:
        if kind != "DELETED":
            self.queue.add(ns["metadata"]["name"])

    def _on_map(self, kind: str, cm: dict[str, Any]) -> None:
        if kind == "DELETED" or (cm.get("data") or {}).get(ROOT_CA_KEY) != self.ca_pem:
            self.queue.add(cm["metadata"]["namespace"])

    async def started(self) -> None:
        for _, ns in list(self.namespaces.cache.items()):
            self._on_namespace("ADDED", ns)

    async def sync(self, key: Hashable) -> None:
        ns = self.namespaces.cache.get(("", str(key)))
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        current = self.maps.cache.get((str(key), ROOT_CA))
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA, "annotations": {
                    "kubernetes.io/description": "Contains a CA bundle that can be used to verify the "
                                                 "kube-apiserver when using internal endpoints such as the "
                                                 "internal service IP or kubernetes.default.svc."}},
                "data": {ROOT_CA_KEY: self.ca_pem}}
        if current is None:
            await create_or_exists(self.client.post(f"{NS_PATH}/{key}/configmaps", body))
        elif (current.get("data") or {}).get(ROOT_CA_KEY) != self.ca_pem:
            await ignore_missing(self.client.patch(f"{NS_PATH}/{key}/configmaps/{ROOT_CA}", {"data": body["data"]}))
