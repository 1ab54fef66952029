"""Label and field selectors: parsed once per request into predicates over objects (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ApiError

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")
_CMP_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=|>|<)\s*(?P<value>[^,]*?)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in, notin, exists, !exists, =, !=, >, <
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op in (">", "<"):
            if not present:
                return False
            try:
                have, want = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == ">" else have < want
        raise AssertionError(self.op)


def _split_top_level(text: str) -> list[str]:
    """Split on commas not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (f,g),!h` into requirements; 400 BadRequest on bad syntax."""
    if not text:
        return []
    reqs = []
    for part in _split_top_level(text):
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            reqs.append(Requirement(m["key"], m["op"], values))
        elif m := _EXISTS_RE.match(part):
            reqs.append(Requirement(m["key"], "!exists" if m["neg"] else "exists"))
        elif m := _CMP_RE.match(part):
            op = "=" if m["op"] == "==" else m["op"]
            value = m["value"]
            if not re.fullmatch(_VALUE, value) or (op in (">", "<") and not value.isdigit()):
                raise ApiError(400, f"unable to parse requirement: invalid label value: {value!r}")
            reqs.append(Requirement(m["key"], op, (value,)))
        else:
            raise ApiError(400, f"unable to parse requirement: found '{part}', expected: in, notin, =, ==, !=, gt, lt")
    return reqs


def labels_match(reqs: Sequence[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


def parse_field_selector(
    text: str | None, allowed: tuple[str, ...], custom: bool = False
) -> list[tuple[str, str, str]]:
    """Parse `metadata.name=x,status.phase!=Running` into (field, op, value); unknown fields are a 400."""
    if not text:
        return []
    out = []
    for part in _split_top_level(text):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.group(1), m.group(2), m.group(3)
        if field not in allowed:
            only = ", ".join(f'"{a}"' for a in allowed)
            msg = (
                f'"{field}" is not a known field selector: only {only}'
                if custom
                else f"field label not supported: {field}"
            )
            raise ApiError(400, msg)
        out.append((field, "!=" if op == "!=" else "=", value))
    return out


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares with: missing → "", bools lowercase."""
    if path == "source":  # core/v1 Event: the selector field is source.component
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs: Sequence[tuple[str, str, str]], obj: Mapping[str, Any]) -> bool:
    for field, op, value in reqs:
        have = field_value(obj, field)
        if (have == value) != (op == "="):
            return False
    return True


@dataclass(frozen=True)
class Selector:
    """Both selectors of one request, parsed; called on an object it says whether the object matches.

    `equalities` are the requirements an index can answer (label `=`/`in`, field `=`): every matching
    object has one of the values, so the store can start from the objects that do.
    """

    labels: tuple[Requirement, ...] = ()
    fields: tuple[tuple[str, str, str], ...] = ()

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)

    def only_equalities(self) -> bool:
        """Whether `equalities` is the whole selector: then the objects the indexes name are exactly the
        objects it matches, and a list need not test each one again."""
        return all(r.op in ("=", "in") for r in self.labels) and all(op == "=" for _, op, _ in self.fields)

    def equalities(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """("label" | "field", key, allowed values) for each requirement an index can answer."""
        out = [("label", r.key, r.values) for r in self.labels if r.op in ("=", "in")]
        out += [("field", field, (value,)) for field, op, value in self.fields if op == "="]
        return out


def make_predicate(
    label_selector: str | None, field_selector: str | None, allowed_fields: tuple[str, ...], custom: bool = False
) -> Selector:
    """One predicate for both selectors, parsed up front so bad selectors fail before any work."""
    return Selector(tuple(parse_label_selector(label_selector)),
                    tuple(parse_field_selector(field_selector, allowed_fields, custom)))
