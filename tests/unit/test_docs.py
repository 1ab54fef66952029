"""The docs against the code: docs/architecture.md's import table is what the modules import (and they import in
no cycle), and the README's links and docs map point at files that exist."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _architecture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "docs" / "architecture.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


arch = _architecture()


def test_the_imports_table_is_the_codes() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    start, end = text.index(arch.BEGIN), text.index(arch.END) + len(arch.END)
    assert text[start:end] == arch.imports_table(), (
        "docs/architecture.md's imports table disagrees with the code: run `python docs/architecture.py --imports`")


def test_the_operators_modules_import_in_no_cycle() -> None:
    assert arch.cycles(arch.module_imports()) == []


def test_the_operators_wings_import_downward_only() -> None:
    """client → serving → controller → progress → gang → shared → reconcile → the contract: no module imports one of
    a wing above its own, not even inside a function, and every room of the package is in a wing."""
    assert arch.upward_imports(arch.module_imports()) == []


def test_the_local_control_plane_imports_nothing_from_the_operator() -> None:
    offenders = []
    for path in sorted((ROOT / "local_cluster" / "kubelocal").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "tfjob_operator"]
    assert offenders == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "pkg"


def test_the_generator_resolves_every_kind_of_import(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "core.py": "",
        "shell.py": "from pkg import core\nfrom . import mid\ndef f():\n    import pkg.sub.leaf\n",
        "mid.py": "from .core import x\nfrom tfjob_worker import exit_codes\n",
        "sub/__init__.py": "from . import leaf\n",
        "sub/leaf.py": "from ..core import y\nfrom .. import mid\n",
    })
    imports = arch.module_imports(pkg, "pkg")
    assert imports["pkg.shell"] == {"pkg.core", "pkg.mid", "pkg.sub.leaf"}
    assert imports["pkg.mid"] == {"pkg.core", "tfjob_worker.exit_codes"}
    assert imports["pkg.sub"] == {"pkg.sub.leaf"}
    assert imports["pkg.sub.leaf"] == {"pkg.core", "pkg.mid"}
    rows = [line for line in arch.imports_table(pkg, "pkg").splitlines() if line.startswith("| `")]
    # one row per top-level module or package, from the shell to the core; the package's inner imports left out
    assert rows == [
        "| `shell` | `core`, `mid`, `sub` | - |",
        "| `sub/` | `core`, `mid` | - |",
        "| `mid` | `core` | `tfjob_worker.exit_codes` |",
        "| `core` | - | - |",
    ]


def test_the_generator_reports_a_cycle(tmp_path: Path) -> None:
    lazy = "def f():\n    from . import a\n"
    pkg = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": lazy, "c.py": "import pkg.a\n"})
    assert arch.cycles(arch.module_imports(pkg, "pkg")) == [["pkg.a", "pkg.b"]]
    assert "**Import cycle** among `pkg.a`, `pkg.b`." in arch.imports_table(pkg, "pkg")


def _readme_links() -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", README.read_text()) if not re.match(r"[a-z]+://", t)]


@pytest.mark.parametrize("target", sorted(set(_readme_links())))
def test_a_readme_link_points_at_a_file(target: str) -> None:
    path, _, anchor = target.partition("#")
    if path:
        assert (ROOT / path).exists(), f"README links to {target}, which does not exist"
    else:  # a heading of the README itself
        headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                    for h in re.findall(r"^#+ (.+)$", README.read_text(), re.M)}
        assert anchor in headings, f"README links to #{anchor}, which is no heading of it"


def test_the_readme_maps_every_doc() -> None:
    text = README.read_text()
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{p.name})" not in text]
    assert missing == [], f"the README's docs map misses {missing}"
    assert len(text.splitlines()) <= 400


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_the_performance_figures_are_the_latest_bench_runs() -> None:
    """docs/performance.md quotes bench/results/summary.txt whole, and the README's rows come from it: after a
    `make bench`, paste the new summary into docs/performance.md and the README's rows."""
    summary = (ROOT / "bench" / "results" / "summary.txt").read_text()
    page = (ROOT / "docs" / "performance.md").read_text()
    start = page.index("<!-- latest bench: bench/results/summary.txt -->\n")
    end = page.index("<!-- end of the latest bench -->")
    assert page[start:end].split("\n", 1)[1] == summary
    readme_rows = [line for line in _section(README.read_text(), "## Performance").splitlines()
                   if line.startswith("| ") and not line.startswith("| figure")]
    assert readme_rows, "the README's performance section shows no figure"
    assert [row for row in readme_rows if row not in summary.splitlines()] == []


#: Files a backticked name may be, not a Python name.
_FILE_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".json", ".txt", ".png", ".svg", ".tpl", ".toml", ".sh", ".log")


def _module_names() -> set[str]:
    """The last component of every module and package of the operator (`observed`, `placement`, `gang`...)."""
    package = ROOT / "operator" / "tfjob_operator"
    return {p.stem if p.name != "__init__.py" else p.parent.name for p in package.rglob("*.py")} - {"__main__"}


#: The pages that name the operator's modules as `tfjob_operator` does (`gang.queue.plan_pass_in`); elsewhere only
#: full names count (`gang.backend` there is a chart value).
_MODULE_PAGES = ("architecture.md", "design.md", "contributing.md")
_ROOTS = {"tfjob_operator": ROOT / "operator", "kubelocal": ROOT / "local_cluster",
          "tfjob_worker": ROOT / "worker_image"}


def _dotted_names() -> list[tuple[str, str]]:
    """(doc, name) for every backticked dotted Python name in the README and docs/: a full one (`tfjob_operator.…`,
    `kubelocal.…`, `tfjob_worker.…`), and on the module pages one that starts with a module of the operator."""
    modules = _module_names()
    found = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for span in re.findall(r"`([^`\n]+)`", doc.read_text()):
            for m in re.finditer(r"(?<![\w./-])([a-z_]\w*(?:\.\w+)+)(?![\w./-])", span):
                name, first = m.group(1), m.group(1).split(".")[0]
                if name.endswith(_FILE_SUFFIXES):
                    continue
                if first in _ROOTS or (doc.name in _MODULE_PAGES and first in modules):
                    found.append((doc.name, name if first in _ROOTS else f"tfjob_operator.{name}"))
    return sorted(set(found))


def _defined(tree: ast.Module | ast.ClassDef) -> dict[str, ast.AST]:
    """The names a module or class body defines or imports, each with its node."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names[target.id] = node
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, ast.List):
                    # a name the module exports lazily (its __getattr__) is its name too
                    names.update({e.value: node for e in node.value.elts if isinstance(e, ast.Constant)})
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
    return names


def _resolves(name: str) -> bool:
    """The module the name's longest prefix is, and the rest a name it defines (a class's too), read from the source:
    nothing is imported."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = _ROOTS[parts[0]].joinpath(*parts[:cut])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file():
            break
    else:
        return False
    node: ast.AST = ast.parse(source.read_text())
    for attr in parts[cut:]:
        if not isinstance(node, ast.Module | ast.ClassDef) or attr not in _defined(node):
            return False
        node = _defined(node)[attr]
    return True


def test_every_dotted_name_the_docs_give_resolves() -> None:
    """A module, class or function the docs name by its dotted name exists there (a move renames it in the docs)."""
    names = _dotted_names()
    assert len(names) > 20
    assert [f"{doc}: {name}" for doc, name in names if not _resolves(name)] == []
