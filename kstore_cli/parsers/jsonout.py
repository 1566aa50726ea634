"""Compact JSON text exactly as Jackson's ``JsonNode.toString()`` writes Kafka's JsonConverter trees.

* objects keep insertion (schema) order; no spaces anywhere;
* strings escape ``"`` and ``\\``, ``\\b \\t \\n \\f \\r`` in short form, other characters below
  U+0020 as ``\\u00XX`` (upper-case hex); everything else, non-ASCII included, is written raw;
* ``bytes`` (Jackson's ``BinaryNode``) become standard base64 with padding;
* floats print as Java's ``Double.toString``; NaN and the infinities as strings (``"NaN"``), as
  Jackson writes them by default.
"""

from __future__ import annotations

import base64
import math
from typing import Any, List

_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_TABLE = {i: _ESCAPES.get(i, "\\u%04X" % i) for i in range(0x20)}
_TABLE[0x22] = _ESCAPES[0x22]
_TABLE[0x5C] = _ESCAPES[0x5C]


def quote(text: str) -> str:
    """A JSON string literal with Jackson's escaping."""
    return '"' + text.translate(_TABLE) + '"'


def java_double(value: float) -> str:
    """``Double.toString(value)`` (JDK 19+ shortest-representation digits)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits, exp = _shortest(abs(value))
    # digits: significant decimal digits; value = 0.digits * 10**exp
    if 1e-3 <= abs(value) < 1e7:
        point = exp
        if point <= 0:
            return sign + "0." + "0" * (-point) + digits
        if point >= len(digits):
            return sign + digits + "0" * (point - len(digits)) + ".0"
        return sign + digits[:point] + "." + digits[point:]
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{exp - 1}"


def _shortest(value: float) -> "tuple[str, int]":
    text = repr(value)
    mant, _, e = text.partition("e")
    exp = int(e) if e else 0
    if "." in mant:
        whole, frac = mant.split(".")
    else:
        whole, frac = mant, ""
    digits = (whole + frac).lstrip("0")
    lead_zeros = len(whole + frac) - len((whole + frac).lstrip("0"))
    exp += len(whole) - lead_zeros
    digits = digits.rstrip("0") or "0"
    return digits, exp


def dumps(node: Any) -> str:
    """Serialize a JSON tree (dict/list/str/int/float/bool/None/bytes)."""
    out: List[str] = []
    _write(node, out)
    return "".join(out)


def _write(node: Any, out: List[str]) -> None:
    if node is None:
        out.append("null")
    elif node is True:
        out.append("true")
    elif node is False:
        out.append("false")
    elif isinstance(node, str):
        out.append(quote(node))
    elif isinstance(node, int):
        out.append(str(node))
    elif isinstance(node, float):
        # Jackson quotes the non-finite ones (JsonWriteFeature.WRITE_NAN_AS_STRINGS, on by default).
        out.append(java_double(node) if math.isfinite(node) else '"' + java_double(node) + '"')
    elif isinstance(node, (bytes, bytearray)):
        out.append('"' + base64.b64encode(bytes(node)).decode("ascii") + '"')
    elif isinstance(node, dict):
        out.append("{")
        first = True
        for key, value in node.items():
            if not first:
                out.append(",")
            first = False
            out.append(quote(key))
            out.append(":")
            _write(value, out)
        out.append("}")
    elif isinstance(node, (list, tuple)):
        out.append("[")
        for i, value in enumerate(node):
            if i:
                out.append(",")
            _write(value, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(node).__name__} as JSON")
