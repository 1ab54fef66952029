"""What `pip install tfjob-operator` ships: the operator and its own dependencies; the local control plane's
(`kubelocal`, `tfjob local`) are the extra `[local]`.

A fresh virtualenv is given exactly the distributions the operator's requirements (pyproject.toml's
[project.dependencies], no extra) resolve to, taken file by file from this environment (no registry is reached),
and the project's packages as its wheel lays them out; there `tfjob operator --help` runs, and the local plane's
libraries cannot be imported. It takes some 15 seconds (a minute on a loaded machine).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import subprocess
import tomllib
import venv
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: What the local plane needs and the operator must not (docs/design.md §1): distributions and their modules.
LOCAL_ONLY = {"cel-python": "celpy", "dnspython": "dns", "pyjwt": "jwt", "matplotlib": "matplotlib",
              "protobuf": "google.protobuf", "rich": "rich", "psutil": "psutil"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: list[str], extras: tuple[str, ...] = ("",)) -> dict[str, metadata.Distribution]:
    """The installed distributions `requirements` resolve to, with theirs, as pip would install them."""
    found: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not any(requirement.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = _normal(requirement.name)
        if name in found:
            continue
        found[name] = metadata.distribution(requirement.name)
        todo += [Requirement(r) for r in found[name].requires or []
                 if Requirement(r).marker is None or Requirement(r).marker.evaluate({"extra": ""})]
    return found


def _lay_out(site: Path, distributions: dict[str, metadata.Distribution]) -> None:
    """Each distribution's own files (its RECORD), linked into `site`: a package as a whole, and a namespace
    directory several distributions may share (google/) file by file, so it holds only those given."""
    for distribution in distributions.values():
        for entry in distribution.files or []:
            if entry.parts[0] == ".." or entry.suffix == ".pyc":
                continue  # scripts in bin/, byte code
            top = Path(distribution.locate_file(entry.parts[0]))
            whole = len(entry.parts) > 1 and (top / "__init__.py").exists()
            source, target = (top, site / entry.parts[0]) if whole else (Path(distribution.locate_file(entry)),
                                                                          site / entry)
            if source.exists() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source)


@pytest.fixture(scope="module")
def operator_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the operator's dependencies only, and the project's packages; its python."""
    home = tmp_path_factory.mktemp("operator-only")
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    _lay_out(site, closure(PROJECT["dependencies"]))
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for where in find["where"]:
        for package in (ROOT / where).iterdir():
            if (package / "__init__.py").exists() and any(re.fullmatch(p.replace("*", ".*"), package.name)
                                                          for p in find["include"]):
                (site / package.name).symlink_to(package)
    return python


DRIVER = """
import contextlib, importlib.util, io, json, sys
from {module} import {function} as main
found, (commands, modules) = {{}}, map(json.loads, sys.argv[1:3])
for args in commands:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["tfjob", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main()
        except SystemExit as exc:
            code = exc.code
    found[" ".join(args)] = [code, out.getvalue(), err.getvalue()]
found["importable"] = [m for m in modules if importlib.util.find_spec(m.split(".")[0])]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def ran(operator_only: Path) -> dict[str, Any]:
    """`tfjob` run in the operator-only environment (one process: each start imports the operator anew), and the
    local plane's modules it can import."""
    module, function = PROJECT["scripts"]["tfjob"].split(":")
    example = str(ROOT / "examples" / "mnist-cpu.yaml")
    commands = [["operator", "--help"], ["render", example, "--gang", "builtin"], ["local", example]]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([operator_only, "-c", DRIVER.format(module=module, function=function),
                             json.dumps(commands), json.dumps(list(LOCAL_ONLY.values()))],
                            capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.splitlines()[-1]))


def test_the_operator_alone_runs_without_the_local_planes_dependencies(ran: dict[str, Any]) -> None:
    code, out, err = ran["operator --help"]
    assert code == 0 and out.startswith("usage: tfjob operator"), err
    assert ran["importable"] == []


def test_the_operator_alone_renders_a_job_and_says_what_tfjob_local_needs(ran: dict[str, Any]) -> None:
    code, out, err = next(v for k, v in ran.items() if k.startswith("render "))
    assert code == 0 and "kind: Pod" in out, err
    code, out, err = next(v for k, v in ran.items() if k.startswith("local "))
    assert code == 1 and "Traceback" not in err
    assert "pip install 'tfjob-operator[local]'" in err


def test_the_local_planes_libraries_are_the_local_extras_and_the_operators_requirements_pull_in_none() -> None:
    local = {_normal(Requirement(r).name) for r in PROJECT["optional-dependencies"]["local"]}
    assert set(LOCAL_ONLY) <= local
    assert set(LOCAL_ONLY) & set(closure(PROJECT["dependencies"])) == set()
