"""Server-side apply (`PATCH` with `application/apply-patch+yaml`): the applied configuration is merged into
the live object, the manager owns exactly the fields it applied (fields it applied before and left out
now are removed unless another manager owns them), and setting a field another manager owns to a
different value is a 409 naming the fields and managers, unless `force=true` takes them over."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from . import managedfields as mf
from .authorization import ADMIN, UserInfo
from .codec import truthy
from .errors import ApiError, details
from .registry import ResourceType
from .rest import create, update
from .rest.context import RestContext


def _printed(entry: Mapping[str, Any]) -> str:
    """How kube-apiserver names a manager in a conflict: Update managers with their apiVersion and time."""
    name = json.dumps(entry.get("manager", ""))
    if entry.get("operation") == "Update":
        at = f" at {entry['time']}" if entry.get("time") else ""
        return f"{name} using {entry.get('apiVersion', '')}{at}"
    return name


def conflict_error(conflicts: Sequence[tuple[Mapping[str, Any], mf.Path]]) -> ApiError:
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {_printed(e)}", "field": mf.path_string(p)}
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {_printed(entry)}: {mf.path_string(path)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for entry, path in conflicts:
            by_manager.setdefault(_printed(entry), []).append(mf.path_string(path))
        lines = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {manager}:")
            lines += [f"- {p}" for p in sorted(by_manager[manager])]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, message, reason="Conflict", details={"causes": causes})


def _differs(live: Any, config: Any, path: mf.Path) -> bool:
    """Whether applying `config` changes what `path` holds: a leaf by its value; a keyed or set list element
    only by being there or not (the live one carries defaults the config leaves out, and its fields are
    paths of their own)."""
    found_live, in_live = mf.lookup(live, path)
    found_config, in_config = mf.lookup(config, path)
    if path and path[-1][0] in ("k", "v"):
        return found_live != found_config
    return (found_live, in_live) != (found_config, in_config)


def merge(live: Any, config: Any, schema: dict[str, Any] | None) -> Any:
    """The applied configuration over the live object: objects field by field, keyed lists item by item."""
    if not isinstance(config, dict) or not isinstance(live, dict):
        return copy.deepcopy(config)
    out = dict(live)
    for key, value in config.items():
        field_schema = mf.sub_schema(schema, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list):
            kind, keys = mf.list_keys(field_schema)
            current = out.get(key)
            if kind == "map" and isinstance(current, list):
                items_schema = (field_schema or {}).get("items")
                merged = list(current)
                for item in value:
                    wanted = mf.item_key(item, keys) if isinstance(item, dict) else None
                    index = next(
                        (i for i, c in enumerate(merged) if isinstance(c, dict) and mf.item_key(c, keys) == wanted),
                        None,
                    )
                    if index is None:
                        merged.append(copy.deepcopy(item))
                    else:
                        merged[index] = merge(merged[index], item, items_schema)
                out[key] = merged
            elif kind == "set" and isinstance(current, list):
                out[key] = current + [v for v in value if v not in current]
            else:
                out[key] = copy.deepcopy(value)
        else:
            out[key] = merge(out.get(key), value, field_schema)
    return out


def apply(
    ctx: RestContext,
    rt: ResourceType,
    ns: str | None,
    name: str,
    raw: bytes,
    sub: str | None,
    query: Mapping[str, str],
    *,
    user: UserInfo = ADMIN,
) -> tuple[dict[str, Any], list[str], bool]:
    """Apply `raw` (YAML or JSON) as `fieldManager`; returns (object, warnings, created)."""
    config = yaml.safe_load(raw) if raw.strip() else None
    if not isinstance(config, dict):
        raise ApiError(400, "the body of the request must be an object (the applied configuration)")
    body_name = (config.get("metadata") or {}).get("name")
    if body_name and body_name != name:
        raise ApiError(400, f"the name of the object ({body_name}) does not match the name on the URL ({name})")
    manager, force = query["fieldManager"], truthy(query.get("force"))
    schema = mf.schema_for(rt)
    applied = mf.leaf_paths(config, schema, status=sub == "status")
    live = ctx.store.get(rt.key, ns, name)
    if live is None:
        if sub is not None:
            raise ApiError(404, f'{rt.plural} "{name}" not found', details=details(name, rt.group, rt.plural))
        obj = copy.deepcopy(config)
        obj.setdefault("metadata", {})["name"] = name
        obj["metadata"]["managedFields"] = [mf.make_entry(manager, "Apply", rt.api_version, applied, None)]
        created, warnings = create.create(ctx, rt, ns, obj, query, user=user)
        return created, warnings, True
    mine = (manager, "Apply", sub)
    conflicts = []
    others: list[tuple[dict[str, Any], set[mf.Path]]] = []
    previous: set[mf.Path] = set()
    for entry in mf.entries(live):
        paths = mf.entry_paths(entry)
        if (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == mine:
            previous = paths
            continue
        clashing = {p for p in paths & applied if _differs(live, config, p)}
        conflicts += [(entry, p) for p in sorted(clashing)]
        others.append((entry, paths - clashing if force else paths))
    if conflicts and not force:
        raise conflict_error(conflicts)
    result = copy.deepcopy(live)
    owned_by_others = set().union(*(paths for _, paths in others)) if others else set()
    for path in sorted(previous - applied, key=len, reverse=True):
        if path not in owned_by_others:
            mf.remove(result, path)
    result = merge(result, {k: v for k, v in config.items() if k not in ("apiVersion", "kind")}, schema)
    result["metadata"]["managedFields"] = [
        {**entry, "fieldsV1": mf.to_fields_v1(paths)} for entry, paths in others if paths
    ] + [mf.make_entry(manager, "Apply", rt.api_version, applied, sub)]
    obj, warnings = update.write_update(ctx, rt, live, result, sub, query, user=user)
    return obj, warnings, False
