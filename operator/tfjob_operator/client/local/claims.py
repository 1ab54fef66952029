"""The claims `tfjob local` makes for its jobs on the upstream plane, as a user makes them on a cluster: each
PersistentVolumeClaim a pod template names, if missing (ReadWriteMany, the default StorageClass). kube-scheduler
keeps a pod whose claim is missing or unbound Pending; the plane's provisioner binds these to the directories the
kubelet maps claims to. The kubelocal plane's scheduler does not look at claims, so nothing is made there."""

from __future__ import annotations

from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.client.jobs import Clients
from tfjob_operator.kube import KubeError

SIZE = "1Gi"


def claims_of(jobs: list[TFJob], default_namespace: str) -> list[tuple[str, str]]:
    """(namespace, claim name) of every claim the jobs' pod templates name, each once, in order."""
    found: dict[tuple[str, str], None] = {}
    for job in jobs:
        namespace = job.metadata.namespace or default_namespace
        for spec in job.spec.tfReplicaSpecs.values():
            for volume in (spec.template.get("spec") or {}).get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim:
                    found[(namespace, claim)] = None
    return list(found)


def claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": SIZE}}}}


def ensure_claims(clients: Clients, jobs: list[TFJob]) -> list[str]:
    """Create the claims the jobs need that do not exist; the `namespace/name` of those made."""
    made = []
    for namespace, name in claims_of(jobs, clients.namespace):
        try:
            clients.kube.request_sync("POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim(name))
        except KubeError as exc:
            if exc.status != 409:
                raise
            continue
        made.append(f"{namespace}/{name}")
    return made
