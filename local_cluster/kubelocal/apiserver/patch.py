"""The three patch flavours kube-apiserver accepts: JSON merge patch (RFC 7386), JSON patch (RFC 6902)
and strategic merge patch, the latter driven by the same x-kubernetes-patch-strategy/merge-key
annotations Kubernetes reads from its own types."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from .errors import ApiError
from .schema import resolve

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


REJECTED = "the server rejected our request due to an error in our request"


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902; a failed `test` is 422 (Invalid), a malformed patch or bad path is 422 too, as Kubernetes."""
    if not isinstance(ops, list):
        raise ApiError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        return jsonpatch.JsonPatch(ops).apply(target, in_place=False)
    except (
        jsonpatch.JsonPatchTestFailed,
        jsonpatch.JsonPatchConflict,
        jsonpatch.InvalidJsonPatch,
        jsonpatch.JsonPointerException,
    ) as e:
        # kube-apiserver answers every failure to apply a JSON patch with this generic 422 (the cause is not
        # in the body: NewGenericServerResponse drops it), and so do we.
        raise ApiError(422, REJECTED, details={}) from e


def _sub_schema(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if schema is None:
        return None
    schema = resolve(schema)
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, dict) else None


def _strategy(field_schema: dict[str, Any] | None) -> tuple[set[str], str | None]:
    if field_schema is None:
        return set(), None
    strategy = set((field_schema.get("x-kubernetes-patch-strategy") or "").split(",")) - {""}
    return strategy, field_schema.get("x-kubernetes-patch-merge-key")


def strategic_merge_patch(original: Any, patch: Any, schema: dict[str, Any] | None) -> Any:
    """Kubernetes strategic merge patch over `original`, using the schema's patch strategies."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        field_schema = _sub_schema(schema, key)
        strategy, merge_key = _strategy(field_schema)
        items_schema = resolve(field_schema).get("items") if field_schema else None
        if isinstance(value, list) and "merge" in strategy:
            result[key] = _merge_list(result.get(key) or [], value, merge_key, items_schema)
        elif isinstance(value, dict) and "replace" not in strategy:
            merged = strategic_merge_patch(result.get(key), value, field_schema)
            if merged is None:
                result.pop(key, None)
            else:
                if "retainKeys" in strategy and "$retainKeys" in value:
                    merged = {k: v for k, v in merged.items() if k in value["$retainKeys"]}
                result[key] = merged
        else:
            result[key] = _strip_directives(copy.deepcopy(value))
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _merge_list(
    original: list[Any], patch: list[Any], merge_key: str | None, items_schema: dict[str, Any] | None
) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip_directives(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if merge_key is None:
        # A list of primitives under strategy "merge" (finalizers): union, originals first.
        out = list(original)
        for item in patch:
            if isinstance(item, dict) and item.get("$patch") == "delete":
                continue
            if item not in out:
                out.append(item)
        return out
    out = [copy.deepcopy(o) for o in original]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(422, f"map: {item!r} does not contain declared merge key: {merge_key}")
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_strip_directives(copy.deepcopy(item)))
        else:
            out[idx] = strategic_merge_patch(out[idx], item, items_schema)
    return out
