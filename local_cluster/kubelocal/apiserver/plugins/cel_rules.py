"""CRD validation rules (`x-kubernetes-validations`) evaluated with CEL, as kube-apiserver does after the
schema check: `self` is the value at the rule's place in the schema, `oldSelf` the stored value on an
update (transition rules are skipped on create). A false rule is a 422 naming the field and the rule's
message. CEL itself is cel-python's; the Kubernetes list library's `sum()` is added here."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import celpy
from celpy import celtypes

from ..admission import AdmissionRequest, Operation
from ..errors import invalid

log = logging.getLogger(__name__)
Cause = tuple[str, str, str]
_MISSING = object()


def _sum(values: Any) -> Any:
    """Kubernetes' `lists.sum()` (k8s.io/apiserver/pkg/cel/library/lists.go)."""
    items = list(values)
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


FUNCTIONS = {"sum": _sum}


#: Kubernetes CEL's optional syntax (`self.?field`, `self[?key]`: the optional library, Kubernetes 1.29+), which
#: cel-python's grammar does not parse. Such a rule is valid on a cluster, so its CRD is accepted here too and the
#: rule is not enforced (said once in the server's log), rather than refusing the CRD or every object.
_OPTIONAL_SYNTAX = re.compile(r"\.\?|\[\?")


@functools.lru_cache(maxsize=512)
def _unenforced(rule: str) -> bool:
    """Whether `rule`, which cel-python could not parse, is beyond it rather than wrong (logged once per rule)."""
    if not _OPTIONAL_SYNTAX.search(rule):
        return False
    log.warning("CRD validation rule not enforced by the local API server (CEL optional syntax, which cel-python "
                "does not parse): %s", rule)
    return True


@functools.lru_cache(maxsize=512)
def _program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=FUNCTIONS)


def compile_errors(schema: Mapping[str, Any], path: str) -> list[Cause]:
    """Every rule under `schema` (at `path` in the CRD) that does not compile, as kube-apiserver refuses a CRD
    whose rules do not compile. Compiling here, at the CRD's write, also keeps the compiled programs (and CEL's
    parser, built once, which takes a tenth of a second) out of the first custom object's create."""
    found: list[Cause] = []
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        text = rule.get("rule") if isinstance(rule, Mapping) else None
        if not isinstance(text, str) or not text:
            found.append((f"{path}.x-kubernetes-validations[{i}].rule", "FieldValueRequired", "Required value"))
            continue
        try:
            _program(text)
        except celpy.CELParseError as exc:
            if _unenforced(text):
                continue
            found.append((f"{path}.x-kubernetes-validations[{i}].rule", "FieldValueInvalid",
                          f"Invalid value: {json.dumps(text)}: compilation failed: {exc}"))
    for key, child in (schema.get("properties") or {}).items():
        if isinstance(child, Mapping):
            found += compile_errors(child, f"{path}.properties[{key}]")
    for key in ("items", "additionalProperties"):
        child = schema.get(key)
        if isinstance(child, Mapping):
            found += compile_errors(child, f"{path}.{key}")
    return found


def _holds(rule: str, value: Any, old: Any) -> tuple[bool, str]:
    """(whether the rule holds, the evaluation error if it could not be evaluated). A rule is a pure function of
    self and oldSelf, and the interpreter takes ~12 ms a rule on a TFJob's spec (kube-apiserver's compiled CEL
    takes microseconds): a burst of jobs from one template is judged once per distinct (rule, self, oldSelf)."""
    key = (rule, json.dumps(value, sort_keys=True, default=str),
           None if old is _MISSING else json.dumps(old, sort_keys=True, default=str))
    return _judged(*key) if len(key[1]) + len(key[2] or "") <= _MEMO_MAX_CHARS else _evaluate(rule, value, old)


#: Objects larger than this (serialized) are not remembered.
_MEMO_MAX_CHARS = 65536


@functools.lru_cache(maxsize=2048)
def _judged(rule: str, value_json: str, old_json: str | None) -> tuple[bool, str]:
    return _evaluate(rule, json.loads(value_json), _MISSING if old_json is None else json.loads(old_json))


def _evaluate(rule: str, value: Any, old: Any) -> tuple[bool, str]:
    activation = {"self": celpy.json_to_cel(value)}
    if old is not _MISSING:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = _program(rule).evaluate(activation)
    except celpy.CELParseError as exc:
        if _unenforced(rule):
            return True, ""
        return False, f"compilation failed: {exc}"
    except celpy.CELEvalError as exc:
        return False, f"evaluation error: {exc.args[0] if exc.args else exc}"
    if isinstance(result, celpy.CELEvalError):
        return False, f"evaluation error: {result.args[0] if result.args else result}"
    return bool(result), ""


def violations(schema: Mapping[str, Any], value: Any, old: Any = _MISSING, path: str = "") -> list[Cause]:
    """Every `x-kubernetes-validations` rule under `schema` that `value` breaks (with `old` for updates)."""
    found: list[Cause] = []
    for rule in schema.get("x-kubernetes-validations") or []:
        text = rule.get("rule") or ""
        if "oldSelf" in text and old is _MISSING:
            continue  # a transition rule: only on update
        ok, error = _holds(text, value, old)
        if ok:
            continue
        where = (path + (rule.get("fieldPath") or "")).lstrip(".") or "<nil>"
        message = error or rule.get("message") or f"failed rule: {text}"
        found.append((where, "FieldValueInvalid", f'Invalid value: "{schema.get("type", "object")}": {message}'))
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = props.get(key) or (extra if isinstance(extra, Mapping) else None)
            if sub is None:
                continue
            old_child = old.get(key, _MISSING) if isinstance(old, Mapping) else _MISSING
            step = f"{path}.{key}" if key in props else f"{path}[{key}]"
            found += violations(sub, child, old_child, step)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            found += violations(schema["items"], item, _MISSING, f"{path}[{i}]")
    return found


class CelValidationRules:
    name = "CRDValidationRules"

    def handles(self, request: AdmissionRequest) -> bool:
        return (request.operation in (Operation.CREATE, Operation.UPDATE) and request.rt.is_custom
                and request.subresource is None and request.obj is not None)

    def validate(self, request: AdmissionRequest) -> None:
        assert request.obj is not None
        schema = ((request.rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema") or {}
        found = violations(schema, request.obj, request.old if request.old is not None else _MISSING)
        if found:
            raise invalid(request.rt.kind, request.rt.group, request.name, found)
