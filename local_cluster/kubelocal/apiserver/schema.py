"""Schema checks as kube-apiserver does them: type/required/enum/bounds validation, pruning of unknown
fields, and defaulting, for built-ins (Kubernetes' published schemas) and custom resources (the CRD's
openAPIV3Schema). One recursive walk does all three, so validation stays cheap (no jsonschema compile)."""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources as importlib_resources
from typing import Any

#: The Kubernetes minor whose published schemas the emulator validates built-ins against.
KUBERNETES_SCHEMA_VERSION = "1.37.0"

_META_DEF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@functools.cache
def core_definitions() -> dict[str, Any]:
    """Kubernetes' published definitions (`$defs`), from the kubernetes-validate package, loaded once."""
    base = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    path = base.joinpath(f"v{KUBERNETES_SCHEMA_VERSION}-local", "_definitions.json")
    with path.open() as f:
        defs: dict[str, Any] = json.load(f)["$defs"]
    return defs


@functools.cache
def _gvk_index() -> dict[tuple[str, str, str], str]:
    out = {}
    for name, d in core_definitions().items():
        for gvk in d.get("x-kubernetes-group-version-kind") or []:
            out[(gvk["group"], gvk["version"], gvk["kind"])] = name
    return out


def core_definition_name(group: str, version: str, kind: str) -> str | None:
    """The definition name of a built-in kind, e.g. ("", "v1", "Pod") → io.k8s.api.core.v1.Pod."""
    return _gvk_index().get((group, version, kind))


def core_schema(group: str, version: str, kind: str) -> dict[str, Any] | None:
    name = core_definition_name(group, version, kind)
    return core_definitions()[name] if name else None


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow `$ref` into the core definitions (CRD schemas never contain refs)."""
    while "$ref" in schema:
        schema = core_definitions()[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


@dataclass
class Findings:
    """What one walk found: validation errors (field, reason, message) and pruned unknown fields."""

    errors: list[tuple[str, str, str]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


#: id(schema) -> (schema, its types, its types but "null"): every write walks the same few schemas.
_TYPES: dict[int, tuple[dict[str, Any], frozenset[str], frozenset[str]]] = {}


def _type_sets(schema: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    hit = _TYPES.get(id(schema))
    if hit is None or hit[0] is not schema:
        t = schema.get("type")
        types = frozenset() if t is None else frozenset([t] if isinstance(t, str) else t)
        hit = _TYPES[id(schema)] = (schema, types, types - {"null"})
    return hit[1], hit[2]


def _types(schema: dict[str, Any]) -> frozenset[str]:
    return _type_sets(schema)[0]


_GO_HEX_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\x\{([0-9A-Fa-f]{1,8})\}")


@functools.lru_cache(maxsize=256)
def go_regex(pattern: str) -> re.Pattern[str]:
    """A schema's `pattern` (Go's RE2 syntax, as kube-apiserver reads it) for Python's re: `\\x{85}` is written
    `\\U00000085` there, `\\z` is `\\Z`, and `$` ends the text only (Python's would also match before a final
    newline); the rest of what CRDs use reads the same."""
    python = _GO_HEX_ESCAPE.sub(lambda m: f"{m.group(1)}\\U{int(m.group(2), 16):08x}", pattern)
    out, in_class, i = [], False, 0
    while i < len(python):
        c = python[i]
        if c == "\\":
            escaped = python[i:i + 2]
            out.append("\\Z" if escaped == "\\z" else escaped)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append("\\Z" if c == "$" and not in_class else c)
        i += 1
    return re.compile("".join(out))


def _go_repr(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))[:200]
    return str(value)


def _type_ok(value: Any, types: frozenset[str]) -> bool:
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return "integer" in types or "number" in types
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value.is_integer())
    if isinstance(value, str):
        return "string" in types
    if isinstance(value, list):
        return "array" in types
    if isinstance(value, dict):
        return "object" in types
    return value is None and "null" in types


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Walker:
    """Validates, prunes and defaults one object in place; `custom` selects CRD (structural) rules."""

    def __init__(
        self, *, custom: bool, prune: bool = True, apply_defaults: bool = True, settled: frozenset[str] = frozenset()
    ) -> None:
        self.custom = custom
        self.prune = prune
        self.apply_defaults = apply_defaults
        #: Top-level fields taken as valid without a walk (a status write keeps the stored spec).
        self.settled = settled
        self.found = Findings()

    def error(self, path: str, reason: str, message: str) -> None:
        self.found.errors.append((path, reason, message))

    def walk(self, value: Any, schema: dict[str, Any], path: str) -> Any:
        schema = resolve(schema)
        if value is None:
            return None
        if schema.get("x-kubernetes-int-or-string"):
            if not isinstance(value, (int, str)) or isinstance(value, bool):
                self.error(
                    path,
                    "FieldValueTypeInvalid",
                    f"Invalid value: {_go_repr(value)}: {path} in body must be of type integer-or-string",
                )
            elif self.custom:
                self._value_checks(value, schema, path)
            return value
        if "oneOf" in schema and not self.custom:
            # Built-ins use oneOf only for scalars (IntOrString, Quantity).
            if not any(_type_ok(value, _types(resolve(s))) for s in schema["oneOf"]):
                self.error(
                    path, "FieldValueTypeInvalid", f"Invalid value: {_go_repr(value)}: {path} has the wrong type"
                )
            return value
        types = _type_sets(schema)[1]
        if types and not _type_ok(value, types):
            want = sorted(types)[0]
            self.error(
                path,
                "FieldValueTypeInvalid",
                f"Invalid value: {_go_repr(value)}: {path} in body must be of type {want}: {_go_repr(value)}",
            )
            return value
        if isinstance(value, dict):
            value = self._object(value, schema, path)
        elif isinstance(value, list):
            value = self._array(value, schema, path)
        if self.custom:
            self._value_checks(value, schema, path)
        elif "enum" in schema and value not in schema["enum"]:
            self._unsupported(value, schema["enum"], path)
        return value

    def _unsupported(self, value: Any, allowed: list[Any], path: str) -> None:
        supported = ", ".join(_go_repr(v) for v in allowed)
        self.error(
            path, "FieldValueNotSupported", f"Unsupported value: {_go_repr(value)}: supported values: {supported}"
        )

    def _object(self, value: dict[str, Any], schema: dict[str, Any], path: str) -> dict[str, Any]:
        props: dict[str, Any] | None = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        if self.custom and (path in ("", None) or embedded):
            for key in ("apiVersion", "kind"):
                if key in value and not isinstance(value[key], str):
                    self.error(_join(path, key), "FieldValueTypeInvalid", "Invalid value: must be a string")
            if "metadata" in value and isinstance(value["metadata"], dict):
                value["metadata"] = self._metadata(value["metadata"], _join(path, "metadata"))
            if embedded:
                for key in ("apiVersion", "kind"):
                    if not value.get(key):
                        self.error(_join(path, key), "FieldValueRequired", "Required value: must not be empty")
        keep = {"apiVersion", "kind", "metadata"} if self.custom and (path == "" or embedded) else set()
        if path == "":
            keep |= self.settled
        for key in list(value):
            sub = value[key]
            sub_path = _join(path, key)
            if key in keep:
                continue
            if props is not None and key in props:
                if sub is None and self.custom and not resolve(props[key]).get("nullable"):
                    del value[key]  # CRD nulls on non-nullable fields are pruned, then defaulted
                    continue
                value[key] = self.walk(sub, props[key], sub_path)
            elif isinstance(additional, dict):
                if sub is None and self.custom and not resolve(additional).get("nullable"):
                    del value[key]
                    continue
                value[key] = self.walk(sub, additional, sub_path)
            elif additional is True or preserve or (props is None and additional is None):
                continue
            else:
                self.found.unknown.append(sub_path)
                if self.prune:
                    del value[key]
        if self.apply_defaults and self.custom and props:
            for key, sub_schema in props.items():
                if key not in value and "default" in sub_schema:
                    value[key] = self.walk(copy.deepcopy(sub_schema["default"]), sub_schema, _join(path, key))
        for key in schema.get("required") or []:
            if key not in value or (value[key] is None and not self.custom):
                self.error(_join(path, key), "FieldValueRequired", "Required value")
        return value

    def _array(self, value: list[Any], schema: dict[str, Any], path: str) -> list[Any]:
        items = schema.get("items")
        if isinstance(items, dict):
            for i, sub in enumerate(value):
                value[i] = self.walk(sub, items, f"{path}[{i}]")
        if schema.get("x-kubernetes-list-type") in ("set", "map") and self.custom:
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = set()
            for i, item in enumerate(value):
                ident = json.dumps(
                    [item.get(k) for k in keys] if keys and isinstance(item, dict) else item, sort_keys=True
                )
                if ident in seen:
                    self.error(f"{path}[{i}]", "FieldValueDuplicate", f"Duplicate value: {_go_repr(item)}")
                seen.add(ident)
        return value

    def _value_checks(self, value: Any, schema: dict[str, Any], path: str) -> None:
        """The value validations of OpenAPI, each for the values it applies to (a pattern to strings, a minimum to
        numbers), as kube-openapi applies them: an int-or-string value gets those of its actual type."""
        if "enum" in schema and value not in schema["enum"]:
            self._unsupported(value, schema["enum"], path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema:
                lo = schema["minimum"]
                if value < lo or (schema.get("exclusiveMinimum") is True and value == lo):
                    op = "greater than" if schema.get("exclusiveMinimum") is True else "greater than or equal to"
                    self.error(
                        path,
                        "FieldValueInvalid",
                        f"Invalid value: {_go_repr(value)}: {path} in body should be {op} {lo}",
                    )
            if "maximum" in schema:
                hi = schema["maximum"]
                if value > hi or (schema.get("exclusiveMaximum") is True and value == hi):
                    op = "less than" if schema.get("exclusiveMaximum") is True else "less than or equal to"
                    self.error(
                        path,
                        "FieldValueInvalid",
                        f"Invalid value: {_go_repr(value)}: {path} in body should be {op} {hi}",
                    )
            if "multipleOf" in schema and value % schema["multipleOf"]:
                self.error(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(value)}: {path} in body should be a multiple of {schema['multipleOf']}",
                )
        if isinstance(value, str):
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.error(path, "FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes")
            if "minLength" in schema and len(value) < schema["minLength"]:
                self.error(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(value)}: {path} in body should be at least "
                    f"{schema['minLength']} chars long",
                )
            if "pattern" in schema and not go_regex(schema["pattern"]).search(value):
                self.error(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(value)}: {path} in body should match '{schema['pattern']}'",
                )
        if isinstance(value, list):
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                self.error(
                    path, "FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
                )
            if "minItems" in schema and len(value) < schema["minItems"]:
                self.error(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {len(value)}: {path} in body should have at least {schema['minItems']} items",
                )
        if isinstance(value, dict):
            if "maxProperties" in schema and len(value) > schema["maxProperties"]:
                self.error(
                    path,
                    "FieldValueTooMany",
                    f"Too many: {len(value)}: must have at most {schema['maxProperties']} items",
                )
            if "minProperties" in schema and len(value) < schema["minProperties"]:
                self.error(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {len(value)}: {path} in body should have at least "
                    f"{schema['minProperties']} properties",
                )
        for keyword in ("anyOf", "oneOf", "allOf", "not"):
            if keyword in schema:
                self._combinator(keyword, value, schema[keyword], path)

    def _combinator(self, keyword: str, value: Any, subs: Any, path: str) -> None:
        def ok(sub: dict[str, Any]) -> bool:
            probe = Walker(custom=True, prune=False, apply_defaults=False)
            probe.walk(copy.deepcopy(value), sub, path)
            return not probe.found.errors

        if keyword == "not":
            if ok(subs):
                self.error(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(value)}: {path} in body should not be valid against the given schema",
                )
            return
        results = [ok(s) for s in subs]
        if keyword == "allOf" and not all(results):
            self.error(
                path, "FieldValueInvalid", f"Invalid value: {_go_repr(value)}: {path} in body must match all schemas"
            )
        if keyword == "anyOf" and not any(results):
            self.error(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_go_repr(value)}: {path} in body must match at least one schema",
            )
        if keyword == "oneOf" and sum(results) != 1:
            self.error(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_go_repr(value)}: {path} in body must match exactly one schema",
            )

    def _metadata(self, meta: dict[str, Any], path: str) -> dict[str, Any]:
        sub = Walker(custom=False, prune=self.prune, apply_defaults=False)
        meta = sub.walk(meta, {"$ref": f"#/$defs/{_META_DEF}"}, path)
        self.found.errors.extend(sub.found.errors)
        self.found.unknown.extend(sub.found.unknown)
        return meta


def check_object(
    obj: dict[str, Any], schema: dict[str, Any], *, custom: bool, settled: frozenset[str] = frozenset()
) -> Findings:
    """Validate, prune (unknown fields) and, for custom resources, default `obj` in place; the top-level
    fields in `settled` are taken as they are."""
    walker = Walker(custom=custom, settled=settled)
    walker.walk(obj, schema, "")
    return walker.found


def validate_metadata(meta: dict[str, Any], *, name_rule: str = "subdomain") -> list[tuple[str, str, str]]:
    """Name and label checks kube-apiserver applies to every object's metadata."""
    errors: list[tuple[str, str, str]] = []
    name = meta.get("name")
    if name:
        pattern, what, limit = {
            "subdomain": (_DNS_SUBDOMAIN, "a lowercase RFC 1123 subdomain", 253),
            "label": (_DNS_LABEL, "a lowercase RFC 1123 label", 63),
            "dns1035": (_DNS1035_LABEL, "a DNS-1035 label", 63),
        }[name_rule]
        if len(name) > limit:
            errors.append(
                (
                    "metadata.name",
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(name)}: must be no more than {limit} characters",
                )
            )
        elif not pattern.match(name):
            errors.append(
                (
                    "metadata.name",
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(name)}: a {what} must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric character",
                )
            )
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, local = key.rpartition("/")
        if not _QUALIFIED_NAME.match(local) or len(local) > 63 or (prefix and not _DNS_SUBDOMAIN.match(prefix)):
            errors.append(
                (
                    "metadata.labels",
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(key)}: name part must consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                (
                    "metadata.labels",
                    "FieldValueInvalid",
                    f"Invalid value: {_go_repr(value)}: a valid label must be an empty string or consist of "
                    "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character",
                )
            )
    return errors
