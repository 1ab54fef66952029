"""YAML read as kubectl reads it, and written so that kubectl reads back what was meant.

kubectl turns a manifest into JSON with sigs.k8s.io/yaml, which reads YAML with its fork of go-yaml v2
(`goyaml.v2/resolve.go`), and the API server reads that JSON's numbers as int64 when they are integers that
fit, else as float64. PyYAML reads the same text differently in places that matter to a manifest, so `tfjob
render` and `tfjob local` read it this way instead (and the fuzz tier's oracle does too):

- `!!binary` is base64 decoded (Go's standard alphabet, padded, line breaks ignored) and the bytes become a
  string, each byte that is not UTF-8 a U+FFFD (Go's JSON encoder does that): `name: !!binary bW5pc3Q=` is
  `mnist`, as `kubectl apply` sends it. Invalid base64 is an error, as in kubectl.
- Plain scalars resolve as go-yaml v2 resolves them: `y`/`n` and `on`/`off` are booleans; `0o17`, `017`,
  `0x1F`, `0b11`, `1_000` integers; `1e3` and `08` numbers; `1:30` a string (no base-60); timestamps stay the
  strings they are; an integer too big for int64 is a float (the API server's reading of it).
- Numbers reach the server as JSON: an integral float (`1e3`, `1.0`) is the integer it equals; `.inf` and
  `.nan` are errors (JSON has neither).
- Tags other than the standard ones (`!foo bar`) are dropped, the value kept; `!!set` is a mapping of nulls;
  explicit `!!int`, `!!float`, `!!bool`, `!!null`, `!!timestamp` must fit their value, as in go-yaml.
- Mapping keys become strings as sigs.k8s.io/yaml makes them (`1` → "1", `yes` → "true"); a null key is an
  error.

`tests/unit/test_kubeyaml.py` checks each of these against the real kubectl (`kubectl label --local -o json`).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from datetime import date
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

_YAML = "tag:yaml.org,2002:"
_PLAIN = "tag:tfjob.dev,2026:plain"  # an untagged plain scalar, resolved as go-yaml resolves it

_HINTS = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M"),
          ".": "."}
_NAN, _INF = math.nan, math.inf
_KNOWN: dict[str, tuple[str, Any]] = {
    **{s: ("bool", True) for s in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")},
    **{s: ("bool", False) for s in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")},
    **{s: ("null", None) for s in ("", "~", "null", "Null", "NULL")},
    **{s: ("float", _NAN) for s in (".nan", ".NaN", ".NAN")},
    **{s: ("float", _INF) for s in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{s: ("float", -_INF) for s in ("-.inf", "-.Inf", "-.INF")},
}
_YAML_STYLE_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_DOT_FLOAT = re.compile(r"^\.[0-9]+([eE][-+]?[0-9]+)?$")  # what Go's ParseFloat takes of a string starting with "."
_TIMESTAMP = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:(?:[Tt]|( ))(\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d+)?"
                        r"(Z|[+-]\d{2}:\d{2})?)?$")
_INT64 = (-(2**63), 2**63)
_UINT64 = 2**64
_RESOLVABLE = ("", "str", "bool", "int", "float", "null", "timestamp")


def _go_parse_uint(s: str, base: int = 0) -> int | None:
    """Go's strconv.ParseUint(s, base, 64): base 0 reads a 0x/0o/0b/0 prefix; no sign; None if invalid."""
    if not s:
        return None
    if base == 0:
        base = 10
        if s[0] == "0":
            prefix = s[1:2].lower()
            if len(s) >= 3 and prefix in ("b", "o", "x"):
                base, s = {"b": 2, "o": 8, "x": 16}[prefix], s[2:]
            else:
                base, s = 8, s[1:]
    digits = "0123456789abcdef"[:base]
    if any(c not in digits for c in s.lower()):
        return None
    value = int(s, base) if s else 0
    return value if value < _UINT64 else None


def _go_parse_int(s: str, base: int = 0) -> int | None:
    """Go's strconv.ParseInt(s, base, 64): an optional sign, then ParseUint; None if invalid or out of range."""
    sign = -1 if s[:1] == "-" else 1
    magnitude = _go_parse_uint(s[1:] if s[:1] in ("+", "-") else s, base)
    if magnitude is None:
        return None
    value = sign * magnitude
    return value if _INT64[0] <= value < _INT64[1] else None


def _go_parse_float(s: str) -> float | None:
    value = float(s)
    return None if math.isinf(value) else value  # Go: ErrRange, so go-yaml leaves it a string


def _is_timestamp(s: str) -> bool:
    match = _TIMESTAMP.match(s)
    if not match:
        return False
    year, month, day = (int(match.group(i)) for i in (1, 2, 3))
    try:
        date(year, month, day)
    except ValueError:
        return False
    if match.group(5) is None:
        return True
    if match.group(4) and match.group(9):  # "2006-1-2 15:4:5" takes no zone
        return False
    return int(match.group(5)) < 24 and int(match.group(6)) < 60 and int(match.group(7)) < 60


def _resolve(tag: str, s: str) -> tuple[str, Any]:
    """go-yaml v2's resolve(): (the tag it resolved to, the value), for a plain scalar or a resolvable tag."""
    hint = "N" if s == "" else _HINTS.get(s[0])
    if hint and tag not in ("str", "binary"):
        if s in _KNOWN:
            return _KNOWN[s]
        if hint == "." and _DOT_FLOAT.match(s) and (value := _go_parse_float(s)) is not None:
            return "float", value
        if hint in ("D", "S"):
            if tag in ("", "timestamp") and _is_timestamp(s):
                return "timestamp", s  # decoded into interface{}, a timestamp is kept as the string it was
            plain = s.replace("_", "")
            if (integer := _go_parse_int(plain)) is not None or (integer := _go_parse_uint(plain)) is not None:
                return "int", integer
            if _YAML_STYLE_FLOAT.match(plain) and (value := _go_parse_float(plain)) is not None:
                return "float", value
            if plain.startswith("0b"):
                if (integer := _go_parse_int(plain[2:], 2)) is not None or (
                        integer := _go_parse_uint(plain[2:], 2)) is not None:
                    return "int", integer
            elif plain.startswith("-0b") and (integer := _go_parse_int("-" + plain[3:], 2)) is not None:
                return "int", integer
    return "str", s


def resolve_scalar(tag: str, s: str) -> Any:
    """The value go-yaml gives an (untagged: tag "") scalar, as the API server reads it after kubectl's JSON.
    Raises ValueError where kubectl fails."""
    rtag, value = _resolve(tag, s)
    if tag == "float" and rtag == "int":
        rtag, value = "float", float(value)
    if tag not in ("", rtag, "str"):
        raise ValueError(f"cannot decode !!{rtag} `{s}` as a !!{tag}")
    return _json_number(value) if rtag in ("int", "float") else value


def _json_number(value: int | float) -> int | float:
    """A number as the API server reads kubectl's JSON: int64 if it is an integer that fits, else float64."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{value} is not a number JSON can carry (kubectl cannot send it)")
        # Go writes floats below 1e21 without an exponent, so an integral one reads back as an integer.
        if value.is_integer() and abs(value) < 1e21 and _INT64[0] <= int(value) < _INT64[1]:
            return int(value)
        return value
    return value if _INT64[0] <= value < _INT64[1] else float(value)


def _go_float32_key(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), as sigs.k8s.io/yaml spells a float mapping key."""
    import numpy as np

    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = np.format_float_scientific(np.float32(value), unique=True, trim="-", exp_digits=2)
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if exp < -4 or exp >= 6:  # shortest 'g': %e outside [1e-4, 1e6)
        return f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return np.format_float_positional(np.float32(value), unique=True, trim="-")


def _go_bytes_to_text(data: bytes) -> str:
    """Bytes as Go's JSON encoder writes a string: each byte that is not part of valid UTF-8 becomes U+FFFD."""
    out, i = [], 0
    while i < len(data):
        try:
            out.append(data[i:].decode("utf-8"))
            break
        except UnicodeDecodeError as exc:
            out.append(data[i:i + exc.start].decode("utf-8"))
            out.append("\ufffd" * (exc.end - exc.start))
            i += exc.end
    return "".join(out)


class KubectlLoader(yaml.SafeLoader):
    """PyYAML's safe loader with go-yaml v2's scalars, tags and keys (module docstring)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0]:
            return _YAML + "merge" if value == "<<" else _PLAIN
        return super().resolve(kind, value, implicit)

    def _fail(self, node: Any, problem: str) -> ConstructorError:
        return ConstructorError(None, None, problem, node.start_mark)

    def construct_go_scalar(self, node: Any) -> Any:
        if not isinstance(node, ScalarNode):
            return self.construct_untagged(node)
        tag = "" if node.tag == _PLAIN else node.tag.removeprefix(_YAML)
        if tag not in _RESOLVABLE:
            return str(node.value)  # go-yaml keeps the text of a scalar whose tag it does not resolve
        try:
            return resolve_scalar(tag, node.value)
        except ValueError as exc:
            raise self._fail(node, f"{node.value}: {exc}") from None

    def construct_go_binary(self, node: Any) -> Any:
        if not isinstance(node, ScalarNode):
            return self.construct_untagged(node)
        text = str(node.value).replace("\n", "").replace("\r", "")  # Go's base64 decoder skips line breaks only
        try:
            return _go_bytes_to_text(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            raise self._fail(node, "!!binary value contains invalid base64 data") from None

    def construct_go_mapping(self, node: Any) -> Any:
        data: dict[str, Any] = {}
        yield data
        if not isinstance(node, MappingNode):
            raise self._fail(node, f"expected a mapping, found {node.id}")
        self.flatten_mapping(node)
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise self._fail(key_node, "invalid map key: a mapping key must be a scalar")
            data[self._key(key_node)] = self.construct_object(value_node, deep=True)

    def _mapping_now(self, node: Any) -> dict[str, Any]:
        generator = self.construct_go_mapping(node)
        data = next(generator)
        for _ in generator:
            pass
        return dict(data)

    def _key(self, node: Any) -> str:
        """A mapping key as sigs.k8s.io/yaml writes it into JSON: from go-yaml's value, not the JSON number."""
        tag = "" if node.tag == _PLAIN else node.tag.removeprefix(_YAML)
        if tag not in _RESOLVABLE:
            return str(self.construct_object(node, deep=True))
        try:
            resolve_scalar(tag, node.value) if tag else None  # an explicit tag must fit, as for values
        except ValueError as exc:
            if "JSON" not in str(exc):
                raise self._fail(node, f"{node.value}: {exc}") from None
        rtag, key = _resolve(tag, node.value)
        if tag == "float" and rtag == "int":
            rtag, key = "float", float(key)
        if rtag == "bool":
            return "true" if key else "false"
        if rtag == "int" and _INT64[0] <= key < _INT64[1]:
            return str(key)
        if rtag == "float":
            return _go_float32_key(key)
        if rtag in ("str", "timestamp"):
            return str(key)
        what = "uint64" if rtag == "int" else "<nil>"
        raise self._fail(node, f"unsupported map key of type: {what}, key: {node.value!r}")

    def construct_untagged(self, node: Any) -> Any:
        """A node with a tag go-yaml does not know: its value as if it had none."""
        if isinstance(node, ScalarNode):
            return str(node.value)
        if isinstance(node, SequenceNode):
            return self.construct_sequence(node, deep=True)
        return self._mapping_now(node)


for _tag in ("bool", "int", "float", "null", "timestamp"):
    KubectlLoader.add_constructor(_YAML + _tag, KubectlLoader.construct_go_scalar)
KubectlLoader.add_constructor(_PLAIN, KubectlLoader.construct_go_scalar)
KubectlLoader.add_constructor(_YAML + "binary", KubectlLoader.construct_go_binary)
KubectlLoader.add_constructor(_YAML + "map", KubectlLoader.construct_go_mapping)
KubectlLoader.add_constructor(_YAML + "set", KubectlLoader.construct_go_mapping)
KubectlLoader.add_constructor(_YAML + "omap", KubectlLoader.construct_untagged)
KubectlLoader.add_constructor(_YAML + "pairs", KubectlLoader.construct_untagged)
KubectlLoader.add_constructor(None, KubectlLoader.construct_untagged)


def load_all(text: str) -> list[Any]:
    """The documents of `text` as kubectl sends them (empty documents included, as None)."""
    return list(yaml.load_all(text, Loader=KubectlLoader))  # a SafeLoader


def plain_is_string(text: str) -> bool:
    """Whether kubectl reads `text`, written plain (unquoted), as this very string."""
    try:
        return _resolve("", text) == ("str", text) and text != "<<"
    except ValueError:
        return False


_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class KubectlDumper(_Dumper):  # type: ignore[misc,valid-type]
    """PyYAML's safe dumper (libyaml's when present) that quotes every string kubectl would read as something
    else (`y`, `0o17`, `1e3`), and writes multi-line strings (scripts in a ConfigMap) as literal blocks."""


def _represent_str(dumper: Any, value: str) -> Any:
    if "\n" in value and not any(line != line.rstrip() for line in value.split("\n")):
        return dumper.represent_scalar(_YAML + "str", value, style="|")
    if not plain_is_string(value):
        return dumper.represent_scalar(_YAML + "str", value, style='"')
    return dumper.represent_str(value)


KubectlDumper.add_representer(str, _represent_str)


def dump_all(documents: list[Any]) -> str:
    return str(yaml.dump_all(documents, Dumper=KubectlDumper, sort_keys=False, width=110))
