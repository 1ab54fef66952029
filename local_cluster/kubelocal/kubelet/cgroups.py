"""Memory limits, enforced by the kernel as a real kubelet has them enforced: a cgroup per container run, with
`resources.limits.memory` as its limit, and reason OOMKilled when the kernel's OOM killer acted in it.

The kubelet makes its cgroups under the one it runs in (so a pod never escapes what limits the plane itself):

- cgroup v2: `<own>/kubelocal-<pid>-<id>/<pod uid>_<container>_<restart>` with `memory.max` (and `memory.swap.max`
  0, as a kubelet without swap); OOM kills are counted in `memory.events` (`oom_kill`). v2 allows controllers
  for children only in a cgroup without processes of its own, so this needs the memory controller enabled
  for the plane's own cgroup's children already (a delegated cgroup, e.g. `systemd-run --scope -p Delegate=yes`),
  or that it can be enabled;
- cgroup v1: the same tree in the memory hierarchy, with `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`
  where swap accounting is on); OOM kills are counted in `memory.oom_control` (`oom_kill`, Linux >= 4.13).

Where neither can be written (not root, a read-only /sys/fs/cgroup, no memory controller), limits are not
enforced and `MemoryCgroups.why` says why; the kubelet logs it and `tfjob local up` prints it. A container joins
its cgroup before its command runs: it is started as `sh -c 'echo $$ > <cgroup.procs> && exec "$@"'`.
Processes `kubectl exec` and exec probes start are not in it (a real runtime puts them there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelocal.resources import quantities

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
_BASE_NAME = re.compile(r"^kubelocal-(\d+)-[0-9a-f]+$")


@dataclass(frozen=True)
class ContainerCgroup:
    """One container run's cgroup: the kernel holds its processes to `limit` bytes."""

    path: Path
    version: int
    limit: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def wrap(self, argv: list[str]) -> list[str]:
        """The command, started so that it joins this cgroup before it runs (its pid stays the same)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs), *argv]

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this cgroup (0 when unreadable)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            return read_counter((self.path / name).read_text(), "oom_kill")
        except OSError:
            return 0

    def remove(self) -> bool:
        """Remove the cgroup once its processes are gone; False while some remain (removed with the base)."""
        return _rmdir(self.path)


def startable(command: str, env: Mapping[str, str], cwd: Path) -> bool:
    """The command names an executable file, found as exec finds it (a path, or on the environment's PATH)."""
    if "/" in command:
        path = Path(command) if os.path.isabs(command) else cwd / command
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(command, path=env.get("PATH", os.defpath)) is not None


def read_counter(text: str, key: str) -> int:
    """A `key value` line of a cgroup's flat-keyed file (memory.events, memory.oom_control); 0 if absent."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def memory_limit(container: Mapping[str, Any]) -> int | None:
    """The container's `resources.limits.memory` in bytes, or None without one."""
    limits = quantities(((container.get("resources") or {}).get("limits")) or {})
    memory = limits.get("memory")
    return int(memory) if memory is not None and memory > 0 else None


class MemoryCgroups:
    """Where the kubelet makes its containers' cgroups, or why it cannot (then `base` is None)."""

    def __init__(self, base: Path | None, version: int, why: str) -> None:
        self.base = base
        self.version = version
        #: One sentence: how limits are enforced, or why they are not.
        self.why = why

    @property
    def enforced(self) -> bool:
        return self.base is not None

    @classmethod
    def detect(cls, root: Path = ROOT, proc_cgroup: str | None = None) -> MemoryCgroups:
        """Make this kubelet's cgroup under its own, v2 or v1 (whichever has the memory controller), or say why not.
        `proc_cgroup`: the text of /proc/self/cgroup (read when None)."""
        if proc_cgroup is None:
            try:
                proc_cgroup = Path("/proc/self/cgroup").read_text()
            except OSError as exc:
                return cls(None, 0, f"not enforced: /proc/self/cgroup cannot be read ({exc.strerror})")
        own = {}
        for line in proc_cgroup.splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path.lstrip("/")
        if "memory" in own and (root / "memory").is_dir():
            return cls._make(root / "memory" / own["memory"], 1, "cgroup v1 memory controller")
        if "" in own and (root / "cgroup.controllers").is_file():
            return cls._v2(root / own[""])
        return cls(None, 0, f"not enforced: no cgroup memory controller under {root}")

    @classmethod
    def _v2(cls, own: Path) -> MemoryCgroups:
        subtree = own / "cgroup.subtree_control"
        try:
            if "memory" not in subtree.read_text().split():
                subtree.write_text("+memory")
        except OSError as exc:
            return cls(None, 0, f"not enforced: cgroup v2, but the memory controller cannot be enabled for the "
                                f"children of {own} ({exc.strerror}: it holds processes of its own, or is not "
                                "writable); run the plane in a delegated cgroup (systemd-run --scope -p "
                                "Delegate=yes) to have them enforced")
        return cls._make(own, 2, "cgroup v2 memory controller")

    @classmethod
    def _make(cls, own: Path, version: int, what: str) -> MemoryCgroups:
        remove_stale(own)
        base = own / f"kubelocal-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            base.mkdir()
        except OSError as exc:
            return cls(None, 0, f"not enforced: {what}, but {own} is not writable ({exc.strerror}; a kubelet "
                                "needs root, or a cgroup delegated to its user)")
        return cls(base, version, f"enforced by the kernel: {what}, a cgroup per container under {base}")

    def create(self, name: str, limit: int) -> ContainerCgroup | None:
        """A cgroup for one container run, limited to `limit` bytes; None when limits are not enforced (or this
        one could not be made: logged)."""
        if self.base is None:
            return None
        path = self.base / name
        try:
            path.mkdir(exist_ok=True)
            if self.version == 2:
                (path / "memory.max").write_text(str(limit))
                with contextlib.suppress(OSError):  # no swap, as a kubelet that does not allow it
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit))
                with contextlib.suppress(OSError):  # memory+swap: only where swap accounting is on
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
        except OSError as exc:
            log.warning("memory limit %d of %s not enforced: cgroup %s could not be made (%s)", limit, name, path,
                        exc.strerror)
            return None
        return ContainerCgroup(path, self.version, limit)

    def close(self) -> bool:
        """Remove this kubelet's cgroups; False while a process is still leaving one (try again)."""
        return self.base is None or remove_tree(self.base)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def remove_tree(base: Path) -> bool:
    """rmdir a kubelet's cgroup and its children (cgroup files cannot be unlinked, only the directories)."""
    ok = True
    for child in [p for p in base.iterdir() if p.is_dir()] if base.is_dir() else []:
        ok = _rmdir(child) and ok
    return _rmdir(base) and ok


def remove_stale(own: Path) -> None:
    """The cgroups of kubelets whose process is gone (SIGKILLed: nobody removed them); their pods' processes died
    with them (the lifeline), so the cgroups are empty."""
    for path in own.glob("kubelocal-*") if own.is_dir() else []:
        found = _BASE_NAME.match(path.name)
        if found and not _alive(int(found.group(1))):
            remove_tree(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
