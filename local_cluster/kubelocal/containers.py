"""How the process kubelet turns a pod's container into a local process: env, volumes, command.

Pure functions over the pod dict plus the ConfigMaps/Secrets it references, so the rules (Kubernetes'
`$(VAR)` expansion, fieldRefs, envFrom precedence, the volume → host-directory mapping) are testable
without running anything.

Volume mapping (the one local-mode difference besides loopback TF_CONFIG): `emptyDir` (and anything
unknown) → `<pod dir>/volumes/<name>`; `persistentVolumeClaim` → `<workdir>/volumes/<namespace>/<claim>`,
shared by every pod that uses the claim; `hostPath` → itself; configMap/secret/downwardAPI/projected →
files written under `<pod dir>/volumes/<name>`. Each mountPath prefix in command, args, env values and
workingDir is rewritten to its host directory. There is no image: `ImageDefaults` stand in for its ENV
(defaults under the pod's env) and WORKDIR (the pod's work directory); terminationMessagePath is a file of
the pod's directory (or of the volume it lies in), which the kubelet reads when the container ends.
"""

from __future__ import annotations

import base64
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes.utils.quantity import parse_quantity

LOCAL_IP = "127.0.0.1"

#: Variables passed through from the kubelet's own environment (a container image would set these).
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                 "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "SSL_CERT_FILE")
#: Where a container writes its termination message unless its terminationMessagePath says otherwise.
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
#: The kubelet reads at most this much of a termination message file.
TERMINATION_MESSAGE_LIMIT = 4096
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_REF = re.compile(r"""^metadata\.(labels|annotations)\[['"](.+)['"]\]$""")


class ContainerConfigError(Exception):
    """The container cannot start as specified (kubelet's CreateContainerConfigError); names what is missing."""


@dataclass(frozen=True)
class ImageDefaults:
    """What a container's image would give it: ENV (the pod's own env wins) and WORKDIR.

    Locally there is no image filesystem: WORKDIR is the pod's work directory, and paths under it (in
    env values, command, args) are mapped there as a volume's mountPath is.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    #: The image's ENTRYPOINT as a local command: used when the container sets `args` but no `command`.
    entrypoint: tuple[str, ...] = ()


def image_repository(image: str) -> str:
    """`ghcr.io/x/op:1.2` and `ghcr.io/x/op@sha256:...` → `ghcr.io/x/op` (the key of a local image table)."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


def defaults_for(image: str | None, images: Mapping[str, ImageDefaults], fallback: ImageDefaults) -> ImageDefaults:
    """What the container's image gives it: its entry in the local image table, else the cluster's default."""
    return images.get(image_repository(image or ""), fallback)


@dataclass(frozen=True)
class ProcessSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: tuple[tuple[str, Path], ...] = ()
    #: Host file the container's terminationMessagePath maps to (the kubelet reads it when the run ends).
    termination_file: Path | None = None

    def command(self, command: list[Any]) -> list[str]:
        """Another command in this container's context (an exec probe): expanded, paths mapped, python local."""
        argv = [rewrite_paths(expand(str(part), self.env), list(self.mounts)) for part in command]
        if argv and _PYTHON.match(os.path.basename(argv[0])):
            argv[0] = sys.executable
        return argv


@dataclass(frozen=True)
class Refs:
    """ConfigMaps and Secrets of the pod's namespace by name (None: looked up and absent)."""

    configmaps: Mapping[str, Mapping[str, Any] | None]
    secrets: Mapping[str, Mapping[str, Any] | None]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, others kept, `$$` escapes a `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else text[i:end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def referenced_names(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets the pod's env, envFrom and volumes use."""
    configmaps: set[str] = set()
    secrets: set[str] = set()
    spec = pod.get("spec") or {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for source in container.get("envFrom") or []:
            if "configMapRef" in source:
                configmaps.add(source["configMapRef"].get("name", ""))
            if "secretRef" in source:
                secrets.add(source["secretRef"].get("name", ""))
        for var in container.get("env") or []:
            value_from = var.get("valueFrom") or {}
            if "configMapKeyRef" in value_from:
                configmaps.add(value_from["configMapKeyRef"].get("name", ""))
            if "secretKeyRef" in value_from:
                secrets.add(value_from["secretKeyRef"].get("name", ""))
    for volume in spec.get("volumes") or []:
        if "configMap" in volume:
            configmaps.add(volume["configMap"].get("name", ""))
        if "secret" in volume:
            secrets.add(volume["secret"].get("secretName", ""))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "configMap" in source:
                configmaps.add(source["configMap"].get("name", ""))
            if "secret" in source:
                secrets.add(source["secret"].get("name", ""))
    return configmaps, secrets


def field_ref_value(pod: Mapping[str, Any], field_path: str) -> str:
    """The value of a downward-API fieldRef (the paths Kubernetes allows in env)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "") or "default",
        "status.podIP": LOCAL_IP,
        "status.podIPs": LOCAL_IP,
        "status.hostIP": LOCAL_IP,
        "status.hostIPs": LOCAL_IP,
    }
    if field_path in simple:
        return str(simple[field_path])
    match = _LABEL_REF.match(field_path)
    if match:
        return str((meta.get(match[1]) or {}).get(match[2], ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ContainerConfigError(f"fieldRef {field_path!r} is not supported (use metadata.name, metadata.namespace, "
                               "metadata.uid, metadata.labels['KEY'], metadata.annotations['KEY'], spec.nodeName, "
                               "status.podIP or status.hostIP)")


def resource_field_value(container: Mapping[str, Any], ref: Mapping[str, Any],
                         node_allocatable: Mapping[str, Decimal]) -> str:
    """A resourceFieldRef: the container's limit/request (limits default to node allocatable), over divisor."""
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise ContainerConfigError(f"resourceFieldRef {resource!r}: use limits.cpu, requests.memory, ...")
    res = container.get("resources") or {}
    raw = (res.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (res.get("limits") or {}).get(name)
    value = Decimal(parse_quantity(raw)) if raw is not None else node_allocatable.get(name, Decimal(0))
    divisor = Decimal(parse_quantity(ref.get("divisor") or "1"))
    return str(math.ceil(value / divisor)) if divisor else str(value)


def _decode_secret(secret: Mapping[str, Any]) -> dict[str, str]:
    out = {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}
    out.update(secret.get("stringData") or {})
    return out


def _lookup(refs: Refs, kind: str, name: str) -> dict[str, str] | None:
    if kind == "ConfigMap":
        obj = refs.configmaps.get(name)
        return None if obj is None else {k: str(v) for k, v in (obj.get("data") or {}).items()}
    secret = refs.secrets.get(name)
    return None if secret is None else _decode_secret(secret)


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any], refs: Refs,
                  node_allocatable: Mapping[str, Decimal] | None = None) -> dict[str, str]:
    """The container's environment as Kubernetes computes it: envFrom, then env with `$(VAR)` expansion."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    cname = container.get("name", "")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind, ref = ("ConfigMap", source["configMapRef"]) if "configMapRef" in source else (
            "Secret", source.get("secretRef") or {})
        data = _lookup(refs, kind, ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(f'container {cname}: {kind.lower()} "{ref.get("name")}" not found '
                                       f"in namespace {namespace} (envFrom)")
        for key, value in data.items():
            name = (source.get("prefix") or "") + key
            if _ENV_NAME.match(name):
                env[name] = value
    for var in container.get("env") or []:
        name = var.get("name", "")
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        value_from = var["valueFrom"] or {}
        if "fieldRef" in value_from:
            env[name] = field_ref_value(pod, value_from["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in value_from:
            env[name] = resource_field_value(container, value_from["resourceFieldRef"], node_allocatable or {})
        elif "configMapKeyRef" in value_from or "secretKeyRef" in value_from:
            kind, ref = ("ConfigMap", value_from["configMapKeyRef"]) if "configMapKeyRef" in value_from else (
                "Secret", value_from["secretKeyRef"])
            data = _lookup(refs, kind, ref.get("name", ""))
            if data is None or ref.get("key") not in data:
                if ref.get("optional"):
                    continue
                what = (f'{kind.lower()} "{ref.get("name")}" not found' if data is None
                        else f'couldn\'t find key {ref.get("key")} in {kind} {namespace}/{ref.get("name")}')
                raise ContainerConfigError(f"container {cname}: env {name}: {what}")
            env[name] = data[ref["key"]]
    return env


def volume_host_paths(pod: Mapping[str, Any], pod_dir: Path, workdir: Path) -> dict[str, Path]:
    """Host directory for each pod volume, per the local volume mapping."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    paths: dict[str, Path] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume.get("name", "")
        if "persistentVolumeClaim" in volume:
            paths[name] = workdir / "volumes" / namespace / volume["persistentVolumeClaim"].get("claimName", name)
        elif "hostPath" in volume:
            paths[name] = Path(volume["hostPath"].get("path", "/"))
        else:
            paths[name] = pod_dir / "volumes" / name
    return paths


def volume_files(pod: Mapping[str, Any], volume: Mapping[str, Any], refs: Refs) -> dict[str, str] | None:
    """Files (relative path → content) a configMap/secret/downwardAPI/projected volume holds; None otherwise."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")

    def from_source(kind: str, source: Mapping[str, Any], name: str) -> dict[str, str]:
        data = _lookup(refs, kind, name)
        if data is None:
            if source.get("optional"):
                return {}
            raise ContainerConfigError(f'volume {volume.get("name")}: {kind.lower()} "{name}" not found '
                                       f"in namespace {namespace}")
        items = source.get("items")
        if not items:
            return dict(data)
        files = {}
        for item in items:
            if item.get("key") in data:
                files[item.get("path") or item["key"]] = data[item["key"]]
            elif not source.get("optional"):
                raise ContainerConfigError(f'volume {volume.get("name")}: no key {item.get("key")} in {kind} '
                                           f"{namespace}/{name}")
        return files

    def downward(items: list[Mapping[str, Any]]) -> dict[str, str]:
        return {item["path"]: field_ref_value(pod, (item.get("fieldRef") or {}).get("fieldPath", ""))
                for item in items if "fieldRef" in item}

    if "configMap" in volume:
        return from_source("ConfigMap", volume["configMap"], volume["configMap"].get("name", ""))
    if "secret" in volume:
        return from_source("Secret", volume["secret"], volume["secret"].get("secretName", ""))
    if "downwardAPI" in volume:
        return downward(volume["downwardAPI"].get("items") or [])
    if "projected" in volume:
        files: dict[str, str] = {}
        for source in volume["projected"].get("sources") or []:
            if "configMap" in source:
                files.update(from_source("ConfigMap", source["configMap"], source["configMap"].get("name", "")))
            elif "secret" in source:
                files.update(from_source("Secret", source["secret"], source["secret"].get("name", "")))
            elif "downwardAPI" in source:
                files.update(downward(source["downwardAPI"].get("items") or []))
        return files
    return None


def container_mounts(container: Mapping[str, Any], volume_paths: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(mountPath, host dir) for each volumeMount, subPath applied."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name = mount.get("name", "")
        if name not in volume_paths:
            raise ContainerConfigError(f"container {container.get('name')}: volumeMount {name!r} names no volume "
                                       "of the pod (add it to spec.volumes)")
        host = volume_paths[name]
        if mount.get("subPath"):
            host = host / mount["subPath"]
        mount_path = str(mount.get("mountPath", "")).rstrip("/")
        if mount_path:
            mounts.append((mount_path, host))
    return mounts


def rewrite_paths(text: str, mounts: list[tuple[str, Path]]) -> str:
    """Replace each mountPath prefix (a whole path component) with its host directory, in one pass."""
    if not mounts or "/" not in text:
        return text
    ordered = sorted(mounts, key=lambda m: len(m[0]), reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(m) for m, _ in ordered) + r")(?=/|$|[^\w.-])")
    hosts = dict(ordered)
    return pattern.sub(lambda m: str(hosts[m.group(1)]), text)


def base_env(hostname: str) -> dict[str, str]:
    """What every container gets before the pod's own env: inherited basics, HOSTNAME, unbuffered Python."""
    env = {k: v for k, v in os.environ.items() if k in INHERITED_ENV or k.startswith("LC_")}
    env["HOSTNAME"] = hostname
    # Python block-buffers a redirected stdout; unbuffered output makes `logs -f` show lines as they happen.
    env["PYTHONUNBUFFERED"] = "1"
    return env


def termination_message_file(container: Mapping[str, Any], mounts: list[tuple[str, Path]],
                             pod_dir: Path) -> tuple[str, Path]:
    """(terminationMessagePath, host file): inside a volume it is that volume's file, else one in the pod's dir."""
    path = str(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH)
    mapped = rewrite_paths(path, mounts)
    if mapped != path:
        return path, Path(mapped)
    return path, pod_dir / "termination" / str(container.get("name", ""))


def process_spec(pod: Mapping[str, Any], container: Mapping[str, Any], env: Mapping[str, str],
                 mounts: list[tuple[str, Path]], default_cwd: Path,
                 image: ImageDefaults = ImageDefaults(), tmpdir: Path | None = None) -> ProcessSpec:
    """argv, full environment and cwd for one container run.

    The environment is, lowest first: the kubelet's basics (base_env; `tmpdir`, the pod's own temporary
    directory, as TMPDIR in place of the host's), the image's ENV, the pod's env.
    """
    mounts = list(mounts)
    if image.workdir and all(path != image.workdir.rstrip("/") for path, _ in mounts):
        mounts.append((image.workdir.rstrip("/"), default_cwd))
    message_path, message_file = termination_message_file(container, mounts, default_cwd.parent)
    mounts.append((message_path, message_file))
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if not command:
        command = list(image.entrypoint)  # as a runtime does: args follow the image's ENTRYPOINT
    if not command and not args:
        raise ContainerConfigError(
            f"container {container.get('name')}: no command or args; the process kubelet runs the command "
            "locally and knows no entrypoint for image "
            f"{container.get('image')!r} (set command, e.g. [python, -m, your.module])")
    argv = [rewrite_paths(expand(part, env), mounts) for part in command + args]
    if _PYTHON.match(os.path.basename(argv[0])):
        argv[0] = sys.executable
    spec = pod.get("spec") or {}
    hostname = spec.get("hostname") or (pod.get("metadata") or {}).get("name", "")
    full_env = base_env(hostname)
    if tmpdir is not None:
        full_env["TMPDIR"] = str(tmpdir)
    full_env.update({k: rewrite_paths(v, mounts) for k, v in image.env.items()})
    full_env.update({k: rewrite_paths(v, mounts) for k, v in env.items()})
    cwd = default_cwd
    working_dir = container.get("workingDir")
    if working_dir:
        # Only a workingDir inside a volume means something on the host; others stay in the pod's dir.
        mapped = Path(rewrite_paths(working_dir, mounts))
        if mapped != Path(working_dir):
            cwd = mapped
    return ProcessSpec(argv=argv, env=full_env, cwd=cwd, mounts=tuple(mounts), termination_file=message_file)


def probe_port(container: Mapping[str, Any], port: Any) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ContainerConfigError(f"container {container.get('name')}: probe port {port!r} names no container port")
