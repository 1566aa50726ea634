"""Avro schemas as Arrow types, the way Spark's ``from_avro`` (SchemaConverters.toSqlType) maps them, and the
conversions a fastavro datum needs to become a value of that type.

null -> null, boolean -> bool, int -> int32, long -> int64, float -> float32, double -> float64, bytes ->
binary, string -> string, enum -> string, fixed -> binary, record -> struct (fields in order, all nullable),
array -> list, map -> map<string, V>; a union of null and one type -> that type (nullable); any other union ->
a JSON string of the value (Spark makes a struct of member0..N; fastavro does not say which branch a value took).
Logical types: decimal -> decimal128(precision, scale) (decimal256 past 38 digits), date -> date32,
time-millis -> int32 and time-micros -> int64 (of the day, as Spark: it has no time type in Parquet),
timestamp-millis/-micros -> timestamp[us, UTC], local-timestamp-millis/-micros -> timestamp[us] (Spark's
TimestampNTZ), uuid -> string. A recursive record cannot be a Spark type: it becomes a JSON string.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

#: A conversion of one decoded value (None where the value goes into Arrow as fastavro gives it).
Fix = Optional[Callable[[Any], Any]]

_PRIMITIVES = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
               "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}


def _micros_of_day(t: datetime.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _json_fix(value: Any) -> Any:
    from kstore_cli.cluster.wire_format import jsonable

    return None if value is None else json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False)


_LOGICAL: Dict[str, Tuple[pa.DataType, Fix]] = {
    "date": (pa.date32(), None),
    "time-millis": (pa.int32(), lambda t: None if t is None else _micros_of_day(t) // 1000),
    "time-micros": (pa.int64(), lambda t: None if t is None else _micros_of_day(t)),
    "timestamp-millis": (pa.timestamp("us", tz="UTC"), None),
    "timestamp-micros": (pa.timestamp("us", tz="UTC"), None),
    "local-timestamp-millis": (pa.timestamp("us"), None),
    "local-timestamp-micros": (pa.timestamp("us"), None),
    "uuid": (pa.string(), lambda u: None if u is None else str(u)),
}


class _Recursive(Exception):
    pass


def avro_arrow_type(schema: Any, named: Optional[Dict[str, Any]] = None) -> Tuple[pa.DataType, Fix]:
    """The Arrow type of an Avro schema (its JSON form; `named`: named types of its references, full name ->
    schema) and the conversion its decoded values need."""
    named = dict(named or {})
    try:
        return _convert(schema, named, None, ())
    except _Recursive:
        return pa.string(), _json_fix


def named_types(schema: Any, namespace: Optional[str] = None, out: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Full name -> schema of every named type (record, enum, fixed) defined in `schema`."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            full, namespace = _full_name(schema, namespace)
            out[full] = schema
        for f in schema.get("fields", ()) if kind in ("record", "error") else ():
            named_types(f["type"], namespace, out)
        if kind == "array":
            named_types(schema["items"], namespace, out)
        elif kind == "map":
            named_types(schema["values"], namespace, out)
        elif isinstance(kind, (dict, list)):
            named_types(kind, namespace, out)
    return out


def _full_name(schema: dict, namespace: Optional[str]) -> Tuple[str, Optional[str]]:
    name = schema["name"]
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    namespace = schema.get("namespace", namespace)
    return (f"{namespace}.{name}" if namespace else name), namespace


def _convert(schema: Any, named: Dict[str, Any], namespace: Optional[str], seen: tuple) -> Tuple[pa.DataType, Fix]:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema], None
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        target = named.get(full, named.get(schema))
        if target is None:
            raise ValueError(f"unknown Avro type {schema!r}")
        return _convert(target, named, namespace, seen)
    if isinstance(schema, list):
        return _union(schema, named, namespace, seen)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return (pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)), None
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind in ("record", "error"):
        return _record(schema, named, namespace, seen)
    if kind in ("enum", "fixed"):
        named[_full_name(schema, namespace)[0]] = schema
        return (pa.string() if kind == "enum" else pa.binary()), None
    if kind == "array":
        item, fix = _convert(schema["items"], named, namespace, seen)
        return pa.list_(item), (None if fix is None else lambda v: None if v is None else [fix(x) for x in v])
    if kind == "map":
        item, fix = _convert(schema["values"], named, namespace, seen)
        if fix is None:
            return pa.map_(pa.string(), item), lambda v: None if v is None else list(v.items())
        return pa.map_(pa.string(), item), lambda v: None if v is None else [(k, fix(x)) for k, x in v.items()]
    return _convert(kind, named, namespace, seen)


def _union(branches: list, named: Dict[str, Any], namespace: Optional[str], seen: tuple) -> Tuple[pa.DataType, Fix]:
    others = [b for b in branches if b != "null"]
    if len(others) == 1:
        return _convert(others[0], named, namespace, seen)
    if not others:
        return pa.null(), None
    return pa.string(), _json_fix


def _record(schema: dict, named: Dict[str, Any], namespace: Optional[str], seen: tuple) -> Tuple[pa.DataType, Fix]:
    full, namespace = _full_name(schema, namespace)
    if full in seen:
        raise _Recursive(full)
    named[full] = schema
    fields: List[pa.Field] = []
    fixes: List[Tuple[str, Callable]] = []
    for f in schema["fields"]:
        type_, fix = _convert(f["type"], named, namespace, seen + (full,))
        fields.append(pa.field(f["name"], type_))
        if fix is not None:
            fixes.append((f["name"], fix))
    if not fixes:
        return pa.struct(fields), None

    def fix_record(value: Any) -> Any:
        if value is None:
            return None
        value = dict(value)
        for name, fix in fixes:
            value[name] = fix(value.get(name))
        return value

    return pa.struct(fields), fix_record
