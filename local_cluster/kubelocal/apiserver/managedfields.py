"""Field ownership (`metadata.managedFields`): which manager set which field, as sets of field paths.

A path is a tuple of elements: ("f", field) for an object field, ("k", '{"name":"c"}') for an element of
a list keyed by its map keys (`x-kubernetes-list-map-keys`, or the patch merge key of built-ins), ("v", json)
for an element of a set. Atomic lists and scalars are leaves. `FieldsV1` is the nested JSON form of a
set (`{"f:spec": {"f:replicas": {}}}`), and `path_string` the form conflicts print (`.spec.replicas`).
Every write records an `Update` entry for its manager (the changed fields move to it); server-side
apply keeps one `Apply` entry per manager (see apply.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from . import objects
from .registry import ResourceType
from .schema import core_schema, resolve

Element = tuple[str, str]
Path = tuple[Element, ...]
# Set by the server, never owned by a manager.
IGNORED_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)


def schema_for(rt: ResourceType) -> dict[str, Any] | None:
    if rt.is_custom:
        return ((rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema")
    return core_schema(rt.group, rt.version, rt.kind)


#: (id(schema), key) -> (schema, its sub-schema): every write walks the same few schemas field by field.
_SUB_SCHEMAS: dict[tuple[int, str], tuple[dict[str, Any], dict[str, Any] | None]] = {}


def sub_schema(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if schema is None:
        return None
    hit = _SUB_SCHEMAS.get((id(schema), key))
    if hit is not None and hit[0] is schema:
        return hit[1]
    found = _sub_schema(schema, key)
    _SUB_SCHEMAS[(id(schema), key)] = (schema, found)
    return found


def _sub_schema(schema: dict[str, Any], key: str) -> dict[str, Any] | None:
    schema = resolve(schema)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        schema = resolve(all_of[0])
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def list_keys(schema: dict[str, Any] | None) -> tuple[str, list[str]]:
    """("map", keys) | ("set", []) | ("atomic", []) for a list field."""
    if schema is None:
        return "atomic", []
    schema = resolve(schema)
    kind = schema.get("x-kubernetes-list-type")
    if kind == "map" and schema.get("x-kubernetes-list-map-keys"):
        return "map", list(schema["x-kubernetes-list-map-keys"])
    if kind == "set":
        return "set", []
    merge_key = schema.get("x-kubernetes-patch-merge-key")
    if merge_key and "merge" in (schema.get("x-kubernetes-patch-strategy") or ""):
        return "map", [merge_key]
    return "atomic", []


def item_key(item: Mapping[str, Any], keys: list[str]) -> str:
    return json.dumps({k: item.get(k) for k in keys if k in item}, separators=(",", ":"), sort_keys=True)


def leaf_paths(value: Any, schema: dict[str, Any] | None, prefix: Path = (), *, status: bool = False) -> set[Path]:
    """Every owned path of `value` (fields, keyed list elements and their fields, leaves); `status`: only
    the status section (a write to the status subresource), else everything but status."""
    out: set[Path] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if not prefix and (key in ("apiVersion", "kind") or (key == "status") != status):
                continue
            if prefix == (("f", "metadata"),) and key in IGNORED_META:
                continue
            path = (*prefix, ("f", key))
            field_schema = sub_schema(schema, key)
            if isinstance(item, dict) and item:
                out |= leaf_paths(item, field_schema, path)
            elif isinstance(item, list):
                out |= _list_paths(item, field_schema, path)
            else:
                out.add(path)
    return out


def _list_paths(items: list[Any], schema: dict[str, Any] | None, path: Path) -> set[Path]:
    kind, keys = list_keys(schema)
    if kind == "map" and all(isinstance(i, dict) for i in items):
        out: set[Path] = set()
        items_schema = resolve(schema).get("items") if schema else None
        for item in items:
            element = (*path, ("k", item_key(item, keys)))
            out.add(element)
            out |= leaf_paths(item, items_schema, element)
        return out
    if kind == "set":
        return {(*path, ("v", json.dumps(i, separators=(",", ":")))) for i in items} or {path}
    return {path}


def lookup(obj: Any, path: Path) -> tuple[bool, Any]:
    """(found, value) at `path` in `obj`."""
    current = obj
    for element in path:
        found, current = _step(current, element)
        if not found:
            return False, None
    return True, current


def _step(current: Any, element: Element) -> tuple[bool, Any]:
    """(found, value) one element below `current`."""
    kind, name = element
    if kind == "f":
        if not isinstance(current, dict) or name not in current:
            return False, None
        return True, current[name]
    if kind == "k":
        wanted = json.loads(name)
        match = (
            next(
                (i for i in current or [] if isinstance(i, dict) and all(i.get(k) == v for k, v in wanted.items())),
                None,
            )
            if isinstance(current, list)
            else None
        )
        return (False, None) if match is None else (True, match)
    value = json.loads(name)
    if not isinstance(current, list) or value not in current:
        return False, None
    return True, value


class _Lookups:
    """`lookup` for many paths of one object: each prefix is resolved once (a status write compares every
    owned path of a pod, and walking each from the root made that a visible part of every write)."""

    def __init__(self, obj: Any) -> None:
        self._memo: dict[Path, tuple[bool, Any]] = {(): (True, obj)}

    def __call__(self, path: Path) -> tuple[bool, Any]:
        hit = self._memo.get(path)
        if hit is None:
            found, parent = self(path[:-1])
            hit = _step(parent, path[-1]) if found else (False, None)
            self._memo[path] = hit
        return hit


def remove(obj: Any, path: Path) -> None:
    """Delete the field or list element at `path` (nothing if absent)."""
    if not path:
        return
    found, parent = lookup(obj, path[:-1])
    if not found:
        return
    kind, name = path[-1]
    if kind == "f" and isinstance(parent, dict):
        parent.pop(name, None)
    elif kind == "k" and isinstance(parent, list):
        wanted = json.loads(name)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in wanted.items()))]
    elif kind == "v" and isinstance(parent, list):
        value = json.loads(name)
        parent[:] = [i for i in parent if i != value]
    if parent in ({}, []) and len(path) > 1:
        remove(obj, path[:-1])  # Go leaves out an empty map or list (omitempty): so do we


def to_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    keys: dict[Element, str] = {}
    previous: Path = ()
    nodes = [root]  # nodes[i]: the node of previous[:i]; sorted paths share their prefixes with the one before
    for path in sorted(paths):
        shared = 0
        while shared < len(previous) and shared < len(path) and path[shared] == previous[shared]:
            shared += 1
        del nodes[shared + 1 :]
        node = nodes[shared]
        for element in path[shared:]:
            key = keys.get(element)
            if key is None:
                key = keys[element] = f"{element[0]}:{element[1]}"
            node = node.setdefault(key, {})
            if element[0] == "k":
                node.setdefault(".", {})
            nodes.append(node)
        previous = path
    return root


def from_fields_v1(fields: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, sub in fields.items():
        if key == ".":
            out.add(prefix)
            continue
        kind, _, name = key.partition(":")
        path = (*prefix, (kind, name))
        if sub:
            out |= from_fields_v1(sub, path)
            if kind == "k":
                out.add(path)
        else:
            out.add(path)
    return out


def path_string(path: Path) -> str:
    """As structured-merge-diff prints a path: `.spec.containers[name="c"].image`."""
    out = ""
    for kind, name in path:
        if kind == "f":
            out += f".{name}"
        elif kind == "k":
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(name).items()) + "]"
        else:
            out += f"[={name}]"
    return out


def entries(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def entry_paths(entry: Mapping[str, Any]) -> set[Path]:
    return from_fields_v1(entry.get("fieldsV1") or {})


def make_entry(
    manager: str, operation: str, api_version: str, paths: set[Path], subresource: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": objects.timestamp(),
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def record_update(
    rt: ResourceType, old: Mapping[str, Any] | None, new: dict[str, Any], manager: str, subresource: str | None
) -> None:
    """An Update by `manager`: the fields it added or changed become its own and leave other managers."""
    new_paths = leaf_paths(new, schema_for(rt), status=subresource == "status")
    if old is None:
        changed = new_paths
    else:
        in_old, in_new = _Lookups(old), _Lookups(new)
        changed = {p for p in new_paths if in_old(p) != in_new(p)}
    kept: list[dict[str, Any]] = []
    mine: set[Path] = set()
    own: tuple[dict[str, Any], set[Path]] | None = None  # the manager's entry for this operation, and its paths
    for entry in entries(old or {}):
        paths = entry_paths(entry)
        same = (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == (
            manager,
            "Update",
            subresource,
        )
        if same:
            mine = paths & new_paths
            own = (entry, paths)
            continue
        remaining = paths - changed if entry.get("subresource") == subresource else paths
        if remaining:
            kept.append({**entry, "fieldsV1": to_fields_v1(remaining)} if remaining != paths else dict(entry))
    meta = new.setdefault("metadata", {})
    if not changed:  # nothing new is owned: the entries stay as they were (a no-op write stays a no-op)
        if entries(old or {}):
            meta["managedFields"] = entries(old or {})
        else:
            meta.pop("managedFields", None)
        return
    owned = mine | changed
    if own is not None and own[1] == owned and own[0].get("apiVersion") == rt.api_version:
        # The same fields again (a status writer's next write): only the time moves. Stored objects are never
        # mutated, so the new entry shares the old one's fieldsV1 instead of building it again.
        kept.append({**own[0], "time": objects.timestamp()})
    else:
        kept.append(make_entry(manager, "Update", rt.api_version, owned, subresource))
    meta["managedFields"] = kept
