"""Discovery documents (/api, /apis, group versions), /version, and /openapi/v3 built from the registry."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .registry import Registry, ResourceType
from .schema import _META_DEF, KUBERNETES_SCHEMA_VERSION, core_definition_name, core_definitions

MAJOR, MINOR = KUBERNETES_SCHEMA_VERSION.split(".")[:2]


def version_info() -> dict[str, str]:
    return {
        "major": MAJOR,
        "minor": MINOR,
        "emulationMajor": MAJOR,
        "emulationMinor": MINOR,
        "minCompatibilityMajor": MAJOR,
        "minCompatibilityMinor": str(int(MINOR) - 1),
        "gitVersion": f"v{KUBERNETES_SCHEMA_VERSION}+tfjob-local",
        "gitCommit": "0" * 40,
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(host: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, vs) for g, vs in registry.groups().items()],
    }


def api_group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.groups().get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.resources_in(group, version)
    if not types:
        return None
    resources = [entry for rt in sorted(types, key=lambda r: r.plural) for entry in rt.discovery()]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


# --- OpenAPI v3 -------------------------------------------------------------------------------------------


def _to_openapi(schema: Any) -> Any:
    """JSON-schema flavoured core definitions → OpenAPI v3 (refs under components, no null types)."""
    if isinstance(schema, list):
        return [_to_openapi(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "$ref":
            out[k] = "#/components/schemas/" + v.rsplit("/", 1)[-1]
        elif k == "type" and isinstance(v, list):
            types = [t for t in v if t != "null"]
            if len(types) == 1:
                out[k] = types[0]
        elif k == "oneOf" and all(isinstance(s, dict) and "type" in s for s in v):
            out["x-kubernetes-int-or-string"] = True
        elif k in ("properties",) and isinstance(v, dict):
            out[k] = {pk: _to_openapi(pv) for pk, pv in v.items()}
        else:
            out[k] = _to_openapi(v)
    return out


def _closure(names: list[str]) -> list[str]:
    defs = core_definitions()
    seen: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.append(name)
        stack: list[Any] = [defs[name]]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    todo.append(ref.rsplit("/", 1)[-1])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return seen


def crd_schema_name(rt: ResourceType) -> str:
    return ".".join(reversed(rt.group.split("."))) + f".{rt.version}.{rt.kind}"


def _operation(rt: ResourceType, action: str, schema_ref: str, body: bool, patch: bool = False) -> dict[str, Any]:
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    params = [
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
    ]
    if body:
        params.append({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}})
    op: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    }
    if body:
        if patch:
            types = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
            if not rt.is_custom:
                types.insert(2, "application/strategic-merge-patch+json")
            content = {t: {"schema": {"type": "object"}} for t in types}
        else:
            content = {"application/json": {"schema": {"$ref": schema_ref}}}
        op["requestBody"] = {"content": content, "required": True}
    return op


def openapi_v3_doc(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version: enough for kubectl's field validation check,
    strategic-merge-patch metadata and `kubectl explain`."""
    types = [rt for rt in registry.resources_in(group, version)]
    if not types:
        return None
    defs = core_definitions()
    schemas: dict[str, Any] = {}
    wanted = [_META_DEF]
    paths: dict[str, Any] = {}
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    for rt in types:
        if rt.is_custom:
            name = crd_schema_name(rt)
            raw = json.loads(json.dumps(((rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema") or {}))
            raw.setdefault("type", "object")
            props = raw.setdefault("properties", {})
            props["metadata"] = {
                "allOf": [{"$ref": f"#/components/schemas/{_META_DEF}"}],
                "description": "Standard object's metadata.",
            }
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            raw["x-kubernetes-group-version-kind"] = [{"group": rt.group, "version": rt.version, "kind": rt.kind}]
            schemas[name] = raw
        else:
            name = core_definition_name(rt.group, rt.version, rt.kind) or ""
            if not name:
                continue
            wanted.append(name)
        ref = f"#/components/schemas/{name}"
        base = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
        paths[base] = {"get": _operation(rt, "list", ref, False), "post": _operation(rt, "post", ref, True)}
        paths[base + "/{name}"] = {
            "get": _operation(rt, "get", ref, False),
            "put": _operation(rt, "put", ref, True),
            "patch": _operation(rt, "patch", ref, True, patch=True),
            "delete": _operation(rt, "delete", ref, False),
        }
        if rt.has_status:
            paths[base + "/{name}/status"] = {
                "get": _operation(rt, "get", ref, False),
                "put": _operation(rt, "put", ref, True),
                "patch": _operation(rt, "patch", ref, True, patch=True),
            }
    for name in _closure(wanted):
        schemas[name] = _to_openapi(defs[name])
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{KUBERNETES_SCHEMA_VERSION}"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_v3_index(registry: Registry, docs: dict[str, bytes]) -> dict[str, Any]:
    """`/openapi/v3`: one entry per group-version, with a content hash as kubectl expects."""
    paths: dict[str, Any] = {}
    gvs = [("", "v1")] + [(g, v) for g, vs in registry.groups().items() for v in vs]
    for group, version in gvs:
        key = f"apis/{group}/{version}" if group else f"api/{version}"
        raw = docs.get(key)
        if raw is None:
            doc = openapi_v3_doc(registry, group, version)
            if doc is None:
                continue
            raw = docs[key] = json.dumps(doc, separators=(",", ":")).encode()
        digest = hashlib.sha512(raw).hexdigest()[:128].upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}
