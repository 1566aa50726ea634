"""Confluent's Protobuf message indexes and the JSON Schema validator (kstore_cli.cluster.schema_decoders); the
end-to-end decoding of wire-format values is in tests/cluster/test_wire_format.py and tests/spark/test_decoded.py."""

from __future__ import annotations

import json

import pytest

from kstore_cli.cluster.schema_decoders import (JsonSchemaValidator, ProtobufSchema, Undecodable,
                                                read_message_indexes)
from kstore_cli.cluster.schema_registry import SchemaStore, SchemaVersion
from kstore_cli.parsers.schema_registry import SchemaReference


@pytest.mark.parametrize("data, want", [
    (b"\x00", [0]),                      # the single 0 byte: the first message
    (b"\x02\x02", [1]),                  # count 1 (zigzag 2), index 1 (zigzag 2)
    (b"\x04\x00\x06", [0, 3]),           # a nested message: count 2, indexes 0 and 3
    (b"\x06\x02\x00\xac\x02", [1, 0, 150]),  # a multi-byte varint: zigzag 300 = 150
])
def test_message_indexes(data, want) -> None:
    assert read_message_indexes(data + b"rest", 0) == (want, len(data))


@pytest.mark.parametrize("data, why", [(b"", "cut short"), (b"\x04\x00", "cut short"), (b"\x01", "message indexes")])
def test_bad_message_indexes(data, why) -> None:
    with pytest.raises(Undecodable, match=why):
        read_message_indexes(data, 0)


def _store(*versions: SchemaVersion) -> SchemaStore:
    store = SchemaStore("_schemas")
    for sv in versions:
        store.versions[(sv.subject, sv.version)] = sv
        store.ids.setdefault(sv.id, {})[sv.subject] = sv.version
    return store


def _sv(subject, schema_id, schema_type, text, refs=()) -> SchemaVersion:
    return SchemaVersion(subject, 1, schema_id, schema_type, text, list(refs), False, 0, 0)


def test_json_schema_with_a_reference() -> None:
    address = _sv("address", 1, "JSON", json.dumps({"type": "object", "required": ["city"],
                                                    "properties": {"city": {"type": "string"}}}))
    person = _sv("person", 2, "JSON", json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
        "properties": {"home": {"$ref": "address.json"}}}), [SchemaReference("address.json", "address", 1)])
    validate = JsonSchemaValidator(_store(address, person), person)
    assert validate(b'{"home":{"city":"Oslo"}}') == {"home": {"city": "Oslo"}}
    with pytest.raises(Undecodable, match="at home: 'city' is a required property"):
        validate(b'{"home":{}}')


def test_protobuf_reference_missing_and_bad_text(capfd) -> None:
    main = _sv("m", 3, "PROTOBUF", 'syntax = "proto3";\nimport "x.proto";\nmessage M { X x = 1; }\n',
               [SchemaReference("x.proto", "x", 1)])
    with pytest.raises(Undecodable, match="references x version 1, which is not in the store"):
        ProtobufSchema(_store(main), main)
    bad = _sv("b", 4, "PROTOBUF", "syntax = \"proto3\";\nmessage {")
    with pytest.raises(Undecodable, match="protoc cannot build its descriptors") as caught:
        ProtobufSchema(_store(bad), bad)
    # protoc's own reason is in the one message (its temporary directory left out), not on stderr beside it
    assert "kstore_schema_4.proto:2:" in str(caught.value) and "kstore-proto-" not in str(caught.value)
    assert capfd.readouterr().err == ""
