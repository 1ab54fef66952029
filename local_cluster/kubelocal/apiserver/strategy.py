"""REST strategies: the per-kind rules of create and update (kube-apiserver's `rest.RESTCreateStrategy`):
type checks, validation, pruning and defaulting against the kind's schema, and what the server fills in."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from . import objects
from .errors import ApiError, invalid
from .plugins import cel_rules
from .registry import ResourceType
from .schema import Findings, check_object, core_schema, validate_metadata
from .store import Key
from .timefields import first_time_error

CRD_KEY: Key = ("apiextensions.k8s.io", "customresourcedefinitions")
NS_KEY: Key = ("", "namespaces")
POD_KEY: Key = ("", "pods")
SERVICE_KEY: Key = ("", "services")
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"

def check_type(rt: ResourceType, obj: dict[str, Any]) -> None:
    """The body's kind/apiVersion must be the URL's (or absent); afterwards both are set."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind and kind != rt.kind:
        raise ApiError(400, f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
    if api_version and api_version != rt.api_version:
        raise ApiError(
            400,
            f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})",
        )
    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version


def check_decodable(rt: ResourceType, obj: dict[str, Any], *, patched: bool = False) -> None:
    """What decoding a built-in kind refuses before validation: time fields Go cannot parse.
    A body is a 400 (`... cannot be handled as a Lease`); a patch's result is a 422 on `patch`."""
    schema = None if rt.is_custom else core_schema(rt.group, rt.version, rt.kind)
    error = first_time_error(obj, schema) if schema else None
    if error is None:
        return
    if patched:
        shown = json.dumps(obj, separators=(",", ":"))
        raise invalid("", "", "", [("patch", "FieldValueInvalid", f"Invalid value: {json.dumps(shown)}: {error}")])
    raise ApiError(400, f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}')


def validate(
    rt: ResourceType, obj: dict[str, Any], query: Mapping[str, str], *, settled: frozenset[str] = frozenset()
) -> list[str]:
    """Validate, prune and default; returns warnings (unknown fields) or raises 400/422. A built-in's top-level
    fields in `settled` are the stored ones, valid already, and are not walked again."""
    name = obj["metadata"].get("name") or obj["metadata"].get("generateName") or ""
    found: Findings | None
    if rt.is_custom:
        schema = ((rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema") or {}
        found = check_object(obj, schema, custom=True)
    else:
        schema_def = core_schema(rt.group, rt.version, rt.kind)
        found = check_object(obj, schema_def, custom=False, settled=settled) if schema_def else None
    errors = list(found.errors) if found else []
    if errors:
        # As kube-apiserver: a body of the wrong types is refused as decoded; the field rules below
        # assume the types are right (a container name that is a mapping must be a 422, not a crash).
        raise invalid(rt.kind, rt.group, name, errors)
    errors += validate_metadata(obj["metadata"], name_rule=name_rule(rt))
    if rt.key == POD_KEY:
        errors += objects.pod_validation_errors(obj)
    if rt.key == CRD_KEY:
        errors += crd_errors(obj)
    if errors:
        raise invalid(rt.kind, rt.group, name, errors)
    unknown = found.unknown if found else []
    mode = (query.get("fieldValidation") or "Warn").capitalize()
    if unknown and mode == "Strict":
        fields = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise ApiError(400, f"strict decoding error: {fields}")
    return [f'unknown field "{u}"' for u in unknown] if mode == "Warn" else []


def name_rule(rt: ResourceType) -> str:
    """Which DNS rule a kind's names follow (Services: RFC 1035 labels; Namespaces: RFC 1123 labels)."""
    if rt.key == SERVICE_KEY:
        return "dns1035"
    if rt.key == NS_KEY:
        return "label"
    return "subdomain"


def crd_errors(crd: dict[str, Any]) -> list[tuple[str, str, str]]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    errors = []
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if crd["metadata"].get("name") != expected:
        errors.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{crd["metadata"].get("name")}": must be spec.names.plural+"."+spec.group',
            )
        )
    versions = spec.get("versions") or []
    if sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            (
                "spec.versions",
                "FieldValueInvalid",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for i, v in enumerate(versions):
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errors.append(
                (
                    f"spec.versions[{i}].schema.openAPIV3Schema",
                    "FieldValueRequired",
                    "Required value: schemas are required",
                )
            )
        elif schema.get("type") != "object":
            errors.append(
                (
                    f"spec.versions[{i}].schema.openAPIV3Schema.type",
                    "FieldValueRequired",
                    "Required value: must not be empty at the root",
                )
            )
        else:
            errors += cel_rules.compile_errors(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
    return errors


def prepare_create(rt: ResourceType, obj: dict[str, Any], allocate_ip: Callable[[], str]) -> None:
    """What the server fills in on create, per kind (PrepareForCreate)."""
    if rt.key == POD_KEY:
        objects.prepare_pod_create(obj)
    elif rt.key == SERVICE_KEY:
        objects.prepare_service_create(obj, allocate_ip)
    elif rt.key == NS_KEY:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif rt.key == CRD_KEY:
        fins = obj["metadata"].setdefault("finalizers", [])
        if CRD_CLEANUP_FINALIZER not in fins:
            fins.append(CRD_CLEANUP_FINALIZER)
        crd_status(obj)


def crd_status(crd: dict[str, Any]) -> None:
    """A CRD is accepted and Established at once (no name conflicts are possible here)."""
    ts = objects.timestamp()
    spec = crd["spec"]
    storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    crd["status"] = {
        "acceptedNames": spec["names"],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": ts,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": ts,
            },
        ],
        "storedVersions": storage,
    }
