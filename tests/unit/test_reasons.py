"""The reasons the reconciler writes are one enum, documented in docs/operator.md's conditions table: every
member there, nothing there that is not a member, and no reason written as a bare string in the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tfjob_operator import reconcile
from tfjob_operator.reconcile import Reason

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(reconcile.__file__).parent


def documented_reasons() -> set[str]:
    """The backticked CamelCase words of the Reason column of the conditions table."""
    text = (ROOT / "docs" / "operator.md").read_text()
    section = text.split("## Conditions and reasons", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("|") and "---" not in line]
    assert rows and [c.strip() for c in rows[0][1:4]] == ["Condition", "Reason", "When"]
    # The When column may name Kubernetes' own reasons (StoppedByKueue): only the Reason column counts.
    return {word for row in rows[1:] for word in re.findall(r"`([A-Z][A-Za-z]+)`", row[2])}


def test_every_reason_is_documented_and_every_documented_reason_is_one() -> None:
    documented, members = documented_reasons(), {r.value for r in Reason}
    assert members - documented == set(), "add a row to docs/operator.md's conditions table"
    assert documented - members == set(), "a documented reason the reconciler never writes"


def test_no_reason_is_a_bare_string_in_the_reconcile_package() -> None:
    """Kubernetes' own words that happen to equal a reason (a pod's status.reason NodeLost) are named KUBE_*."""
    values = {r.value for r in Reason}
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "reasons.py":
            continue
        tree = ast.parse(path.read_text())
        kube_words = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                      and all(isinstance(t, ast.Name) and t.id.startswith("KUBE_") for t in node.targets)}
        found += [f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in values and id(node) not in kube_words]
    assert found == []
