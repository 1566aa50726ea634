"""record/wire.py against Kafka's definitions: ByteUtils' varints and zigzag, DefaultRecordBatch's offsets."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.errors import InvalidRecordError
from kstore_cli.record import wire
from kstore_cli.record.builder import RecordSpec, build_v2_batch

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _kafka_zigzag(n: int, bits: int) -> int:
    """ByteUtils: ``(n << 1) ^ (n >> 31)`` (``>> 63`` for a long), Java ints wrapping, seen unsigned."""
    return ((_signed(n << 1, bits)) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def _kafka_varint_bytes(n: int, bits: int) -> bytes:
    """ByteUtils.writeVarint/writeVarlong: 7 bits a byte, low first, the top bit saying more follow."""
    v = _kafka_zigzag(n, bits)
    out = bytearray()
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


@given(INT32)
def test_zigzag32_is_kafkas(n: int) -> None:
    assert wire.zigzag32(n) == _kafka_zigzag(n, 32)


@given(INT64)
def test_zigzag64_is_kafkas(n: int) -> None:
    assert wire.zigzag64(n) == _kafka_zigzag(n, 64)


@given(INT32, st.binary(max_size=3), st.binary(max_size=3))
def test_varint_round_trip(n: int, before: bytes, after: bytes) -> None:
    out = bytearray(before)
    wire.write_varint(n, out)
    written = bytes(out[len(before):])
    assert written == _kafka_varint_bytes(n, 32)
    assert wire.size_of_varint(n) == len(written)
    buf = bytes(out) + after
    assert wire.read_varint(buf, len(before), len(buf)) == (n, len(before) + len(written))


@given(INT64, st.binary(max_size=3), st.binary(max_size=3))
def test_varlong_round_trip(n: int, before: bytes, after: bytes) -> None:
    out = bytearray(before)
    wire.write_varlong(n, out)
    written = bytes(out[len(before):])
    assert written == _kafka_varint_bytes(n, 64)
    buf = bytes(out) + after
    assert wire.read_varlong(buf, len(before), len(buf)) == (n, len(before) + len(written))


@pytest.mark.parametrize("n, encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    ((1 << 31) - 1, "feffffff0f"), (-(1 << 31), "ffffffff0f"),
])
def test_varint_known_bytes(n: int, encoded: str) -> None:
    out = bytearray()
    wire.write_varint(n, out)
    assert out.hex() == encoded
    assert wire.size_of_varint(n) == len(encoded) // 2


def test_varlong_extremes_take_ten_bytes() -> None:
    for n, encoded in (((1 << 63) - 1, "fe" + "ff" * 8 + "01"), (-(1 << 63), "ff" * 9 + "01")):
        out = bytearray()
        wire.write_varlong(n, out)
        assert out.hex() == encoded
        assert wire.read_varlong(bytes(out), 0, len(out)) == (n, 10)


@given(INT32.filter(lambda n: not -64 <= n <= 63), st.data())
def test_read_varint_on_a_truncated_buffer_is_underflow(n: int, data: st.DataObject) -> None:
    out = bytearray()
    wire.write_varint(n, out)
    cut = data.draw(st.integers(0, len(out) - 1))
    with pytest.raises(wire.Underflow):
        wire.read_varint(bytes(out[:cut]), 0, cut)
    with pytest.raises(wire.Underflow):  # `end` bounds the read, not the buffer's length
        wire.read_varint(bytes(out), 0, cut)
    with pytest.raises(wire.Underflow):
        wire.read_varlong(bytes(out), 0, cut)


def test_a_varint_whose_fifth_byte_continues_is_kafkas_error() -> None:
    buf = b"\xff\xff\xff\xff\xff\x01"
    with pytest.raises(InvalidRecordError) as err:
        wire.read_varint(buf, 0, len(buf))
    # ByteUtils.illegalVarintException: the value read so far, Integer.toHexString.
    assert str(err.value) == ("Varint is too long, the most significant bit in the 5th byte is set, "
                              "converted value: ffffffff")
    # A 5th byte that ends the varint: bits past 31 dropped, as Kafka's int arithmetic drops them.
    assert wire.read_varint(b"\xff\xff\xff\xff\x7f", 0, 5) == (-(1 << 31), 5)
    assert wire.read_varint(b"\xfe\xff\xff\xff\x7f", 0, 5) == ((1 << 31) - 1, 5)


def test_a_varlong_whose_tenth_byte_continues_is_kafkas_error() -> None:
    buf = b"\xff" * 10 + b"\x01"
    with pytest.raises(InvalidRecordError, match="^Varlong is too long, most significant bit in the 10th byte "
                                                 "is set, converted value: "):
        wire.read_varlong(buf, 0, len(buf))
    assert wire.read_varlong(b"\xff" * 9 + b"\x01", 0, 10) == (-(1 << 63), 10)


# ------------------------------------------------------------------ DefaultRecordBatch


KAFKA_OFFSETS = {  # DefaultRecordBatch's constants
    "BASE_OFFSET_OFFSET": 0, "LENGTH_OFFSET": 8, "PARTITION_LEADER_EPOCH_OFFSET": 12, "MAGIC_OFFSET": 16,
    "CRC_OFFSET": 17, "ATTRIBUTES_OFFSET": 21, "LAST_OFFSET_DELTA_OFFSET": 23, "BASE_TIMESTAMP_OFFSET": 27,
    "MAX_TIMESTAMP_OFFSET": 35, "PRODUCER_ID_OFFSET": 43, "PRODUCER_EPOCH_OFFSET": 51,
    "BASE_SEQUENCE_OFFSET": 53, "RECORDS_COUNT_OFFSET": 57, "RECORDS_OFFSET": 61,
}


def test_v2_header_layout_is_kafkas() -> None:
    assert wire.V2_HEADER.size == wire.RECORD_BATCH_OVERHEAD == wire.V2_HEADER_SIZE == 61
    for name, offset in KAFKA_OFFSETS.items():
        assert getattr(wire, name) == offset, name
    assert (wire.LOG_OVERHEAD, wire.HEADER_SIZE_UP_TO_MAGIC) == (12, 17)
    assert (wire.V2_CRC_POS, wire.V2_CRC_START) == (17, 21)


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by bit: independent of kstore's own."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_a_built_batch_unpacks_through_v2_header() -> None:
    records = [RecordSpec(100 + i, 1_700_000_000_000 + 10 * i, f"k{i}".encode(), b"v" * i) for i in range(3)]
    batch = build_v2_batch(records, partition_leader_epoch=7, producer_id=4242, producer_epoch=3,
                           base_sequence=17, is_transactional=True)
    header = wire.V2_HEADER.unpack_from(batch, 0)
    assert header == (
        100,  # base offset
        len(batch) - wire.LOG_OVERHEAD,  # length
        7,  # partition leader epoch
        2,  # magic
        _crc32c(batch[wire.ATTRIBUTES_OFFSET:]),  # CRC-32C from the attributes to the end
        0x10,  # attributes: transactional (bit 4), no codec, create time
        2,  # last offset delta
        1_700_000_000_000,  # base timestamp
        1_700_000_000_020,  # max timestamp
        4242, 3, 17,  # producer id, epoch, base sequence
        3,  # records count
    )
    # Each named offset points at its field (the struct and the constants agree).
    fields = [("BASE_OFFSET_OFFSET", "q"), ("LENGTH_OFFSET", "i"), ("PARTITION_LEADER_EPOCH_OFFSET", "i"),
              ("MAGIC_OFFSET", "b"), ("CRC_OFFSET", "I"), ("ATTRIBUTES_OFFSET", "h"),
              ("LAST_OFFSET_DELTA_OFFSET", "i"), ("BASE_TIMESTAMP_OFFSET", "q"), ("MAX_TIMESTAMP_OFFSET", "q"),
              ("PRODUCER_ID_OFFSET", "q"), ("PRODUCER_EPOCH_OFFSET", "h"), ("BASE_SEQUENCE_OFFSET", "i"),
              ("RECORDS_COUNT_OFFSET", "i")]
    for (name, fmt), value in zip(fields, header):
        assert struct.unpack_from(">" + fmt, batch, getattr(wire, name))[0] == value, name
    # The first record starts at RECORDS_OFFSET: its length varint, then attributes 0 and offset delta 0.
    length, pos = wire.read_varint(batch, wire.RECORDS_OFFSET, len(batch))
    assert batch[pos] == 0
    assert wire.read_varlong(batch, pos + 1, len(batch)) == (0, pos + 2)  # timestamp delta 0
    assert wire.read_varint(batch, pos + 2, len(batch)) == (0, pos + 3)  # offset delta 0
