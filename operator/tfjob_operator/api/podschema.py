"""A replica type's pod template checked against the Kubernetes schema of the server version we target.

The schema is Kubernetes' own OpenAPI, as published by the kubernetes-validate package (strict flavour:
unknown fields are errors, as with `kubectl apply`'s default field validation), checked with jsonschema
(its dependency). The validator is built once; all errors are reported, each with its field path, so
`tfjob render`, the webhook and the operator refuse a bad template with the same words, and what render
accepts the API server accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema
from kubernetes.utils.quantity import parse_quantity
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

#: The Kubernetes version whose pod schema templates are checked against (the emulator serves the same).
KUBERNETES_VERSION = "1.37.0"
#: Errors reported per template: enough to fix a template in one go, bounded for a generated monster.
MAX_ERRORS = 10

_INT_BOUNDS = {"int32": 2**31, "int64": 2**63}
#: Whitespace as Go's unicode.IsSpace (strings.TrimSpace) reads it, which kube-apiserver trims from a pod's image
#: (Python's str.strip also trims U+001C-U+001F, which Go keeps).
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


def _format_checker() -> jsonschema.FormatChecker:
    # The API server decodes int32/int64 fields into Go integers: a larger number is refused there.
    checker = jsonschema.FormatChecker()
    for name, bound in _INT_BOUNDS.items():
        def fits(value: object, bound: int = bound) -> bool:
            return not isinstance(value, int) or isinstance(value, bool) or -bound <= value < bound

        checker.checks(name)(fits)
    return checker


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    folder = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    schema = schema_contents(f"{folder}/podtemplatespec-v1.json", KUBERNETES_VERSION)
    definitions = schema_contents(f"{folder}/_definitions.json", KUBERNETES_VERSION)
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=registry, format_checker=_format_checker())  # type: ignore[no-any-return]


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(error: jsonschema.ValidationError) -> str:
    got = repr(error.instance)
    if len(got) > 60:
        got = got[:57] + "..."
    if error.validator == "type":
        want = error.validator_value
        want = " or ".join(w for w in (want if isinstance(want, list) else [want]) if w != "null")
        return f"must be {'an' if want[0] in 'aeiou' else 'a'} {want}, got {got}"
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties") or {}))
        return f"unknown field {', '.join(map(repr, extra))} (remove it, or check its spelling)"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    if error.validator == "format":
        return f"{got} does not fit in an {error.validator_value}"
    if error.validator in ("oneOf", "anyOf"):  # Kubernetes uses them for int-or-string and quantities only
        return f"must be a number or a string such as \"500m\" or \"4Gi\", got {got}"
    if error.validator == "enum":
        return f"{got} is not one of {error.validator_value}"
    return error.message[:200]


def _null_items(node: Any, path: str) -> list[str]:
    # The published schemas allow null everywhere, but Kubernetes decodes a null list item into an empty
    # object (a port without containerPort, a container without name) and refuses it.
    if isinstance(node, Mapping):
        return [m for key, value in node.items() for m in _null_items(value, f"{path}.{key}")]
    if isinstance(node, list):
        out: list[str] = []
        for i, value in enumerate(node):
            out += [f"{path}[{i}]: empty item (remove it)"] if value is None else _null_items(value, f"{path}[{i}]")
        return out
    return []


def _quantity_messages(field: str, template: Mapping[str, Any]) -> list[str]:
    # The schema says only "a number or a string"; the API server parses quantities, and so does the operator.
    spec = template.get("spec") or {}
    found: list[tuple[str, Any]] = [(f"{field}.spec.overhead", spec.get("overhead"))]
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or []):
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                found.append((f"{field}.spec.{key}[{i}].resources.{kind}", resources.get(kind)))
    return [f"{path}.{name}: {message}" for path, values in found for name, value in (values or {}).items()
            if (message := quantity_problem(value))]


def quantity_problem(value: Any) -> str:
    """Why kube-apiserver refuses this as a resource quantity ("" if it does not): not one, or negative."""
    if not is_quantity(value):
        return f"{value!r:.60} is not a quantity (e.g. 2, 500m, 4Gi)"
    if parse_quantity(value) < 0:
        return f"{value!r:.60} is negative (a quantity must be ≥ 0)"
    return ""


def is_quantity(value: Any) -> bool:
    """Whether Kubernetes (and the operator's resource arithmetic) reads this as a finite quantity."""
    try:
        return bool(parse_quantity(value).is_finite())
    except (ValueError, TypeError, ArithmeticError):
        return False


def template_schema_messages(field: str, template: Mapping[str, Any]) -> list[str]:
    """Why the pod template would be refused by the API server, each message naming its field."""
    nulls = _null_items(template, field)
    if nulls:
        return nulls[:MAX_ERRORS]
    errors = sorted(_validator().iter_errors(template), key=lambda e: [str(p) for p in e.absolute_path])
    messages = [f"{field}{_path(e.absolute_path)}: {_describe(e)}" for e in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        messages.append(f"{field}: {len(errors) - MAX_ERRORS} more errors not shown")
    return messages or _quantity_messages(field, template)
