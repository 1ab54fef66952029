"""Query options as kube-apiserver validates them before anything else happens
(`k8s.io/apimachinery/pkg/apis/meta/v1/validation`): dryRun, fieldValidation, fieldManager, force,
and the ListOptions rules for resourceVersion/resourceVersionMatch. A bad option is a 422 naming it."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence

from multidict import MultiMapping

from .errors import ApiError, invalid

FIELD_VALIDATION = ("", "Ignore", "Strict", "Warn")
FIELD_MANAGER_MAX = 128
Cause = tuple[str, str, str]


def _go_strings(values: Sequence[str]) -> str:
    """How Go's %#v prints a []string, as field errors show a bad value."""
    return "[]string{" + ", ".join(f'"{v}"' for v in values) + "}"


def dry_run_values(query: Mapping[str, str]) -> list[str]:
    return (
        list(query.getall("dryRun", []))
        if isinstance(query, MultiMapping)
        else ([query["dryRun"]] if "dryRun" in query else [])
    )


def _dry_run_causes(values: Sequence[str]) -> list[Cause]:
    if all(v == "All" for v in values):
        return []
    return [("dryRun", "FieldValueNotSupported", f'Unsupported value: {_go_strings(values)}: supported values: "All"')]


def _field_manager_causes(manager: str) -> list[Cause]:
    causes: list[Cause] = []
    if len(manager) > FIELD_MANAGER_MAX:
        causes.append(
            ("fieldManager", "FieldValueTooLong", f"Too long: may not be more than {FIELD_MANAGER_MAX} bytes")
        )
    for i, ch in enumerate(manager):
        if not ch.isprintable() and unicodedata.category(ch) != "Zs":
            causes.append(
                (
                    "fieldManager",
                    "FieldValueInvalid",
                    f'Invalid value: "{manager}": invalid character U+{ord(ch):04X} (at position {i})',
                )
            )
    return causes


def validate_write(query: Mapping[str, str], kind: str, *, apply: bool = False, patch: bool = False) -> None:
    """CreateOptions/UpdateOptions/PatchOptions validation; `kind` names the options in the 422."""
    causes: list[Cause] = []
    if patch and not apply and "force" in query:
        causes.append(("force", "FieldValueForbidden", "Forbidden: may not be specified for non-apply patch"))
    if apply and not query.get("fieldManager"):
        causes.append(("fieldManager", "FieldValueRequired", "Required value: is required for apply patch"))
    causes += _field_manager_causes(query.get("fieldManager", ""))
    causes += _dry_run_causes(dry_run_values(query))
    mode = query.get("fieldValidation", "")
    if mode not in FIELD_VALIDATION:
        supported = ", ".join(f'"{v}"' for v in FIELD_VALIDATION)
        causes.append(
            ("fieldValidation", "FieldValueNotSupported", f'Unsupported value: "{mode}": supported values: {supported}')
        )
    if causes:
        raise invalid(kind, "meta.k8s.io", "", causes)


def validate_delete(query: Mapping[str, str], body_dry_run: Sequence[str]) -> None:
    causes = _dry_run_causes([*dry_run_values(query), *body_dry_run])
    if causes:
        raise invalid("DeleteOptions", "meta.k8s.io", "", causes)


def validate_list(query: Mapping[str, str]) -> None:
    """ListOptions rules for a (non-watch) list."""
    rv, match, cont = query.get("resourceVersion", ""), query.get("resourceVersionMatch", ""), query.get("continue", "")
    causes: list[Cause] = []
    field = "resourceVersionMatch"
    if match:
        if not rv:
            causes.append(
                (
                    field,
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            )
        if cont:
            causes.append(
                (field, "FieldValueForbidden", "Forbidden: resourceVersionMatch is forbidden when continue is provided")
            )
        if match not in ("Exact", "NotOlderThan"):
            causes.append(
                (
                    field,
                    "FieldValueNotSupported",
                    f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""',
                )
            )
        if match == "Exact" and rv == "0":
            causes.append(
                (
                    field,
                    "FieldValueForbidden",
                    'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            )
    if "sendInitialEvents" in query:
        causes.append(
            ("sendInitialEvents", "FieldValueForbidden", "Forbidden: sendInitialEvents is forbidden for list")
        )
    if causes:
        raise invalid("ListOptions", "meta.k8s.io", "", causes)
    if rv and not rv.isdigit():
        raise ApiError(400, f"invalid resource version: {rv}")
