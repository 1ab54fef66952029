"""The pinned upstream build (`make upstream`): what a developer sees when Go is missing or the build breaks, and
that a second run of a built module does nothing. Each runs `python -m kubelocal.upstream.build`'s code on a toy
wrapper module (one `tool` of a few lines that imports nothing), so it takes seconds, not the control plane's
minutes. Go's own build cache (GOCACHE) is the developer's, as `make upstream` uses it: the toy needs only Go's
runtime, which that cache holds once any Go program was built (`make test-upstream` reuses it in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubelocal.upstream import build

GO = next((g for g in (shutil.which("go"), "/usr/local/go/bin/go") if g and os.access(g, os.X_OK)), None)
needs_go = pytest.mark.skipif(GO is None, reason="go is not installed on this machine")

TOY = """
import sys
from pathlib import Path
from kubelocal.upstream import build
toy = build.Component(name="toy", version="v0.0.1", binaries=("hello",), renames={"cmd": "hello"},
                      ldflags=("-X main.version=v0.0.1",))
try:
    print(build.build(toy, jobs=1))
except build.UpstreamError as exc:
    print(f"upstream: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def toy_module(root: Path, source: str) -> None:
    module = root / "src" / "toy"
    (module / "cmd").mkdir(parents=True)
    (module / "go.mod").write_text("module toy.local\n\ngo 1.21\n\ntool toy.local/cmd\n")
    (module / "go.sum").write_text("")
    (module / "cmd" / "main.go").write_text(textwrap.dedent(source))


def run_toy(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "TFJOB_UPSTREAM_SRC": str(root / "src"), "TFJOB_UPSTREAM_CACHE": str(root / "cache"),
               "GOFLAGS": "-mod=mod", **env}
    return subprocess.run([sys.executable, "-c", TOY], env=environ, capture_output=True, text=True, timeout=300,
                          check=False)


@needs_go
def test_a_built_module_is_cached_outside_the_tree_and_a_second_run_does_not_call_go(tmp_path: Path) -> None:
    toy_module(tmp_path, """
        package main

        var version = "unset"

        func main() { println("hello", version) }
    """)
    first = run_toy(tmp_path)
    assert first.returncode == 0, first.stderr
    bin_dir = Path(first.stdout.strip())
    assert bin_dir.is_relative_to(tmp_path / "cache")
    assert "built:" in first.stderr and "packages compiled" in first.stderr
    # The version ldflags reach the binary (kube-apiserver's /version reads them the same way).
    assert subprocess.run([bin_dir / "hello"], capture_output=True, text=True, check=True).stderr == "hello v0.0.1\n"
    # No go at all the second time: the cache is keyed by go.mod, go.sum and the flags, and it holds.
    second = run_toy(tmp_path, PATH="/nonexistent", GO="/nonexistent/go")
    assert second.returncode == 0, second.stderr
    assert Path(second.stdout.strip()) == bin_dir
    assert "is built" in second.stderr


@needs_go
def test_a_failed_build_says_what_to_do_and_shows_the_tail_of_gos_output(tmp_path: Path) -> None:
    toy_module(tmp_path, """
        package main

        func main() { undefinedCall() }
    """)
    result = run_toy(tmp_path)
    assert result.returncode == 2
    said = [line for line in result.stderr.splitlines() if not line.startswith("upstream: toy v0.0.1:")]
    failed = next(i for i, line in enumerate(said) if "building toy failed" in line)
    assert "make upstream" in said[failed]
    assert any("undefined: undefinedCall" in line for line in said[failed + 1:]), "go's tail follows the line"
    assert not list((tmp_path / "cache").glob("toy-*/bin")), "a failed build leaves no bin folder behind"


def test_without_go_one_line_says_what_to_install(tmp_path: Path) -> None:
    toy_module(tmp_path, "package main\n\nfunc main() {}\n")
    result = run_toy(tmp_path, PATH="/nonexistent", GO="/nonexistent/go")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "go is not installed" in result.stderr and "GO=" in result.stderr and "make test" in result.stderr
    assert "Traceback" not in result.stderr


def test_unbuilt_binaries_name_the_command_that_builds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFJOB_UPSTREAM_CACHE", str(tmp_path))
    monkeypatch.delenv("TFJOB_UPSTREAM_BIN", raising=False)
    with pytest.raises(build.UpstreamError, match="run `make upstream`"):
        build.binaries("k8s")


def test_make_upstream_builds_the_planes_parts_and_leaves_the_bench_only_ones_to_be_named() -> None:
    """`make upstream` (no component named) builds Kubernetes and Kueue, not Kubeflow's training-operator (only
    bench/kubeflow_side.py runs it) nor vc-scheduler (tests/upstream/test_volcano.py); naming one builds it."""
    def dirs(*names: str) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "kubelocal.upstream.build", "--print-dir", *names],
                             capture_output=True, text=True, timeout=60, check=True)
        return out.stdout.split()

    default = dirs()
    assert [Path(d).parent.name.split("-v")[0] for d in default] == ["k8s", "kueue"]
    named = dirs("training-operator", "volcano")
    assert [Path(d).parent.name.rsplit("-", 1)[0] for d in named] == ["training-operator-v1.9.3", "volcano-v1.14.1"]
