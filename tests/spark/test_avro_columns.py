"""The columnar Avro decoder (kstore_cli.spark.avro_columns, through kstore_cli.spark.avro_fast) gives what the
per-record fastavro path gives, value for value and dead letter for dead letter: random datums of a schema using
every supported type, an evolved reader schema, and payloads cut short or damaged at random."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import random
import struct

import fastavro
import pyarrow as pa
import pytest

from kstore_cli.cluster.schema_registry import SchemaStore, SchemaVersion
from kstore_cli.spark.decoded import Decoding, Side

INNER = {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"},
                                                        {"name": "s", "type": ["null", "string"]}]}
V1 = {"type": "record", "name": "Rec", "namespace": "t", "fields": [
    {"name": "l", "type": "long"}, {"name": "i", "type": "int"}, {"name": "b", "type": "boolean"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"}, {"name": "n", "type": "null"},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "e2", "type": ["null", "E"]},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 3}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "inner", "type": ["null", INNER]},
    {"name": "gone", "type": "string"},
]}
V2 = {"type": "record", "name": "Rec", "namespace": "t",
      "fields": [f for f in V1["fields"] if f["name"] != "gone"] + [
          {"name": "added", "type": "string", "default": "dflt"}, {"name": "n2", "type": ["null", "long"],
                                                                  "default": None}]}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _datum(rng: random.Random) -> dict:
    big = rng.choice([0, 1, -1, 127, -128, 255, 2**40, -(2**40), 2**62, -(2**62), rng.randrange(-10**6, 10**6)])
    return {
        "l": rng.choice([0, -1, 1, 2**63 - 1, -(2**63), rng.randrange(-2**40, 2**40)]),
        "i": rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randrange(-1000, 1000)]), "b": rng.random() < 0.5,
        "f": rng.choice([0.0, -1.5, 3.25]), "d": rng.uniform(-1e9, 1e9),
        "s": rng.choice(["", "a", "\u00e9t\u00e9 \u2603", "x" * 300]), "by": bytes(rng.randrange(256) for _ in range(rng.randrange(4))),
        "n": None, "e": rng.choice("ABC"), "e2": rng.choice([None, "C"]),
        "dec": decimal.Decimal(big).scaleb(-3), "day": datetime.date(2026, 1, 1) + datetime.timedelta(rng.randrange(-9999, 9999)),
        "ts": EPOCH + datetime.timedelta(milliseconds=rng.randrange(-2**40, 2**41)),
        "tu": EPOCH + datetime.timedelta(microseconds=rng.randrange(0, 2**50)),
        "lt": datetime.datetime(2026, 11, 28, 1, 2, 3, 4000), "tm": datetime.time(23, 59, 59, 999000),
        "inner": rng.choice([None, {"x": rng.randrange(-5, 5), "s": rng.choice([None, "q"])}]), "gone": "bye",
    }


def _store() -> SchemaStore:
    store = SchemaStore("_schemas")
    for version, schema in ((1, V1), (2, V2)):
        store.versions[("rec-value", version)] = SchemaVersion("rec-value", version, version, "AVRO",
                                                               json.dumps(schema), [], False, 0, 0)
        store.ids[version] = {"rec-value": version}
    return store


def _payloads(seed: int, n: int = 400) -> list:
    rng = random.Random(seed)
    parsed = {1: fastavro.parse_schema(V1), 2: fastavro.parse_schema(V2)}
    out = []
    for k in range(n):
        sid = rng.choice([1, 2])
        datum = _datum(rng)
        if sid == 2:
            datum = {key: v for key, v in datum.items() if key != "gone"} | {"added": "set", "n2": 5}
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed[sid], datum)
        wire = b"\x00" + struct.pack(">i", sid) + buf.getvalue()
        damage = rng.random()
        if damage < 0.1:
            wire = wire[:rng.randrange(len(wire))]                  # cut short anywhere
        elif damage < 0.15:
            i = rng.randrange(5, len(wire))
            wire = wire[:i] + bytes([rng.randrange(256)]) + wire[i + 1:]  # one byte changed
        elif damage < 0.17:
            wire = None
        out.append(wire)
    return out


@pytest.mark.parametrize("seed", range(24))
def test_columnar_equals_per_record(seed) -> None:
    pytest.importorskip("numpy")
    from kstore_cli.spark.avro_fast import decode_avro_column

    decoding = Decoding(_store(), Side("key", "binary"), Side("value", "avro", V2, {}, json.dumps(V2)))
    side = decoding.sides[1]
    column = pa.array(_payloads(seed), pa.binary())
    fast_failed: dict = {}
    per_record = []
    original = decoding._avro_column
    decoding._avro_column = lambda s, raw, failed: per_record.extend(raw) or original(s, raw, failed)
    fast = decode_avro_column(decoding, side, column, fast_failed)
    del decoding._avro_column
    assert len(per_record) < len(column) // 4  # only the damaged rows (and the ones they hide) go per record
    assert decoding._programs[("value", 1)] is not None and decoding._programs[("value", 2)] is not None
    slow_failed: dict = {}
    slow = decoding.to_array(side, decoding._avro_column(side, column.to_pylist(), slow_failed), slow_failed)
    assert fast_failed == slow_failed
    assert fast.type == slow.type
    good = [i for i in range(len(column)) if i not in slow_failed]
    assert fast.take(pa.array(good)).to_pylist() == slow.take(pa.array(good)).to_pylist()
    assert len(good) > 300 and len(slow_failed) > 10


_LOGICAL = [("date", "int", [-719162, -719163, 2932896, 2932897, 0]),
            ("time-millis", "int", [0, -1, 86_399_999, 86_400_000]),
            ("time-micros", "long", [0, -1, 86_399_999_999, 86_400_000_000]),
            ("timestamp-millis", "long", [-62135596800000, -62135596800001, 253402300799999, 253402300800000,
                                          2**62, -(2**63)]),
            ("local-timestamp-micros", "long", [-62135596800000000, -62135596800000001, 253402300799999999,
                                                253402300800000000])]


@pytest.mark.parametrize("logical,base,values", _LOGICAL, ids=[x[0] for x in _LOGICAL])
def test_logical_values_at_the_edges_of_pythons_dates(logical, base, values) -> None:
    """A date, time or timestamp fastavro cannot make into a Python value (before year 1, after 9999, a time
    past midnight or negative) is decided by the per-record path in both: the same values, the same dead
    letters, never a value the per-record path would not give."""
    pytest.importorskip("numpy")
    from kstore_cli.spark.avro_fast import decode_avro_column

    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": {"type": base, "logicalType": logical}}]}
    store = SchemaStore("_schemas")
    store.versions[("r-value", 1)] = SchemaVersion("r-value", 1, 1, "AVRO", json.dumps(schema), [], False, 0, 0)
    store.ids[1] = {"r-value": 1}
    plain = fastavro.parse_schema({"type": "record", "name": "R", "fields": [{"name": "x", "type": base}]})
    payloads = []
    for value in values:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, plain, {"x": value})
        payloads.append(b"\x00" + struct.pack(">i", 1) + buf.getvalue())
    decoding = Decoding(store, Side("key", "binary"), Side("value", "avro", schema, {}, json.dumps(schema)))
    side = decoding.sides[1]
    column = pa.array(payloads, pa.binary())
    fast_failed: dict = {}
    fast = decode_avro_column(decoding, side, column, fast_failed)
    slow_failed: dict = {}
    slow = decoding.to_array(side, decoding._avro_column(side, column.to_pylist(), slow_failed), slow_failed)
    assert fast_failed == slow_failed and len(slow_failed) >= 1
    good = [i for i in range(len(column)) if i not in slow_failed]
    assert fast.take(pa.array(good)).to_pylist() == slow.take(pa.array(good)).to_pylist()


@pytest.mark.skipif(not __import__("os").environ.get("CI"), reason="only CI promises a C compiler")
def test_ci_reads_with_the_native_twin_unless_told_python() -> None:
    """Both twins are what the suite compares with the per-record path: the native one in the first run, the
    numpy one with KSTORE_DECODER=python."""
    import os

    from kstore_cli.spark.avro_columns import _native_module

    if os.environ.get("KSTORE_DECODER") == "python":
        assert _native_module() is None
    else:
        assert _native_module() is not None, "CI must build kstore_cli.spark._avro_c (pip install -e . with gcc)"
