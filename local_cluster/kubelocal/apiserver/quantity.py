"""Kubernetes resource quantities as kube-apiserver parses them (k8s.io/apimachinery/pkg/api/resource,
`ParseQuantity`), for CEL's quantity library (`isQuantity`, `quantity`, `sign`, `compareTo` ...).

The Python client's `parse_quantity` is looser (it takes " 1", "1_000", "NaN"); this follows Go's
parseQuantityString character by character: an optional sign, digits with an optional fraction (either may be
empty: "-", "." and "+" are zero), then a suffix that is binary (Ki ... Ei), decimal SI (n u m "" k M G T P E)
or a decimal exponent (e3, E-2). The value is rounded up (away from zero) to a whole nano and capped at
2^63 - 1 in magnitude, as Go's slow path does; the fast path gives the same numbers.
"""

from __future__ import annotations

from decimal import ROUND_UP, Context, Decimal, InvalidOperation, localcontext

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX_CHARS = set("eEinumkKMGTP")
_DIGITS = set("0123456789")
_MAX = Decimal(2**63 - 1)
_NANO = Decimal("1e-9")
_CONTEXT = Context(prec=200)


class QuantityError(ValueError):
    """Not a quantity: Go's ErrFormatWrong, ErrSuffix or ErrNumeric."""


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """Go's parseQuantityString: (positive, value, numerator, denominator, suffix)."""
    positive, pos, end = True, 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] != "-"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, text, text[start:], "", ""
    num = text[start:pos] or "0"
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int]:
    """(base, exponent) of a suffix, as Go's quantitySuffixer.interpret; QuantityError for an unknown one."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        digits = rest[1:] if rest[:1] in "+-" else rest
        if digits and all(c in _DIGITS for c in digits) and -(2**63) <= int(rest) < 2**63:
            exponent = int(rest) & 0xFFFFFFFF  # Go converts it with int32(...)
            return 10, exponent - 2**32 if exponent >= 2**31 else exponent
    raise QuantityError(f"unable to parse quantity's suffix: {suffix!r}")


def parse(text: str) -> Decimal:
    """The quantity's value as kube-apiserver stores it; QuantityError if ParseQuantity refuses it."""
    if not text:
        raise QuantityError("quantities must match the regular expression: ''")
    if text == "0":
        return Decimal(0)
    positive, value, num, denom, suffix = _split(text)
    base, exponent = _interpret(suffix)
    with localcontext(_CONTEXT):
        digits = (value.lstrip("+-") or "0")
        if not any(c in _DIGITS for c in digits):
            # Go's fast path reads num + denom ("0"); its slow path cannot read "." (ErrNumeric). The fast path is
            # taken for decimal suffixes whose scale stays at or above nano, and for binary ones without a fraction.
            fast = (base == 10 and exponent - len(denom) >= -9) or (base == 2 and not denom)
            if not fast:
                raise QuantityError(f"unable to parse quantity's numeric part: {text!r}")
            amount = Decimal(0)
        else:
            try:
                amount = Decimal(f"{num}.{denom or '0'}")
            except InvalidOperation:
                raise QuantityError(f"unable to parse quantity's numeric part: {text!r}") from None
        amount = amount.scaleb(exponent) if base == 10 else amount * (Decimal(2) ** exponent)
        if amount != 0:
            amount = amount.quantize(_NANO, rounding=ROUND_UP)
        amount = min(amount, _MAX)
        return amount if positive else -amount


def is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse(text)
    except QuantityError:
        return False
    return True
