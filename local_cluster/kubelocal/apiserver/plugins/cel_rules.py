"""CRD validation rules (`x-kubernetes-validations`) evaluated with CEL, as kube-apiserver does after the
schema check: `self` is the value at the rule's place in the schema, `oldSelf` the stored value on an
update (transition rules are skipped on create). A false rule is a 422 naming the field and the rule's
message. CEL itself is cel-python's; added here are the Kubernetes list library's `sum()` and its quantity library
(k8s.io/apiserver/pkg/cel/library/quantity.go: `isQuantity`, `quantity`, and a quantity's `sign`, `isInteger`,
`asInteger`, `asApproximateFloat`, `add`, `sub`, `compareTo`, `isGreaterThan`, `isLessThan`), parsing as
kube-apiserver does (`..quantity`)."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import celpy
from celpy import celtypes

from .. import quantity as quantities
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


class Quantity:
    """A CEL value of Kubernetes' `kubernetes.Quantity` type: its exact value, as kube-apiserver parsed it."""

    def __init__(self, amount: Any) -> None:
        self.amount = amount

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.amount == other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    def __repr__(self) -> str:
        return f"Quantity({self.amount})"


def _text(value: Any) -> str:
    if not isinstance(value, celtypes.StringType):
        raise celpy.CELEvalError(f"no such overload: expected a string, got {type(value).__name__}")
    return str(value)


def _is_quantity(value: Any) -> Any:
    return celtypes.BoolType(quantities.is_quantity(_text(value)))


def _quantity(value: Any) -> Any:
    try:
        return Quantity(quantities.parse(_text(value)))
    except quantities.QuantityError as exc:
        raise celpy.CELEvalError(str(exc)) from None


def _q(value: Any) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, celtypes.IntType) and not isinstance(value, celtypes.BoolType):  # add(int), sub(int)
        return Quantity(quantities.parse(str(int(value))))
    raise celpy.CELEvalError(f"no such overload: expected a quantity, got {type(value).__name__}")


def _as_integer(value: Any) -> Any:
    amount = _q(value).amount
    if amount != amount.to_integral_value() or not -(2**63) <= amount < 2**63:
        raise celpy.CELEvalError("cannot convert value to integer")
    return celtypes.IntType(int(amount))


def _sign(value: Any) -> Any:
    amount = _q(value).amount
    return celtypes.IntType((amount > 0) - (amount < 0))


def _compare(a: Any, b: Any) -> int:
    x, y = _q(a).amount, _q(b).amount
    return int((x > y) - (x < y))


def _errors_as_values(function: Any) -> Any:
    """CEL's errors are values (`false && error` is false): a function returns its error rather than raising it."""
    @functools.wraps(function)
    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except celpy.CELEvalError as exc:
            return exc

    return call


_QUANTITY_FUNCTIONS = {
    "isQuantity": _is_quantity,
    "quantity": _quantity,
    "sign": _sign,
    "isInteger": lambda q: celtypes.BoolType(
        (a := _q(q).amount) == a.to_integral_value() and -(2**63) <= a < 2**63),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_q(q).amount)),
    "add": lambda a, b: Quantity(_q(a).amount + _q(b).amount),
    "sub": lambda a, b: Quantity(_q(a).amount - _q(b).amount),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
}
FUNCTIONS = {"sum": _sum, **{name: _errors_as_values(f) for name, f in _QUANTITY_FUNCTIONS.items()}}


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
