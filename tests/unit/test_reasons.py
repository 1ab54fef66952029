"""The reasons the operator writes are one enum, documented in docs/operator.md's conditions table: every member
there on the condition it names, nothing there that is not a member, and no reason written as a bare string
anywhere in the operator's package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tfjob_operator
from tfjob_operator.api import JobConditionType
from tfjob_operator.reconcile import Reason
from tfjob_operator.reconcile.reasons import RESTART_REASONS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(tfjob_operator.__file__).parent


def documented_reasons() -> dict[str, JobConditionType | None]:
    """The backticked CamelCase words of the Reason column of the conditions table, each with its row's condition
    (the Condition column's first word when it is a condition type; None for "(Event only)" and the state rows)."""
    text = (ROOT / "docs" / "operator.md").read_text()
    section = text.split("## Conditions and reasons", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("|") and "---" not in line]
    assert rows and [c.strip() for c in rows[0][1:4]] == ["Condition", "Reason", "When"]
    types = {t.value: t for t in JobConditionType}
    # The When column may name Kubernetes' own reasons (StoppedByKueue): only the Reason column counts.
    return {word: types.get(row[1].split()[0] if row[1].split() else "")
            for row in rows[1:] for word in re.findall(r"`([A-Z][A-Za-z]+)`", row[2])}


def test_every_reason_is_documented_and_every_documented_reason_is_one() -> None:
    documented, members = documented_reasons(), {r.value for r in Reason}
    assert members - set(documented) == set(), "add a row to docs/operator.md's conditions table"
    assert set(documented) - members == set(), "a documented reason the operator never writes"


def test_each_reason_is_documented_on_its_condition() -> None:
    documented = documented_reasons()
    wrong = {r.value: (r.condition, documented[r.value]) for r in Reason if documented.get(r.value) != r.condition}
    assert wrong == {}, "docs/operator.md's Condition column and the member's condition disagree"


def test_the_restart_reasons_are_those_of_the_restarting_condition() -> None:
    assert {r.value for r in RESTART_REASONS} == {
        word for word, condition in documented_reasons().items() if condition is JobConditionType.RESTARTING}


def test_no_reason_is_a_bare_string_in_the_operator_package() -> None:
    """Kubernetes' own words that happen to equal a reason (a pod's status.reason NodeLost) are named KUBE_*; a
    state or condition type of the same word (`Restarting`) is not a reason."""
    values = {r.value for r in Reason} - {t.value for t in JobConditionType}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "reasons.py":
            continue
        tree = ast.parse(path.read_text())
        kube_words = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                      and all(isinstance(t, ast.Name) and t.id.startswith("KUBE_") for t in node.targets)}
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in values and id(node) not in kube_words]
    assert found == []
