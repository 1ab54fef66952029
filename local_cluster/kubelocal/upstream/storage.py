"""Volumes for claims on the upstream plane, as kind's local-path provisioner gives them: a default StorageClass
(`standard`), and for each claim of it a PersistentVolume at the directory the kubelet maps the claim to
(`<workdir>/volumes/<namespace>/<claim>`, docs/local-cluster.md "Volume mapping"). kube-controller-manager's
persistent volume controller binds the two and kube-scheduler's VolumeBinding then finds the claim bound; without a
bound claim it keeps the pod Pending, as on any cluster. When the claim is deleted, its volume is deleted too
(reclaim policy Delete); the directory and its files stay, as the kubelocal plane keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from kubelocal.kubeclient import ApiError, Informer, KubeClient

log = logging.getLogger(__name__)

CLASS = "standard"
PROVISIONER = "kubelocal.dev/local-path"
STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
}


def volume_for(claim: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The PersistentVolume that holds a claim: its size and access modes, pre-bound to it, at its directory."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    namespace, name = meta.get("namespace") or "default", meta["name"]
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage") or "1Gi"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": CLASS,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": str(workdir / "volumes" / namespace / name), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": name,
                         "uid": meta["uid"]},
        },
    }


class LocalPathProvisioner:
    """Provisions a volume for each unbound claim of the `standard` class; deletes the released ones it made."""

    def __init__(self, client: KubeClient, workdir: Path) -> None:
        self.client = client
        self.workdir = workdir
        self._claims = Informer(client, "/api/v1/persistentvolumeclaims", self._on_claim)
        self._volumes = Informer(client, "/api/v1/persistentvolumes", self._on_volume)
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        try:
            await self.client.post("/apis/storage.k8s.io/v1/storageclasses", STORAGE_CLASS)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._tasks = [asyncio.create_task(self._claims.run(), name="provisioner-claims"),
                       asyncio.create_task(self._volumes.run(), name="provisioner-volumes")]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._pending]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._pending, return_exceptions=True)
        self._tasks = []

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _on_claim(self, kind: str, claim: dict[str, Any]) -> None:
        spec = claim.get("spec") or {}
        if kind == "DELETED" or spec.get("volumeName") or spec.get("storageClassName") != CLASS:
            return
        if claim["metadata"].get("deletionTimestamp"):
            return
        self._spawn(self._provision(claim))

    def _on_volume(self, kind: str, volume: dict[str, Any]) -> None:
        annotations = volume["metadata"].get("annotations") or {}
        if kind == "DELETED" or annotations.get("pv.kubernetes.io/provisioned-by") != PROVISIONER:
            return
        if (volume.get("status") or {}).get("phase") == "Released":
            self._spawn(self._delete(volume["metadata"]["name"]))

    async def _provision(self, claim: dict[str, Any]) -> None:
        try:
            await self.client.post("/api/v1/persistentvolumes", volume_for(claim, self.workdir))
        except ApiError as exc:
            if exc.status != 409:  # made already (a claim is seen again on each change until it is bound)
                log.warning("provisioning a volume for claim %s/%s failed: %s",
                            claim["metadata"].get("namespace"), claim["metadata"]["name"], exc)

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            await self.client.delete(f"/api/v1/persistentvolumes/{name}")
