"""The columns of a table spark-export writes (``--format delta|iceberg``) and how they evolve between runs.

A table's columns are the export's Arrow schema (kstore_cli.spark.columns.arrow_schema with the key and value
columns of their decoded types: kstore_cli.spark.decoded.Decoding.schema), the one the Parquet export writes.
When the reader schema of a later run differs (an evolved Avro subject: its latest version is the default
reader schema), the difference is checked before anything is read or written:

- a field the new schema adds (top-level or inside a struct, a list's items, a map's values) becomes a column of
  the table, nullable (Delta and Iceberg add columns as nullable: rows already in the table read back null,
  the Avro default is not back-filled into their files); an Avro field it adds with no ``default`` is refused
  (records written before it do not resolve against it: Avro's schema resolution, and a table column can not
  be required for rows that lack it);
- a type that changes is refused, but for Iceberg's promotions (int to long, float to double, a decimal's
  precision widened at the same scale; Iceberg's spec, "Schema Evolution") on an Iceberg table; a Delta table
  takes no type change here (delta-rs has no type widening);
- a column the table has and the new schema does not (an Avro field deleted) is refused: the table would hold
  files without it. Keep the field in the reader schema (``--reader-schema FILE``) or export to a new table.

Types are compared as each format stores them (the new schema is converted through the format's own mapping
first), so that a type the format spells differently (large_string, map entries...) is not taken for a change.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from kstore_cli.errors import UsageError
from kstore_cli.spark.avro_arrow import named_types
from kstore_cli.spark.columns import arrow_schema


def export_schema(request: Any) -> pa.Schema:
    """The Arrow schema the export's files have (topic and partition among the columns)."""
    schema = arrow_schema(request.include_headers, request.include_metadata)
    decoding = getattr(request, "decoding", None)
    return schema if decoding is None else decoding.schema(schema)


class Evolution:
    """What a run changes in the table's columns: the added fields' paths (``value.region``), the top-level
    columns whose type grows (new fields or a promotion) and the promoted fields' paths."""

    def __init__(self) -> None:
        self.added: List[str] = []
        self.promoted: List[str] = []
        self.columns: List[str] = []

    def __bool__(self) -> bool:
        return bool(self.added or self.promoted)

    def to_dict(self) -> Dict[str, List[str]]:
        return {"added": list(self.added), "promoted": list(self.promoted)}

    def text(self, kind: str) -> str:
        """The summary's line on it."""
        said = [f"added {', '.join(self.added)} (nullable: rows already in the table read null)"] if self.added else []
        said += [f"widened {', '.join(self.promoted)}"] if self.promoted else []
        return f"{kind} table's schema evolved: {'; '.join(said)}"


def _promotes(old: pa.DataType, new: pa.DataType) -> bool:
    """An Iceberg type promotion (int -> long, float -> double, decimal(P, S) -> decimal(P', S), P' > P)."""
    if pa.types.is_int32(old) and pa.types.is_int64(new):
        return True
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    return pa.types.is_decimal(old) and pa.types.is_decimal(new) and old.scale == new.scale \
        and old.precision < new.precision


def _narrows(old: pa.DataType, new: pa.DataType) -> bool:
    ranks = ((pa.types.is_int8, 1), (pa.types.is_int16, 2), (pa.types.is_int32, 3), (pa.types.is_int64, 4),
             (pa.types.is_float16, 5), (pa.types.is_float32, 6), (pa.types.is_float64, 7))
    rank = lambda t: next((r for test, r in ranks if test(t)), None)  # noqa: E731
    if rank(old) is not None and rank(new) is not None:
        return rank(new) < rank(old)
    return pa.types.is_decimal(old) and pa.types.is_decimal(new) and new.precision < old.precision


def _children(t: pa.DataType) -> Optional[List[Tuple[str, pa.DataType]]]:
    """A nested type's children as (path part, type), in order; None for a leaf type."""
    if pa.types.is_struct(t):
        return [(t.field(i).name, t.field(i).type) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [("{key}", t.key_type), ("{}", t.item_type)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_fixed_size_list(t):
        return [("[]", t.value_type)]
    return None


def _join(path: str, part: str) -> str:
    return f"{path}{part}" if part.startswith(("[", "{")) else f"{path}.{part}"


def _compare(path: str, old: pa.DataType, new: pa.DataType, promotions: bool, out: Evolution,
             refuse: Any) -> None:
    old_children, new_children = _children(old), _children(new)
    if old_children is not None and new_children is not None and \
            pa.types.is_struct(old) == pa.types.is_struct(new) and pa.types.is_map(old) == pa.types.is_map(new):
        news = dict(new_children)
        for part, old_type in old_children:
            if part not in news:
                refuse(f"drops {_join(path, part)}, a column the table has")
            _compare(_join(path, part), old_type, news[part], promotions, out, refuse)
        olds = {part for part, _ in old_children}
        out.added += [_join(path, part) for part, _ in new_children if part not in olds]
        return
    if old == new:
        return
    if promotions and _promotes(old, new):
        out.promoted.append(path)
        return
    refuse(f"{'narrows' if _narrows(old, new) else 'changes'} {path} from {old} to {new}")


def evolution(table: pa.Schema, new: pa.Schema, *, promotions: bool, where: str,
              readers: Optional[Dict[str, Any]] = None) -> Evolution:
    """How `new` (the export's schema, converted as the format stores it) evolves `table` (the table's);
    UsageError (one line naming `where`, the table) for a change the table cannot take. `readers`: the decoded
    Avro columns' reader schemas (column name -> (schema JSON, named types)), whose added fields need a default."""
    kind = "an Iceberg" if promotions else "a Delta"

    def refuse(what: str) -> None:
        raise UsageError(f"{where}: this export's schema {what}: not a schema evolution {kind} table takes "
                         "(columns may be added, nullable); export to a new table, or with the formats and reader "
                         "schema the table was written with (--key-format/--value-format, --reader-schema)")

    out = Evolution()
    olds = {f.name: f.type for f in table}
    for field in table:
        if field.name not in new.names:
            refuse(f"drops {field.name}, a column the table has")
    for field in new:
        if field.name not in olds:
            out.added.append(field.name)
            out.columns.append(field.name)
            continue
        before = len(out.added) + len(out.promoted)
        _compare(field.name, olds[field.name], field.type, promotions, out, refuse)
        if len(out.added) + len(out.promoted) > before:
            out.columns.append(field.name)
    for path in out.added:
        _needs_default(path, readers or {}, refuse)
    return out


def _needs_default(path: str, readers: Dict[str, Any], refuse: Any) -> None:
    """Refuse an added Avro record field without a default (its column's reader schema says)."""
    column = re.split(r"[.\[{]", path, maxsplit=1)[0]
    if column not in readers or path == column:
        return
    schema, named = readers[column]
    field = _avro_field(schema, named, path[len(column):])
    if field is not None and "default" not in field:
        refuse(f"adds {path} with no default (an Avro field records written before it do not resolve against)")


def _avro_field(schema: Any, named: Dict[str, Any], rest: str) -> Optional[dict]:
    """The Avro record field at `rest` (``.a.b``, ``[]``, ``{}``) of `schema`; None where there is none."""
    named = {**named, **named_types(schema)}
    field = None
    for part in re.findall(r"\.[^.\[{]+|\[\]|\{\}", rest):
        schema = _resolve(schema, named)
        if part == "[]" and isinstance(schema, dict) and schema.get("type") == "array":
            schema, field = schema["items"], None
        elif part == "{}" and isinstance(schema, dict) and schema.get("type") == "map":
            schema, field = schema["values"], None
        elif part.startswith(".") and isinstance(schema, dict) and schema.get("type") in ("record", "error"):
            field = next((f for f in schema["fields"] if f["name"] == part[1:]), None)
            if field is None:
                return None
            schema = field["type"]
        else:
            return None
    return field


def _resolve(schema: Any, named: Dict[str, Any]) -> Any:
    """A union of null and one type as that type; a named type's name as its schema."""
    for _ in range(64):
        if isinstance(schema, list):
            others = [b for b in schema if b != "null"]
            if len(others) != 1:
                return schema
            schema = others[0]
        elif isinstance(schema, str) and schema in named:
            schema = named[schema]
        elif isinstance(schema, str):
            schema = next((s for full, s in named.items() if full.rsplit(".", 1)[-1] == schema), schema)
            if isinstance(schema, str):
                return schema
        elif isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            schema = schema["type"]
        else:
            return schema
    return schema


def avro_readers(request: Any) -> Dict[str, Any]:
    """The decoded Avro columns' reader schemas: column name -> (schema JSON, named types)."""
    decoding = getattr(request, "decoding", None)
    if decoding is None:
        return {}
    return {side.name: (side.reader, side.named) for side in decoding.sides if side.kind == "avro"}


def describe(evolved: Evolution) -> str:
    """The evolution as JSON text (a commit's metadata)."""
    return json.dumps(evolved.to_dict(), sort_keys=True)
