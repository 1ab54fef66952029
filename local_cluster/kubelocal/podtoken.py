"""What a kubelet does for a pod's ServiceAccount: decide whether to mount its token
(`automountServiceAccountToken`), ask the TokenRequest API for a token bound to the pod, and write the
files of the mount (token, ca.crt, namespace) plus a kubeconfig that presents the token.

On a cluster the ServiceAccount admission plugin adds a projected volume and the kubelet fills it; here
`pod_credentials` does both steps for the kubelet, which writes the files under the pod's directory (the pod
network bind-mounts them at MOUNT_PATH; without it the pod's KUBECONFIG carries the same token).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelocal.containers import ContainerConfigError
from kubelocal.kubeclient import ApiError, KubeClient

MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The lifetime the kubelet asks for; kube-apiserver extends such pod-bound tokens (and marks `warnafter`).
KUBELET_EXPIRATION = 3607
ROOT_CA = "kube-root-ca.crt"
#: Seconds to wait for a new namespace's root-CA ConfigMap before leaving it to the kubelet's retry.
ROOT_CA_WAIT = 2.0


#: Seconds a kubelet reuses a namespace's ServiceAccount and root-CA ConfigMap it read (a real one watches them).
SHARED_OBJECT_SECONDS = 10.0


class SharedObjects:
    """The objects every pod of a namespace reads alike (its ServiceAccount, the root-CA ConfigMap), kept a few
    seconds: a burst of 4,000 pods then costs one TokenRequest each (bound to the pod, so not shared), not three
    requests through the kubelet's few connections. A real kubelet does not read the ServiceAccount at all (the
    admission plugin decides the mount) and serves ConfigMaps from a watch."""

    def __init__(self, client: KubeClient, ttl: float = SHARED_OBJECT_SECONDS) -> None:
        self.client, self.ttl = client, ttl
        self._kept: dict[str, tuple[float, dict[str, Any]]] = {}

    async def get(self, path: str) -> dict[str, Any]:
        now = time.monotonic()
        kept = self._kept.get(path)
        if kept is not None and now - kept[0] < self.ttl:
            return kept[1]
        obj: dict[str, Any] = await self.client.get(path)
        self._kept[path] = (now, obj)
        return obj


@dataclass(frozen=True)
class PodCredentials:
    """What the kubelet mounts for a pod: its bound token, the cluster CA and the pod's namespace."""

    token: str
    ca_pem: str
    namespace: str
    service_account: str


def account_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def automount(pod: Mapping[str, Any], account: Mapping[str, Any]) -> bool:
    """The pod's `automountServiceAccountToken`, else its ServiceAccount's, else true (kube's rule)."""
    for value in ((pod.get("spec") or {}).get("automountServiceAccountToken"),
                  account.get("automountServiceAccountToken")):
        if value is not None:
            return bool(value)
    return True


def token_request(pod: Mapping[str, Any], expiration: int = KUBELET_EXPIRATION) -> dict[str, Any]:
    """The TokenRequest a kubelet sends for a pod: bound to it, the kubelet's lifetime, the API's audience."""
    meta = pod.get("metadata") or {}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
        "expirationSeconds": expiration,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta.get("name"), "uid": meta.get("uid")}}}


def token_volume(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(volume name, its serviceAccountToken source) of the projected volume mounted at MOUNT_PATH, as
    kube-apiserver's ServiceAccount admission adds it (`kube-api-access-<suffix>`: the token, the root CA, the
    namespace); None when the pod has none (kubelocal's admission adds none: the kubelet reads the
    ServiceAccount to decide, `pod_credentials`)."""
    spec = pod.get("spec") or {}
    mounted = {m.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
               for m in c.get("volumeMounts") or [] if str(m.get("mountPath", "")).rstrip("/") == MOUNT_PATH}
    for volume in spec.get("volumes") or []:
        if volume.get("name") not in mounted:
            continue
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is not None and not token.get("audience"):
                return volume["name"], token
    return None


async def pod_credentials(client: KubeClient, pod: Mapping[str, Any],
                          shared: SharedObjects | None = None) -> PodCredentials | None:
    """The pod's ServiceAccount credentials, or None when its token is not to be mounted; `shared` keeps the
    ServiceAccount and the CA ConfigMap a few seconds for the next pods.

    A missing ServiceAccount is a ContainerConfigError, a missing CA ConfigMap an ApiError: the kubelet
    retries both, as a real one retries a failed volume mount."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    name = account_name(pod)
    base = f"/api/v1/namespaces/{ns}"
    shared = shared or SharedObjects(client, ttl=0.0)
    volume = token_volume(pod)
    expiration = KUBELET_EXPIRATION
    if volume is not None:  # admission decided to mount it: fill it in, as kubelet does, without the ServiceAccount
        expiration = int(volume[1].get("expirationSeconds") or KUBELET_EXPIRATION)
    else:
        try:
            account = await shared.get(f"{base}/serviceaccounts/{name}")
        except ApiError as exc:
            if exc.status == 404:
                raise ContainerConfigError(f'serviceaccount "{name}" not found in namespace {ns}') from None
            raise
        if not automount(pod, account):
            return None
    issued = await client.post(f"{base}/serviceaccounts/{name}/token", token_request(pod, expiration))
    ca = await _root_ca(shared, base, ROOT_CA_WAIT)
    ca_pem = (ca.get("data") or {}).get("ca.crt") or ""
    return PodCredentials(issued["status"]["token"], ca_pem, ns, name)


async def _root_ca(shared: SharedObjects, base: str, wait: float) -> dict[str, Any]:
    """The namespace's root-CA ConfigMap. In a namespace made a moment ago the publisher may not have
    written it yet: wait for it a little (bounded), then let the kubelet's retry take over (the ApiError)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return await shared.get(f"{base}/configmaps/{ROOT_CA}")
        except ApiError as exc:
            if exc.status != 404 or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.05)


def write_mount(directory: Path, creds: PodCredentials) -> Path:
    """The ServiceAccount mount's files under `directory` (owner-only; replaced whole, as the kubelet's
    atomic writer does)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, text in (("token", creds.token), ("ca.crt", creds.ca_pem), ("namespace", creds.namespace)):
        path = directory / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    return directory


def write_token_kubeconfig(path: Path, url: str, creds: PodCredentials, ca_pem: str | None = None) -> Path:
    """A kubeconfig for `url` that authenticates with the pod's token (for pods without the pod network,
    whose clients cannot use in-cluster config), trusting `ca_pem` when the server speaks TLS."""
    user = f"system:serviceaccount:{creds.namespace}:{creds.service_account}"
    cluster: dict[str, str] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": creds.token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user, "namespace": creds.namespace}}],
        "current-context": "local", "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(config, indent=2))  # JSON is YAML; yaml.safe_dump took 16 ms on the long token
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
