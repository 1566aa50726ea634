"""The schema reader and JSON writer on hand-built bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.parsers import jsonout
from kstore_cli.parsers.schema import F, Message, read_message, to_json
from kstore_cli.parsers.wire import JavaError, WireReader, encode_unsigned_varint

MSG = Message("TestRecord", "0-2", "1+", [
    F("Id", "int32"),
    F("Name", "string", nullable="1+"),
    F("Blob", "bytes", "1+"),
    F("Items", "[]Item", fields=[F("Key", "string"), F("Tags", "[]int16")]),
    F("Extra", "int64", "1+", tagged="1+", tag=0, default=-1),
    F("Note", "string", "2+", tagged="2+", tag=1, nullable="2+", default="null"),
    F("Old", "int8", "0"),
])


def uv(n: int) -> bytes:
    return encode_unsigned_varint(n)


def test_non_flexible_version() -> None:
    data = (struct.pack(">i", 7) + struct.pack(">h", 2) + b"ab"
            + struct.pack(">i", 1) + struct.pack(">h", 1) + b"k" + struct.pack(">i", 2) + struct.pack(">hh", 3, -4)
            + b"\x05")
    values = read_message(MSG, data, 0)
    assert jsonout.dumps(to_json(MSG, values, 0)) == \
        '{"id":7,"name":"ab","items":[{"key":"k","tags":[3,-4]}],"old":5}'


def test_flexible_with_tagged_fields_and_nulls() -> None:
    item = uv(2) + b"k" + uv(1) + uv(0)  # key "k", tags [], no tagged fields
    data = (struct.pack(">i", 1) + uv(0)       # name null (nullable in v1)
            + uv(3) + b"\x00\xff"              # blob of 2 bytes
            + uv(2) + item                      # one item
            + uv(2)                             # two tagged fields
            + uv(0) + uv(8) + struct.pack(">q", 99)
            + uv(1) + uv(3) + uv(3) + b"hi")
    values = read_message(MSG, data, 2)
    assert jsonout.dumps(to_json(MSG, values, 2)) == \
        '{"id":1,"name":null,"blob":"AP8=","items":[{"key":"k","tags":[]}],"extra":99,"note":"hi"}'


def test_tagged_field_at_default_is_omitted_and_unknown_tags_skipped() -> None:
    data = struct.pack(">i", 1) + uv(1) + uv(1) + uv(1) + uv(1) + uv(9) + uv(2) + b"zz"
    values = read_message(MSG, data, 1)
    assert values["Extra"] == -1
    assert jsonout.dumps(to_json(MSG, values, 1)) == '{"id":1,"name":"","blob":"","items":[]}'


@pytest.mark.parametrize("data,version,message", [
    (struct.pack(">i", 1) + struct.pack(">h", -1), 0, "non-nullable field name was serialized as null"),
    (struct.pack(">i", 1) + uv(1) + uv(0), 1, "non-nullable field blob was serialized as null"),
    (struct.pack(">i", 1) + struct.pack(">h", 5) + b"ab", 0, "Error reading byte array of 5 byte(s): only 2 byte(s) available"),
    (struct.pack(">i", 1) + struct.pack(">h", 0) + struct.pack(">i", 1000), 0,
     "Tried to allocate a collection of size 1000, but there are only 0 bytes remaining."),
    (struct.pack(">i", 1) + struct.pack(">h", 0) + struct.pack(">i", 1) + struct.pack(">h", -1), 0,
     "non-nullable field key was serialized as null"),
    (b"\x00\x00", 0, None),
])
def test_read_errors_carry_kafkas_messages(data: bytes, version: int, message) -> None:
    with pytest.raises(JavaError) as info:
        read_message(MSG, data, version)
    assert info.value.message == message


def test_a_version_outside_valid_versions_is_written_like_jsonconverter() -> None:
    # Kafka's generated XJsonConverter.write has no version check for a top-level message (its
    # VersionConditional compares validVersions with themselves): dump-log prints such records.
    data = struct.pack(">i", 1) + uv(1) + uv(1) + uv(1) + uv(0)
    values = read_message(MSG, data, 3)  # the generated reader does not check the version either
    assert to_json(MSG, values, 3) == to_json(MSG, values, 2)


def test_uuid_is_url_safe_base64_without_padding() -> None:
    msg = Message("U", "0", "none", [F("Id", "uuid")])
    raw = bytes.fromhex("fbff3e3f" + "00" * 12)
    assert to_json(msg, read_message(msg, raw, 0), 0) == {"id": "-_8-PwAAAAAAAAAAAAAAAA"}


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_unsigned_varint_round_trip(n: int) -> None:
    r = WireReader(encode_unsigned_varint(n) + b"x")
    assert r.unsigned_varint() == n
    assert r.remaining() == 1


def test_varint_with_high_bit_in_fifth_byte_is_an_error() -> None:
    with pytest.raises(JavaError, match="Varint is too long"):
        WireReader(b"\xff\xff\xff\xff\xff").unsigned_varint()


@given(st.text())
def test_jackson_strings_are_valid_json(text: str) -> None:
    import json

    assert json.loads(jsonout.quote(text.replace("\ud800", ""))) == text.replace("\ud800", "")


def test_jackson_escaping() -> None:
    assert jsonout.quote('a"b\\c\n\t\r\b\f\x01\x1f\x7f/é') == '"a\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001F\x7f/é"'


@pytest.mark.parametrize("value,text", [
    (1.0, "1.0"), (100.0, "100.0"), (0.001, "0.001"), (1e-4, "1.0E-4"), (1e7, "1.0E7"),
    (1234567.5, "1234567.5"), (-2.5e-10, "-2.5E-10"), (0.0, "0.0"), (-0.0, "-0.0"), (0.1, "0.1"),
])
def test_java_double_to_string(value: float, text: str) -> None:
    assert jsonout.java_double(value) == text
