"""metav1.Time and metav1.MicroTime as Go decodes them: a built-in object whose time field does not
parse is refused while decoding, before validation (`renewTime: yesterday` on a Lease is a 400).

The messages are Go's `time.Parse` errors for the two layouts Kubernetes uses, so a client sees
what kube-apiserver would say."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from typing import Any

from .schema import resolve

TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"

# (layout element, what it accepts); Go reports the first element the value does not fit.
_ELEMENTS = [
    ("2006", r"\d{4}"),
    ("-", "-"),
    ("01", r"\d{2}"),
    ("-", "-"),
    ("02", r"\d{2}"),
    ("T", "T"),
    ("15", r"\d{2}"),
    (":", ":"),
    ("04", r"\d{2}"),
    (":", ":"),
    ("05", r"\d{2}"),
]
_ZONE = ("Z07:00", r"Z|[+-]\d{2}:\d{2}")
_RANGES = [(1, 1, 12, "month"), (2, 1, 31, "day"), (3, 0, 23, "hour"), (4, 0, 59, "minute"), (5, 0, 59, "second")]


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@functools.lru_cache(maxsize=4096)  # the same few stamps recur in every write (managedFields, conditions)
def go_parse_error(value: str, micro: bool) -> str | None:
    """Go's time.Parse error for `value` in RFC3339 (Time) or RFC3339Micro (MicroTime); None if it parses."""
    layout = RFC3339_MICRO if micro else RFC3339
    head = f"parsing time {_quote(value)} as {_quote(layout)}"
    elements = [*_ELEMENTS, (".000000", r"\.\d{6}")] if micro else list(_ELEMENTS)
    rest, numbers = value, []
    for element, pattern in [*elements, _ZONE]:
        if element == "Z07:00" and not micro:
            fraction = re.match(r"\.\d+", rest)  # Go accepts fractional seconds the layout does not show
            if fraction:
                rest = rest[fraction.end() :]
        match = re.match(pattern, rest)
        if not match:
            return f"{head}: cannot parse {_quote(rest)} as {_quote(element)}"
        if pattern.startswith(r"\d"):
            numbers.append(int(match.group()))
        rest = rest[match.end() :]
    if rest:
        return f"parsing time {_quote(value)}: extra text: {_quote(rest)}"
    for index, low, high, name in _RANGES:
        if not low <= numbers[index] <= high:
            return f"parsing time {_quote(value)}: {name} out of range"
    try:
        dt.date(numbers[0], numbers[1], numbers[2])
    except ValueError:
        return f"parsing time {_quote(value)}: day out of range"
    return None


#: id(schema) -> (schema, whether a Time/MicroTime can occur under it); the schema is kept so its id stays its own.
_HOLDS_TIME: dict[int, tuple[dict[str, Any], bool]] = {}


def _holds_time(schema: dict[str, Any], visiting: frozenset[int] = frozenset()) -> bool:
    """Whether a value of this built-in schema can contain a time field anywhere (a pod's containers cannot:
    the walk skips them, which made this check cost as much as the whole validation)."""
    known = _HOLDS_TIME.get(id(schema))
    if known is not None:
        return known[1]
    if id(schema) in visiting:
        return True  # a recursive schema: assume so (walking is always correct, only slower)
    inner = visiting | {id(schema)}
    ref = str(schema.get("$ref", "")).rsplit("/", 1)[-1]
    subs: list[Any] = [*(schema.get("allOf") or []), *(schema.get("properties") or {}).values(),
                       schema.get("additionalProperties"), schema.get("items")]
    holds = ref in (TIME, MICRO_TIME) or (bool(ref) and _holds_time(resolve(schema), inner)) or any(
        isinstance(sub, dict) and _holds_time(sub, inner) for sub in subs)
    # A False never rests on the assumption above (that would have made it True); a True at worst walks more.
    _HOLDS_TIME[id(schema)] = (schema, holds)
    return holds


def first_time_error(value: Any, schema: dict[str, Any]) -> str | None:
    """The first Time/MicroTime field of `value` (walked along its built-in schema) that does not parse."""
    if not isinstance(value, (dict, list, str)) or not _holds_time(schema):
        return None
    while True:
        ref = str(schema.get("$ref", "")).rsplit("/", 1)[-1]
        if ref in (TIME, MICRO_TIME):
            return go_parse_error(value, ref == MICRO_TIME) if isinstance(value, str) else None
        if ref:
            schema = resolve(schema)
            continue
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1:
            schema = all_of[0]
            continue
        break
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub is not None and (error := first_time_error(item, sub)):
                return error
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            if error := first_time_error(item, schema["items"]):
                return error
    return None
