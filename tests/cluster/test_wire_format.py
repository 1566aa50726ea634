"""Keys and values in Confluent's wire format decoded with the schemas of fixtures/schema-registry, in the core
and through dump-segment --json and find --json (values serialized by KafkaAvroSerializer's rules: a zero byte,
the schema id big-endian, the Avro binary encoding of the datum with the writer schema)."""

from __future__ import annotations

import base64
import io
import json
import shutil
import struct
import sys
from pathlib import Path

import fastavro
import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli, main
from kstore_cli.cluster.schema_registry import load_schema_store
from kstore_cli.cluster.wire_format import FORMATS, WireFormatDecoder, jsonable
from kstore_cli.commands._options import RECORD_FORMATS
from kstore_cli.parsers.decoded import RAW
from tests.cluster import schema_registry_data as data
from tests.cluster.test_schema_registry import REGISTRY, write_partition

_register_commands()


def serialize(schema_id: int, schema: dict, datum, named=None) -> bytes:
    """KafkaAvroSerializer's bytes for `datum` written with `schema` registered under `schema_id`."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas={} if named is None else named), datum)
    return b"\x00" + struct.pack(">i", schema_id) + out.getvalue()


def _customer_named() -> dict:
    named: dict = {}
    fastavro.parse_schema(data.CUSTOMER, named_schemas=named)
    return named


V1 = serialize(1, data.ORDER_V1, {"id": 7, "amount": 2.5})
V2 = serialize(2, data.ORDER_V2, {"id": 8, "amount": 3.25, "note": "rush"})
SHIPMENT = serialize(4, data.SHIPMENT, {"to": {"name": "Zo\u00eb"}, "weight": 12}, _customer_named())
EVENT = b"\x00" + struct.pack(">i", 5) + b'{"kind":"click"}'
PING = b"\x00" + struct.pack(">i", 6) + b"\x00" + b"\x08\x01"  # message indexes [0] as one 0 byte, Ping{at: 1}
UNKNOWN = b"\x00" + struct.pack(">i", 99) + V1[5:]
WRONG_MAGIC = b"\x01" + V1[1:]
TRUNCATED = V2[:9]

#: (key, value) of the data topic, offset 0 first; and what --value-format auto makes of each value.
RECORDS = [(b"k0", V1), (b"k1", V2), (b"k2", SHIPMENT), (b"k3", EVENT), (b"k4", PING), (b"k5", UNKNOWN),
           (b"k6", WRONG_MAGIC), (b"k7", TRUNCATED), (b"k8", None), (b"k9", b'{"plain":true}')]
AUTO = [
    ({"id": 7, "amount": 2.5, "note": "\u00e9t\u00e9"}, None),  # v1 data read with the latest version (v2)
    ({"id": 8, "amount": 3.25, "note": "rush"}, None),
    ({"to": {"name": "Zo\u00eb"}, "weight": 12}, None),          # through the reference
    ({"kind": "click"}, None),                                    # JSON Schema: the payload's JSON
    ({"at": "1"}, None),                                          # Protobuf, proto3 JSON (int64 as a string)
    (RAW, "schema id 99 is not in the schema registry's store"),
    (RAW, None),                                                  # not the wire format, not UTF-8: bytes
    (RAW, "the Avro payload of schema id 2 is cut short"),
    (None, None),
    ({"plain": True}, None),
]


@pytest.fixture(scope="module")
def store():
    return load_schema_store([str(REGISTRY)])


def test_formats_are_one_list() -> None:
    assert FORMATS == RECORD_FORMATS


def test_auto(store) -> None:
    decoder = WireFormatDecoder(store, "string", "auto")
    for (key, value), (want, why) in zip(RECORDS, AUTO):
        got = decoder.decode_json(0, key, value)
        assert got.key == key.decode() and got.value == want, (value, got)
        assert (why is None and got.error is None) or (why is not None and why in got.error), got.error
    assert decoder.undecodable == 2  # the unknown id and the truncated payload


def test_avro_names_a_wrong_magic_byte(store) -> None:
    decoder = WireFormatDecoder(store, "binary", "avro")
    got = decoder.decode_json(0, b"k", WRONG_MAGIC)
    assert got.value is RAW and got.key is RAW and got.error == (
        "value: magic byte 0x01, not the wire format's 0x00 (Unknown magic byte!)")
    assert "5-byte header" in decoder.decode_json(0, None, b"\x00\x00").error
    assert "JSON schema, not AVRO" in decoder.decode_json(0, None, EVENT).error
    assert decoder.decode_json(0, None, V2).value == {"id": 8, "amount": 3.25, "note": "rush"}


def test_json_and_string_formats(store) -> None:
    decoder = WireFormatDecoder(None, "json", "string")
    got = decoder.decode_json(0, b'{"a":[1]}', "\u00e9".encode())
    assert (got.key, got.value, got.error) == ({"a": [1]}, "\u00e9", None)
    got = decoder.decode_json(0, b"nope", b"\xff")
    assert got.error.startswith("key: not JSON text") and "value: not UTF-8 (byte 0)" in got.error


def test_jsonable() -> None:
    import datetime
    import decimal
    assert jsonable({"b": b"\x00\x01", "d": decimal.Decimal("1.20"), "t": datetime.date(2026, 11, 28)}) == {
        "b": "AAE=", "d": "1.20", "t": "2026-11-28"}


@pytest.fixture
def data_dir(tmp_path) -> Path:
    shutil.copytree(REGISTRY, tmp_path / "d")
    write_partition(tmp_path / "d" / "orders-0", RECORDS)
    return tmp_path / "d"


def test_dump_segment_json(data_dir, capsys) -> None:
    log = data_dir / "orders-0" / "00000000000000000000.log"
    with pytest.raises(SystemExit) as exit_info:
        main(["dump-segment", "--json", "--key-format", "string", "--value-format", "auto", str(log)])
    assert exit_info.value.code == 1  # two values not decoded
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines() if '"type":"record"' in line]
    assert len(records) == len(RECORDS)  # none dropped
    for rec, (key, value), (want, why) in zip(records, RECORDS, AUTO):
        assert rec["decoder"] == "key=string,value=auto" and rec["key"] == key.decode()
        assert rec["value"] == (base64.b64encode(value).decode() if want is RAW else want)
        assert (why is None) == ("decodeError" not in rec) and (why is None or why in rec["decodeError"])
    assert "kstore: 2 records with a key or value not decoded" in err


def test_find_json(data_dir) -> None:
    res = CliRunner().invoke(cli, ["find", "--json", "--offset", "0", "--count", "3", "--value-format", "avro",
                                   str(data_dir / "orders-0")])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["value"] for r in lines[:3]] == [AUTO[0][0], AUTO[1][0], AUTO[2][0]]
    assert lines[-1]["undecodable"] == 0
    res = CliRunner().invoke(cli, ["find", "--json", "--offset", "5", "--value-format", "avro",
                                   "--schemas-from", str(data_dir / "_schemas-0"), str(data_dir / "orders-0")])
    assert res.exit_code == 1
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[0]["value"] == base64.b64encode(UNKNOWN).decode()
    assert lines[0]["decodeError"] == "value: schema id 99 is not in the schema registry's store"
    assert lines[-1]["undecodable"] == 1


def test_formats_need_json(data_dir) -> None:
    log = data_dir / "orders-0" / "00000000000000000000.log"
    res = CliRunner().invoke(cli, ["dump-segment", "--value-format", "auto", str(log)])
    assert res.exit_code == 2 and "go with --json" in res.output
    res = CliRunner().invoke(cli, ["dump-segment", "--json", "--value-format", "auto", "--offsets-decoder", str(log)])
    assert res.exit_code == 2 and "do not go together" in res.output
    res = CliRunner().invoke(cli, ["find", "--offset", "0", "--value-format", "auto", str(data_dir / "orders-0")])
    assert res.exit_code == 2


def test_without_fastavro_one_line_exit_3(data_dir, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "fastavro", None)  # import fastavro raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["find", "--json", "--offset", "0", "--value-format", "auto", str(data_dir / "orders-0")])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 3 and out == ""
    assert err == "kstore: error: decoding Avro needs fastavro: pip install 'kstore-cli[schemas]'\n"
    assert WireFormatDecoder(None, "string", "json").decode_json(0, b"a", b"1").value == 1  # no Avro: no need
