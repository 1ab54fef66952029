"""Kueue v0.17.0 beside the upstream plane: its controller manager (built by `make upstream`, `upstream/kueue/`) run
on the host against the plane's kube-apiserver, with what Kueue's release manifests install that it needs.

What is installed is read from Kueue's own module in Go's module cache (`sigs.k8s.io/kueue@v0.17.0`, which its
build downloads), as `kustomize build config/default` would lay it out: the CRDs of `config/components/crd`
(their conversion webhooks patched in), the webhook configurations of `config/components/webhook` (every
integration's, with the kustomization's namespace selectors; Kueue answers those of integrations it does not
run with a no-op), the empty certificate Secret of `config/components/internalcert`, all named `kueue-*` in
`kueue-system`. Kueue's internal certificate management then writes its serving certificate and injects the CA
into the webhooks and CRDs, as in a cluster.

The one difference from a cluster: Kueue is a host process, not a pod. Its webhook Service has no selector and
an EndpointSlice of ours points at the host's address (kube-apiserver's `--enable-aggregator-routing` dials a
ready endpoint, through the plane's egress proxy, which reaches host addresses directly). It runs as the
plane's admin (not the release's RBAC role), without leader election and without its visibility API server
(`VisibilityOnDemand=false`; it would need an APIService).

`stop()` ends the process and deletes the webhook configurations, the Service and the EndpointSlice, so the plane
admits as before; the CRDs and Kueue's objects stay, as after deleting Kueue's Deployment.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import aiohttp
import yaml

from kubelocal.kubeclient import ApiError, KubeClient
from kubelocal.lifeline import ChildProcess, Lifeline, spawn
from kubelocal.ports import free_ports

from .build import KUEUE, UpstreamError, binaries, find_go
from .cluster import host_address as cluster_host_address
from .plane import UpstreamPlane, log_tail

MODULE = f"sigs.k8s.io/kueue@{KUEUE.version}"
NAMESPACE = "kueue-system"
PREFIX = "kueue-"
SERVICE = f"{PREFIX}webhook-service"
SECRET = f"{PREFIX}webhook-server-cert"
#: The EndpointSlice's manager (`endpointslice.kubernetes.io/managed-by`): not KCM's, so its controllers leave it.
MANAGED_BY = "kubelocal.upstream.kueue"
#: Integrations enabled unless told otherwise: Kubeflow's TFJob, which the operator serves as `kubeflow.org/v1`.
FRAMEWORKS = ("kubeflow.org/tfjob",)
START_TIMEOUT = 120.0
#: The Secret's keys Kueue reads from its certDir (OPA cert-controller's names).
CERT_FILES = ("ca.crt", "tls.key", "tls.crt")
STOP_GRACE = 10.0
WEBHOOK_KINDS = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
                 "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}


class KueueMissing(UpstreamError):
    """Kueue's binary or its module (manifests) is not there; the message says how to get them."""


def module_dir() -> Path:
    """Kueue's module in Go's module cache (GOMODCACHE, else `go env GOMODCACHE`, else ~/go/pkg/mod)."""
    cache = os.environ.get("GOMODCACHE")
    if not cache:
        with contextlib.suppress(UpstreamError, OSError):
            cache = subprocess.run([find_go(), "env", "GOMODCACHE"], capture_output=True, text=True,
                                   check=False, timeout=30).stdout.strip()
    where = Path(cache or Path.home() / "go" / "pkg" / "mod") / MODULE
    if not (where / "config" / "components" / "crd" / "kustomization.yaml").is_file():
        raise KueueMissing(f"Kueue's manifests are not in Go's module cache ({where} is missing): run `make upstream` "
                           f"(building Kueue downloads {MODULE}); set GOMODCACHE if your cache is elsewhere")
    return where


def find_binary() -> Path:
    try:
        return binaries("kueue")["kueue"]
    except UpstreamError as exc:
        raise KueueMissing(str(exc)) from None


#: libyaml's loader where PyYAML has it: Kueue's CRDs are megabytes of YAML.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=_LOADER) if doc]


def _service_ref(ref: Mapping[str, Any]) -> dict[str, Any]:
    """A reference to `webhook-service` in `system`, as kustomize's namePrefix and namespace rewrite it."""
    return {**ref, "name": PREFIX + ref["name"], "namespace": NAMESPACE}


def crds(module: Path) -> list[dict[str, Any]]:
    """config/components/crd: its resources with its (uncommented) conversion webhook patches applied."""
    base = module / "config" / "components" / "crd"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    found = {doc["metadata"]["name"]: doc for res in kustomization["resources"] for doc in _load_all(base / res)}
    for patch in kustomization.get("patches") or []:
        for doc in _load_all(base / patch["path"]):
            conversion = copy.deepcopy((doc.get("spec") or {}).get("conversion"))
            if conversion is None:
                continue
            client = conversion["webhook"]["clientConfig"]
            client["service"] = _service_ref(client["service"])
            found[doc["metadata"]["name"]]["spec"]["conversion"] = conversion
    return list(found.values())


def webhook_configurations(module: Path) -> list[dict[str, Any]]:
    """config/components/webhook's configurations, its patches (merged by webhook name) applied, renamed."""
    base = module / "config" / "components" / "webhook"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    docs = [d for d in _load_all(base / "manifests.yaml") if d.get("kind") in WEBHOOK_KINDS]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load(entry.get("patch") or "null") or {}
        target = by_name.get((patch.get("kind"), (patch.get("metadata") or {}).get("name")))
        if target is None:
            continue
        hooks = {h["name"]: h for h in target["webhooks"]}
        for change in patch.get("webhooks") or []:
            hooks[change["name"]].update({k: v for k, v in change.items() if k != "name"})
    for doc in docs:
        doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            hook["clientConfig"]["service"] = _service_ref(hook["clientConfig"]["service"])
    return docs


def configuration(*, webhook_host: str, webhook_port: int, health_port: int, cert_dir: Path,
                  frameworks: Sequence[str]) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2): the release's, minus leader election and metrics."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": webhook_host, "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE, "webhookSecretName": SECRET},
        "integrations": {"frameworks": list(frameworks)},
    }


def service(webhook_port: int) -> dict[str, Any]:
    """config/components/webhook/service.yaml without a selector (nothing in the cluster serves it)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": webhook_port}]}}


def endpoint_slice(address: str, webhook_port: int) -> dict[str, Any]:
    """The host's address as the Service's one ready endpoint (the port named as the Service's)."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{SERVICE}-host", "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": SERVICE,
                                    "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": webhook_port, "protocol": "TCP"}]}


class Kueue:
    """`await kueue.start()` installs Kueue's manifests and runs its controller manager until its webhooks answer
    through kube-apiserver; `await kueue.stop()` ends it and takes its webhooks out."""

    def __init__(self, plane: UpstreamPlane, directory: Path, *, host_address: str | None = None,
                 frameworks: Sequence[str] = FRAMEWORKS, binary: Path | None = None,
                 module: Path | None = None) -> None:
        self.plane = plane
        self.dir = Path(directory).resolve()
        self.binary = binary or find_binary()
        self.module = module or module_dir()
        #: Where its webhook server listens and its EndpointSlice points: a host address, not loopback (refused
        #: in EndpointSlices), reached by the egress proxy from the host.
        self.host_address = host_address or cluster_host_address()
        self.frameworks = tuple(frameworks)
        self.webhook_port, self.health_port = free_ports(2)
        self.lifeline = Lifeline()
        self.process: ChildProcess | None = None
        self._log: IO[bytes] | None = None
        self._installed: list[str] = []

    @property
    def log_path(self) -> Path:
        return self.dir / "kueue.log"

    async def start(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "certs").mkdir(parents=True, mode=0o700)
        config = configuration(webhook_host=self.host_address, webhook_port=self.webhook_port,
                               health_port=self.health_port, cert_dir=self.dir / "certs",
                               frameworks=self.frameworks)
        (self.dir / "config.yaml").write_text(yaml.safe_dump(config))
        client = self.plane.client(user_agent="kubelocal-kueue-install")
        try:
            await self._install(client)
            self.lifeline.start()
            self._log = self.log_path.open("ab")
            env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TZ") if k in os.environ}
            self.process = spawn([str(self.binary), f"--config={self.dir / 'config.yaml'}",
                                  "--feature-gates=VisibilityOnDemand=false"], cwd=self.dir,
                                 env={**env, "KUBECONFIG": str(self.plane.admin_kubeconfig)}, stdout=self._log,
                                 lifeline=self.lifeline)
            await self._wait_ready(client)
        except BaseException:
            await client.close()
            await self.stop()
            raise
        await client.close()

    async def _apply(self, client: KubeClient, collection: str, obj: Mapping[str, Any]) -> None:
        try:
            await client.post(collection, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
            await client.patch(f"{collection}/{obj['metadata']['name']}", obj)

    async def _install(self, client: KubeClient) -> None:
        await self._apply(client, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": NAMESPACE}})
        for crd in crds(self.module):
            await self._apply(client, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        ns = f"/api/v1/namespaces/{NAMESPACE}"
        await self._apply(client, f"{ns}/secrets", {"apiVersion": "v1", "kind": "Secret",
                                                    "metadata": {"name": SECRET, "namespace": NAMESPACE}})
        await self._apply(client, f"{ns}/services", service(self.webhook_port))
        self._installed.append(f"{ns}/services/{SERVICE}")
        await self._apply(client, f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
                          endpoint_slice(self.host_address, self.webhook_port))
        self._installed.append(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/{SERVICE}-host")
        for doc in webhook_configurations(self.module):
            collection = f"/apis/admissionregistration.k8s.io/v1/{WEBHOOK_KINDS[doc['kind']]}"
            await self._apply(client, collection, doc)
            self._installed.insert(0, f"{collection}/{doc['metadata']['name']}")

    async def _wait_ready(self, client: KubeClient, timeout: float = START_TIMEOUT) -> None:
        """Its readyz, then a server-side dry run through its webhooks (kube-apiserver → egress → Kueue)."""
        deadline = time.monotonic() + timeout
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "kubelocal-probe"}}
        last = ""
        async with aiohttp.ClientSession() as session:
            while True:
                assert self.process is not None
                if self.process.returncode is not None:
                    raise KueueMissing(f"kueue exited with code {self.process.returncode} while starting; the end "
                                       f"of {self.log_path}:\n{log_tail(self.log_path)}")
                try:
                    await self._mount_certificate(client)
                    async with session.get(f"http://127.0.0.1:{self.health_port}/readyz",
                                           timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        if resp.status == 200:
                            await client.request("POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
                                                 body=probe, params={"dryRun": "All"})
                            return
                        last = f"readyz HTTP {resp.status}"
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    last = str(exc) or type(exc).__name__
                except ApiError as exc:
                    last = f"dry run through the webhooks: {exc}"
                if time.monotonic() > deadline:
                    raise KueueMissing(f"kueue not ready after {timeout:g}s ({last}); the end of {self.log_path}:\n"
                                       f"{log_tail(self.log_path)}")
                await asyncio.sleep(0.2)

    async def _mount_certificate(self, client: KubeClient) -> None:
        """What the kubelet does for the Deployment's Secret volume: the certificate Kueue keeps in its Secret, as
        files in its certDir (it waits for them there before it serves)."""
        cert_dir = self.dir / "certs"
        if (cert_dir / "tls.crt").exists():
            return
        secret = await client.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}")
        data = secret.get("data") or {}
        if not all(data.get(name) for name in CERT_FILES):
            return
        for name in CERT_FILES:  # tls.crt last: its presence is what Kueue waits for
            staged = cert_dir / f".{name}.tmp"
            staged.write_bytes(base64.b64decode(data[name]))
            staged.chmod(0o600)
            staged.rename(cert_dir / name)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM (SIGKILL after `grace`), then its webhooks out, so the plane admits as before."""
        proc = self.process
        if proc is not None:
            await proc.stop(grace)
            self.lifeline.forget(proc.pid)
            self.process = None
        self.lifeline.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._installed:
            client = self.plane.client(user_agent="kubelocal-kueue-install")
            try:
                for path in self._installed:
                    with contextlib.suppress(ApiError):
                        await client.delete(path)
            finally:
                await client.close()
            self._installed.clear()
