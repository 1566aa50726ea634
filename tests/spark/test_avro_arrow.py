"""Avro schemas as Arrow types (kstore_cli.spark.avro_arrow): Spark's from_avro mapping, logical types, unions,
references, and the values fastavro decodes made into those types."""

from __future__ import annotations

import datetime
import decimal
import io
import uuid

import fastavro
import pyarrow as pa

from kstore_cli.spark.avro_arrow import avro_arrow_type, named_types

SCHEMA = {"type": "record", "name": "R", "namespace": "t", "fields": [
    {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}},
    {"name": "opt", "type": ["null", "long"]},
    {"name": "u", "type": ["null", "long", "string"]},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "m", "type": {"type": "map", "values": "E"}},
    {"name": "c", "type": "t.Child"},
]}
CHILD = {"type": "record", "name": "Child", "namespace": "t", "fields": [{"name": "x", "type": "int"}]}


def test_types_and_values() -> None:
    type_, fix = avro_arrow_type(SCHEMA, named_types(CHILD))
    assert type_ == pa.struct([
        ("d", pa.decimal128(9, 2)), ("day", pa.date32()), ("tm", pa.int32()), ("tu", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")), ("lts", pa.timestamp("us")), ("id", pa.string()), ("e", pa.string()),
        ("f", pa.binary()), ("opt", pa.int64()), ("u", pa.string()), ("tags", pa.list_(pa.string())),
        ("m", pa.map_(pa.string(), pa.string())), ("c", pa.struct([("x", pa.int32())]))])
    named: dict = {}
    fastavro.parse_schema(CHILD, named_schemas=named)
    parsed = fastavro.parse_schema(SCHEMA, named_schemas=named)
    when = datetime.datetime(2026, 11, 28, 12, 0, 1, 500000, tzinfo=datetime.timezone.utc)
    datum = {"d": decimal.Decimal("12.34"), "day": datetime.date(2026, 11, 28), "tm": datetime.time(0, 0, 1, 5000),
             "tu": datetime.time(0, 0, 1, 7), "ts": when, "lts": datetime.datetime(2026, 1, 2, 3, 4, 5),
             "id": uuid.UUID(int=1), "e": "B", "f": b"ab", "opt": None, "u": "x", "tags": ["a"], "m": {"k": "A"},
             "c": {"x": 3}}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    out.seek(0)
    got = pa.array([fix(fastavro.schemaless_reader(out, parsed, None))], type_).to_pylist()[0]
    assert got["tm"] == 1005 and got["tu"] == 1_000_007 and got["ts"] == when and got["u"] == '"x"'
    assert got["id"] == "00000000-0000-0000-0000-000000000001" and got["m"] == [("k", "A")] and got["c"] == {"x": 3}
    assert got["d"] == decimal.Decimal("12.34") and got["day"] == datetime.date(2026, 11, 28)


def test_recursive_record_is_a_json_string() -> None:
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    type_, fix = avro_arrow_type(node)
    assert type_ == pa.string() and fix({"next": None}) == '{"next":null}'
