"""Where a job's TensorBoard logs are, and how to serve them (`tfjob tensorboard JOB`). Pure but for `serve`.

The worker runtime's chief writes `<output-dir>/tensorboard` beside `<output-dir>/checkpoints`; the output
directory comes from the chief's `--output-dir` argument or `TFJOB_OUTPUT_DIR`. On a local control plane the
volume holding it is a directory of the workdir (tfjob local's mapping), so the logs are served right here;
on a cluster they are in a volume only the cluster can reach, so the command is printed instead.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.api.validation import training_container_index
from tfjob_operator.reconcile.render import chief_pod_name, render

OUTPUT_DIR_ENV = "TFJOB_OUTPUT_DIR"


class NoLogs(Exception):
    """The job says nothing about where its logs are (a message for the user)."""


@dataclass(frozen=True)
class LogLocation:
    """The chief's TensorBoard directory: its path in the pod and the volume holding it."""

    pod: dict[str, Any]
    path: str  # inside the container
    volume: dict[str, Any] | None  # the pod volume mounted over `path`, if any
    mount_path: str | None

    @property
    def sub_path(self) -> str:
        """`path` relative to the volume's root."""
        return posixpath.relpath(self.path, self.mount_path) if self.mount_path else self.path


def _arg_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def chief_logdir(job: TFJob) -> LogLocation:
    """Where the chief writes TensorBoard logs, from its rendered pod."""
    pod = next(p for p in render(job).pods if p["metadata"]["name"] == chief_pod_name(job))
    index = training_container_index(pod)
    if index is None:
        raise NoLogs(f"TFJob {job.namespace}/{job.name}: the chief has no tensorflow container")
    container = pod["spec"]["containers"][index]
    args = [*(container.get("command") or []), *(container.get("args") or [])]
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    output_dir = _arg_value(args, "--output-dir") or env.get(OUTPUT_DIR_ENV)
    if not output_dir or not posixpath.isabs(output_dir):
        raise NoLogs(f"TFJob {job.namespace}/{job.name}: the chief's container sets no absolute --output-dir "
                     f"(nor {OUTPUT_DIR_ENV}), so its TensorBoard logs are inside the container only; "
                     "give it --output-dir on a volume")
    path = posixpath.join(output_dir, "tensorboard")
    mounts = [m for m in container.get("volumeMounts") or []
              if path == m.get("mountPath") or path.startswith(m.get("mountPath", "").rstrip("/") + "/")]
    if not mounts:
        return LogLocation(pod, path, None, None)
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = next((v for v in pod["spec"].get("volumes") or [] if v.get("name") == mount.get("name")), None)
    return LogLocation(pod, path, volume, mount["mountPath"])


def local_path(location: LogLocation, workdir: Path) -> Path | None:
    """The logs' directory on this machine for a job run by `tfjob local` with this workdir, else None."""
    from kubelocal.containers import volume_host_paths

    if location.volume is None:
        return None
    host = volume_host_paths({**location.pod, "spec": {**location.pod["spec"], "volumes": [location.volume]}},
                             workdir / "pods" / location.pod["metadata"]["name"], workdir)
    root = host.get(location.volume.get("name", ""))
    return root / location.sub_path if root is not None else None


def cluster_commands(location: LogLocation, image: str, name: str) -> list[str]:
    """kubectl commands running TensorBoard in a pod that mounts the chief's volume, then forwarding its port."""
    if location.volume is None:
        raise NoLogs(f"{location.path} is on no volume of the chief: the logs went with the pod")
    namespace = location.pod["metadata"]["namespace"]
    mount = location.mount_path or "/"
    overrides = {"spec": {
        "volumes": [location.volume],
        "containers": [{"name": name, "image": image,
                        "command": ["tensorboard", "--logdir", location.path, "--bind_all", "--port", "6006"],
                        "volumeMounts": [{"name": location.volume["name"], "mountPath": mount, "readOnly": True}]}],
    }}
    return [
        f"kubectl run {name} -n {namespace} --image {image} --restart Never "
        f"--overrides {shlex.quote(json.dumps(overrides, separators=(',', ':')))}",
        f"kubectl wait -n {namespace} --for condition=Ready pod/{name} --timeout 120s",
        f"kubectl port-forward -n {namespace} pod/{name} 6006:6006   # then open http://localhost:6006",
    ]


def serve(logdir: Path, port: int) -> None:
    """Replace this process with TensorBoard on `logdir` (Ctrl-C stops it)."""
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port)]
    print(f"TensorBoard on {logdir}: http://localhost:{port}  ({shlex.join(command)})", flush=True)
    os.execv(sys.executable, command)
