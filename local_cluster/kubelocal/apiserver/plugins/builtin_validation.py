"""Validation of the built-in workload kinds beyond their schema (kube's `ValidateDeployment`,
`ValidateJob`, `ValidateService`...): immutable fields and the selector/template cross-field rule."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..admission import AdmissionRequest, Operation
from ..errors import invalid
from .labels import selector_matches

Cause = tuple[str, str, str]


def selector_matches_template(spec: Mapping[str, Any]) -> list[Cause]:
    """`spec.selector` must be set and select the template's labels (or the controller would create pods
    it never sees)."""
    selector = spec.get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return [("spec.selector", "FieldValueRequired", "Required value")]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector_matches(selector, labels):
        return [("spec.template.metadata.labels", "FieldValueInvalid",
                 f"Invalid value: {json.dumps(labels)}: `selector` does not match template `labels`")]
    return []


def immutable(old: Mapping[str, Any], new: Mapping[str, Any], *path: str) -> list[Cause]:
    def dig(obj: Mapping[str, Any]) -> Any:
        for key in path:
            obj = (obj or {}).get(key) if isinstance(obj, Mapping) else None  # type: ignore[assignment]
        return obj

    before, after = dig(old), dig(new)
    if before not in (None, "") and before != after:
        return [(".".join(path), "FieldValueInvalid", f"Invalid value: {json.dumps(after)}: field is immutable")]
    return []


def causes(key: tuple[str, str], obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Cause]:
    """Every rule the object breaks (create when `old` is None, else update)."""
    spec = obj.get("spec") or {}
    found: list[Cause] = []
    if key in (("apps", "deployments"), ("apps", "replicasets")):
        found += selector_matches_template(spec)
        if old is not None:
            found += immutable(old, obj, "spec", "selector")
    elif key == ("batch", "jobs"):
        if spec.get("manualSelector") or spec.get("selector"):
            found += selector_matches_template(spec) if spec.get("manualSelector") else []
        if old is not None:
            found += immutable(old, obj, "spec", "selector")
            found += immutable(old, obj, "spec", "completions")
            found += immutable(old, obj, "spec", "template")
    elif key == ("", "services") and old is not None:
        found += immutable(old, obj, "spec", "clusterIP")
    return found


KINDS = {("apps", "deployments"), ("apps", "replicasets"), ("batch", "jobs"), ("", "services")}


class BuiltinValidation:
    name = "BuiltinValidation"

    def handles(self, request: AdmissionRequest) -> bool:
        return (request.operation in (Operation.CREATE, Operation.UPDATE) and request.subresource is None
                and request.obj is not None and request.rt.key in KINDS)

    def validate(self, request: AdmissionRequest) -> None:
        assert request.obj is not None
        found = causes(request.rt.key, request.obj, request.old)
        if found:
            raise invalid(request.rt.kind, request.rt.group, request.name, found)
