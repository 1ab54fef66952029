"""The kubelet's side of the pod network (the CNI and the sandbox): a pod's namespace and IP, the files a
kubelet writes for it, and its containers' command lines entering that namespace.

`PodNetworking.attach` gives a pod its place (its IP goes into `status.podIP`); `pod_spec` turns a
container's process spec into one that runs inside the pod's namespaces, and so do exec and exec probes
(`PodProcessSpec.command`); `dial` is how probes reach a pod's port; `detach` frees it all once the pod's
processes are gone. The network calls run iproute2, so they run off the kubelet's loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelocal import containers as ct
from kubelocal.network import PodAttachment, PodNetwork, enter_argv, in_cluster_env, write_pod_files
from kubelocal.network.enter import tmp_keeps
from kubelocal.network.podfiles import PodFiles, pod_hostname
from kubelocal.podtoken import PodCredentials

_POD_IP_FIELDS = ("status.podIP", "status.podIPs")


@dataclass(frozen=True)
class PodProcessSpec(ct.ProcessSpec):
    """A container's process spec inside its pod's namespaces: other commands (exec, exec probes) enter them too."""

    netns: str = ""
    binds: tuple[tuple[Path, str], ...] = ()
    hostname: str | None = None
    #: The pod's own temporary directory, its /tmp (host paths under /tmp it was given stay: tmp_keep).
    tmp: Path | None = None
    tmp_keep: tuple[str, ...] = ()

    def command(self, command: list[Any]) -> list[str]:
        return _absolute(enter_argv(self.netns, self.binds, super().command(command), hostname=self.hostname,
                                    tmp=self.tmp, tmp_keep=self.tmp_keep))


def _absolute(argv: list[str]) -> list[str]:
    """nsenter by its full path: a container's env may have no PATH."""
    return [shutil.which(argv[0]) or argv[0], *argv[1:]]


class PodNetworking:
    """The plane's pod network as the kubelet uses it."""

    def __init__(self, net: PodNetwork) -> None:
        self.net = net

    async def attach(self, pod: Mapping[str, Any], pod_dir: Path,
                     creds: PodCredentials | None) -> tuple[PodAttachment, PodFiles]:
        """The pod's namespace and IP (idempotent per uid), and its hosts, resolv.conf and ServiceAccount files
        (`creds`: its bound token and the CA, None when the pod mounts no token)."""
        meta = pod["metadata"]
        att = await asyncio.to_thread(self.net.add_pod, meta["uid"], meta.get("namespace", "default"), meta["name"])
        serviceaccount = (creds.token, creds.ca_pem) if creds is not None else None
        files = await asyncio.to_thread(write_pod_files, pod_dir / "net", pod, att.ip, self.net.dns_ip,
                                        serviceaccount=serviceaccount)
        return att, files

    def pod_spec(self, spec: ct.ProcessSpec, pod: Mapping[str, Any], container: Mapping[str, Any],
                 att: PodAttachment, files: PodFiles, tmp: Path | None = None) -> PodProcessSpec:
        """The container's spec entering the pod's namespaces, with the `kubernetes` Service's env and its IP;
        `tmp`, the pod's own temporary directory, is its /tmp."""
        env = dict(spec.env)
        for key, value in in_cluster_env(self.net.api_ip).items():
            env.setdefault(key, value)
        for var in container.get("env") or []:  # the downward API's pod IP is the pod's own here
            ref = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if ref in _POD_IP_FIELDS:
                env[var["name"]] = att.ip
        binds = tuple(files.binds())
        hostname = pod_hostname(pod)
        keep = tuple(tmp_keeps([*spec.argv, *env.values(), str(spec.cwd), *(str(h) for _, h in spec.mounts),
                                *(str(src) for src, _ in binds), *([str(tmp)] if tmp is not None else [])]))
        fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(ct.ProcessSpec)}
        fields.update(env=env, argv=_absolute(enter_argv(att.netns, binds, spec.argv, hostname=hostname, tmp=tmp,
                                                         tmp_keep=keep)))
        return PodProcessSpec(**fields, netns=att.netns, binds=binds, hostname=hostname, tmp=tmp, tmp_keep=keep)

    async def detach(self, uid: str) -> None:
        """Remove the pod's namespace and free its IP (after its processes are gone)."""
        await asyncio.to_thread(self.net.remove_pod, uid)

    async def dial(self, ip: str, port: int, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to a pod's port from the plane's namespace (probes, port-forward)."""
        return await self.net.open_connection(ip, port, timeout=timeout)

    def attachment(self, uid: str) -> PodAttachment:
        """The pod's attachment; KeyError when it has none (not started on the network, or gone)."""
        att = self.net.pod(uid)
        if att is None:
            raise KeyError(f"pod {uid} has no network attachment")
        return att
