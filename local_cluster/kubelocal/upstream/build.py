"""The pinned build of the upstream components the tests run under: `make upstream` (or
`python -m kubelocal.upstream.build`).

Each component is a small Go wrapper module in the repository's `upstream/` folder (go.mod and go.sum committed,
never a binary). Its binaries are built with `go install ... tool` into a cache outside the tree, in a folder
named by the hash of the module's go.mod and go.sum and of the build flags, so a second run does nothing and a
changed pin builds afresh beside the old one. A missing Go toolchain or a failed build is one line saying what to
do, plus the tail of go's output.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The repository's `upstream/` folder (this package is installed editable from the clone).
SOURCE = Path(os.environ.get("TFJOB_UPSTREAM_SRC") or Path(__file__).resolve().parents[3] / "upstream")

#: Go's oldest version that reads the wrapper modules (`tool` directives, k8s 1.37's `go 1.26.0` line); an older
#: go from 1.21 on fetches the toolchain itself from the module proxy (GOTOOLCHAIN=auto).
GO_MIN = (1, 21)


class UpstreamError(Exception):
    """A build that cannot run or did not succeed: the message says what to do."""


@dataclass(frozen=True)
class Component:
    """One wrapper module and the binaries its `tool` directives install."""

    name: str
    #: The version stamped into the binaries (what `/version` reports).
    version: str
    #: The binaries it gives, by the name the plane starts them with.
    binaries: tuple[str, ...]
    #: `go install` names a binary after its package's last path element; a `/vN` suffix is skipped, so etcd's
    #: `go.etcd.io/etcd/server/v3` installs as `server`.
    renames: Mapping[str, str] = field(default_factory=dict)
    ldflags: tuple[str, ...] = ()
    #: Built only when named (`python -m kubelocal.upstream.build NAME`), never by `make upstream`'s default set.
    on_demand: bool = False

    @property
    def module(self) -> Path:
        return SOURCE / self.name


def _k8s_ldflags(version: str) -> tuple[str, ...]:
    """The version ldflags of Kubernetes' own build (hack/lib/version.sh), for component-base and client-go."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}",
                  f"-X {pkg}.gitTreeState=clean"]
    return tuple(flags)


K8S = Component(
    name="k8s", version="v1.37.2",
    binaries=("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    renames={"server": "etcd"}, ldflags=_k8s_ldflags("v1.37.2"))

KUEUE = Component(
    name="kueue", version="v0.17.0", binaries=("kueue",),
    ldflags=("-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0",))

#: Kubeflow's own TFJob controller, for bench/kubeflow_side.py only (not part of `make upstream`'s default set).
TRAINING_OPERATOR = Component(name="training-operator", version="v1.9.3", binaries=("training-operator.v1",),
                              on_demand=True)

#: Volcano's scheduler, for the `volcano` gang backend's upstream test.
VOLCANO = Component(name="volcano", version="v1.14.1", binaries=("vc-scheduler",),
                    renames={"scheduler": "vc-scheduler"},
                    ldflags=("-X volcano.sh/volcano/pkg/version.Version=v1.14.1",), on_demand=True)

COMPONENTS: dict[str, Component] = {c.name: c for c in (K8S, KUEUE, TRAINING_OPERATOR, VOLCANO)}


def cache_root() -> Path:
    """Where built binaries live: TFJOB_UPSTREAM_CACHE, else the user's cache folder (never the clone)."""
    explicit = os.environ.get("TFJOB_UPSTREAM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tfjob-operator" / "upstream"


def build_key(component: Component) -> str:
    """The hash of what decides the binaries: the module's go.mod and go.sum and the build flags."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        path = component.module / name
        if not path.is_file():
            raise UpstreamError(f"{path} is missing: the upstream build needs the repository's upstream/ folder "
                                f"(run it from a clone, or set TFJOB_UPSTREAM_SRC)")
        digest.update(path.read_bytes())
    digest.update("\0".join((*component.ldflags, *(f"{a}={b}" for a, b in sorted(component.renames.items())))).encode())
    return digest.hexdigest()[:16]


def bin_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version}-{build_key(component)}" / "bin"


def binaries(name: str = "k8s") -> dict[str, Path]:
    """The built binaries of one component, by name; TFJOB_UPSTREAM_BIN (a folder) overrides the cache.

    Raises UpstreamError, saying how to build them, when any is missing."""
    component = COMPONENTS[name]
    override = os.environ.get("TFJOB_UPSTREAM_BIN")
    where = Path(override) if override else bin_dir(component)
    found = {b: where / b for b in component.binaries}
    missing = [b for b, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        how = ("TFJOB_UPSTREAM_BIN names a folder without them" if override else
               "run `make upstream` (a cold build takes about 25 minutes on 2 cores; cached outside the clone)")
        raise UpstreamError(f"the upstream {name} binaries are not built ({', '.join(missing)} missing in {where}): "
                            f"{how}")
    return found


def find_go() -> str:
    """The go command (GO alone where it is set, else PATH, then Go's default install folder), checked to be new
    enough."""
    explicit = os.environ.get("GO")
    candidates = [explicit] if explicit else [shutil.which("go"), "/usr/local/go/bin/go"]
    go = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if go is None:
        raise UpstreamError("go is not installed: the upstream plane is built from source with Go 1.21 or newer "
                            "(Go 1.26 is used as is; older ones fetch it from the module proxy); put go on PATH or "
                            "set GO=/path/to/go. `make test` and `make demo` do not need it")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    parts = out.removeprefix("go").split(".")
    try:
        version = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise UpstreamError(f"{go} did not say its version ({out!r}): install Go 1.21 or newer") from None
    if version < GO_MIN:
        raise UpstreamError(f"{go} is {out}, too old to build the upstream plane: install Go 1.21 or newer")
    return go


class _Progress:
    """Counts the packages `go install -v` names as it compiles them, and says so every few seconds."""

    def __init__(self, label: str, total: int, say: Callable[[str], None], every: float = 10.0) -> None:
        self.label, self.total, self.say, self.every = label, total, say, every
        self.done = 0
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        if text and not text.startswith(("go: ", "#")):
            self.done += 1

    def report(self) -> None:
        elapsed = time.monotonic() - self.started
        share = f"{self.done}/{self.total} packages" if self.total else f"{self.done} packages"
        self.say(f"upstream: {self.label}: {share} compiled ({elapsed:.0f} s)")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build(component: Component, *, jobs: int | None = None, say: Callable[[str], None] = _say) -> Path:
    """Builds a component into the cache unless it is there already; returns its bin folder."""
    target = bin_dir(component)
    if all(os.access(target / b, os.X_OK) for b in component.binaries):
        say(f"upstream: {component.name} {component.version} is built: {target}")
        return target
    go = find_go()
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "auto"),
           "GOFLAGS": "-mod=mod"}
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.parent.parent / f"{component.name}-build.log"
    listing = subprocess.run([go, "list", "-deps", "tool"], cwd=component.module, env=env, capture_output=True,
                             text=True, check=False)
    total = len(listing.stdout.splitlines()) if listing.returncode == 0 else 0
    say(f"upstream: building {component.name} {component.version} ({', '.join(component.binaries)}) into {target}; "
        f"go's output goes to {log_path}")
    staging = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=target.parent.parent))
    argv = [go, "install", "-v", "-trimpath", "-p", str(jobs or os.cpu_count() or 2),
            "-ldflags", " ".join(("-s", "-w", *component.ldflags)), "tool"]
    progress = _Progress(f"{component.name} {component.version}", total, say)
    tail: list[str] = []
    with log_path.open("w") as log, subprocess.Popen(
            argv, cwd=component.module, env={**env, "GOBIN": str(staging)}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        ticker = _Ticker(progress)
        for text in proc.stdout:
            log.write(text)
            tail = [*tail[-19:], text.rstrip()]
            progress.line(text.strip())
        ticker.stop()
        code = proc.wait()
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise UpstreamError(f"building {component.name} failed (go install exited {code}): read the lines below, "
                            f"fix the module in {component.module} (go mod tidy names a missing pin), then rerun "
                            f"`make upstream`; the whole output is in {log_path}\n" + "\n".join(tail))
    for old, new in component.renames.items():
        (staging / old).rename(staging / new)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(target)
    progress.done = progress.total or progress.done
    progress.report()
    say(f"upstream: {component.name} {component.version} built: {target}")
    return target


class _Ticker:
    """Reports progress on a clock too, through the minutes when the linker prints nothing."""

    def __init__(self, progress: _Progress) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(progress,), daemon=True)
        self._thread.start()

    def _run(self, progress: _Progress) -> None:
        while not self._stop.wait(progress.every):
            progress.report()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubelocal.upstream.build", description=__doc__.splitlines()[0])
    parser.add_argument("components", nargs="*", metavar="COMPONENT",
                        help=f"which to build, of {', '.join(COMPONENTS)} (default: all but "
                        f"{', '.join(c.name for c in COMPONENTS.values() if c.on_demand)})")
    parser.add_argument("--jobs", "-j", type=int, help="packages compiled at once (default: the cores)")
    parser.add_argument("--print-dir", action="store_true", help="print each component's bin folder and stop")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.components) - set(COMPONENTS))
    if unknown:
        parser.error(f"unknown component {', '.join(unknown)}: choose from {', '.join(COMPONENTS)}")
    try:
        for name in args.components or [c.name for c in COMPONENTS.values() if not c.on_demand]:
            if args.print_dir:
                print(bin_dir(COMPONENTS[name]))
            else:
                build(COMPONENTS[name], jobs=args.jobs)
    except UpstreamError as exc:
        print(f"upstream: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
