"""The hot path: decoding v2 records and legacy message sets into plain tuples.

This module is the one place that walks individual records. It knows nothing
about files, batches objects or commands: it takes a buffer and returns tuples
of numbers and spans, so a native twin can replace it without touching callers.

A v2 record (DefaultRecord)::

    length: varint            bytes after this field
    attributes: int8          unused
    timestampDelta: varlong
    offsetDelta: varint
    keyLength: varint         < 0 means null
    key: bytes
    valueLength: varint       < 0 means null
    value: bytes
    headerCount: varint
    headers: (keyLength: varint, key: utf-8, valueLength: varint, value: bytes) * headerCount

Varints are zigzag-encoded LEB128 (Kafka's ByteUtils).
"""

from __future__ import annotations

import struct
from typing import List, Optional, Tuple

from kstore_cli.errors import InvalidRecordError

#: (offset_delta, timestamp_delta, size_in_bytes, key_pos, key_len, value_pos, value_len, headers)
#: key_len/value_len are -1 for null; headers is a tuple of (key_pos, key_len, value_pos, value_len).
V2Record = Tuple[int, int, int, int, int, int, int, tuple]

BACKEND = "python"


class _Underflow(Exception):
    pass


def read_varint(buf: "bytes | memoryview", pos: int, end: int) -> Tuple[int, int]:
    """A zigzag varint (at most 5 bytes) at pos: (value, next position)."""
    value = 0
    shift = 0
    i = 0
    while True:
        if pos >= end:
            raise _Underflow
        b = buf[pos]
        pos += 1
        if i == 4:
            if b & 0x80:
                raise InvalidRecordError(
                    "Varint is too long, the most significant bit in the 5th byte is set, "
                    f"converted value: {((value | (b << shift)) & 0xFFFFFFFF):x}"
                )
            value |= b << shift
            value &= 0xFFFFFFFF  # bits past 31 are silently dropped, as in Kafka
            break
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        i += 1
    return (value >> 1) ^ -(value & 1), pos


def read_varlong(buf: "bytes | memoryview", pos: int, end: int) -> Tuple[int, int]:
    """A zigzag varlong (at most 10 bytes) at pos: (value, next position)."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise _Underflow
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidRecordError(
                "Varlong is too long, most significant bit in the 10th byte is set, "
                f"converted value: {value & 0xFFFFFFFFFFFFFFFF:x}"
            )
    value &= 0xFFFFFFFFFFFFFFFF
    result = (value >> 1) ^ -(value & 1)
    return result, pos


def size_of_varint(value: int) -> int:
    """Bytes needed for value as a zigzag varint."""
    v = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def decode_v2_records(buf: "bytes | memoryview", pos: int, end: int, count: int) -> List[V2Record]:
    """Decode exactly `count` records from buf[pos:end]; leftover bytes are an error, as in Kafka."""
    records: List[V2Record] = []
    append = records.append
    for _ in range(count):
        if pos >= end:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
        try:
            length, body = read_varint(buf, pos, end)
        except _Underflow:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached") from None
        record_end = body + length
        if length < 0 or record_end > end:
            raise InvalidRecordError(
                f"Invalid record size: expected {length} bytes in record payload, "
                f"but instead the buffer has only {end - body} remaining bytes."
            )
        try:
            p = body + 1  # attributes: unused
            timestamp_delta, p = read_varlong(buf, p, end)
            offset_delta, p = read_varint(buf, p, end)
            key_len, p = read_varint(buf, p, end)
            key_pos = p
            if key_len < 0:
                key_len = -1
            else:
                p += key_len
            value_len, p = read_varint(buf, p, end)
            value_pos = p
            if value_len < 0:
                value_len = -1
            else:
                p += value_len
            header_count, p = read_varint(buf, p, end)
            if header_count < 0:
                raise InvalidRecordError(f"Found invalid number of record headers {header_count}")
            if header_count > end - p:
                raise InvalidRecordError(
                    f"Found invalid number of record headers. {header_count} is larger than "
                    "the remaining size of the buffer"
                )
            headers: tuple = ()
            if header_count:
                hs = []
                for _h in range(header_count):
                    hk_len, p = read_varint(buf, p, end)
                    if hk_len < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {hk_len}")
                    hk_pos = p
                    p += hk_len
                    hv_len, p = read_varint(buf, p, end)
                    hv_pos = p
                    if hv_len < 0:
                        hv_len = -1
                    else:
                        p += hv_len
                    if p > end:
                        raise _Underflow
                    hs.append((hk_pos, hk_len, hv_pos, hv_len))
                headers = tuple(hs)
        except _Underflow:
            raise InvalidRecordError("Found invalid record structure") from None
        # Kafka reads the fields from the whole buffer and only then compares sizes.
        if p != record_end:
            raise InvalidRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {p - body}"
            )
        append((offset_delta, timestamp_delta, record_end - pos, key_pos, key_len, value_pos, value_len, headers))
        pos = record_end
    if pos != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return records


# A legacy log entry: offset int64, size int32, then the message:
#   crc uint32, magic int8, attributes int8, [timestamp int64 (v1)], keyLength int32, key,
#   valueLength int32, value
LEGACY_ENTRY_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
LOG_OVERHEAD = 12
RECORD_OVERHEAD_V0 = 14

#: (offset, size_in_bytes, crc, magic, attributes, timestamp, key_pos, key_len, value_pos, value_len, msg_pos)
LegacyEntry = Tuple[int, int, int, int, int, int, int, int, int, int, int]


def decode_legacy_message(buf: "bytes | memoryview", pos: int, end: int) -> Optional[LegacyEntry]:
    """The legacy entry at pos, or None when it does not fit before end (a truncated tail).

    Raises InvalidRecordError when the size field is below the minimum overhead or
    the key/value lengths point outside the message.
    """
    if end - pos < LOG_OVERHEAD:
        return None
    offset, size = struct.unpack_from(">qi", buf, pos)
    if size < RECORD_OVERHEAD_V0:
        raise InvalidRecordError(f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})")
    msg = pos + LOG_OVERHEAD
    msg_end = msg + size
    if msg_end > end:
        return None
    crc, magic, attributes = struct.unpack_from(">Ibb", buf, msg)
    p = msg + 6
    timestamp = -1
    if magic > 0:
        if p + 8 > msg_end:
            raise InvalidRecordError("Found invalid record structure")
        (timestamp,) = _INT64.unpack_from(buf, p)
        p += 8
    if p + 4 > msg_end:
        raise InvalidRecordError("Found invalid record structure")
    (key_len,) = _INT32.unpack_from(buf, p)
    p += 4
    key_pos = p
    if key_len < 0:
        key_len = -1
    else:
        p += key_len
    if p + 4 > msg_end:
        raise InvalidRecordError("Found invalid record structure")
    (value_len,) = _INT32.unpack_from(buf, p)
    p += 4
    value_pos = p
    if value_len < 0:
        value_len = -1
    else:
        p += value_len
    if p > msg_end:
        raise InvalidRecordError("Found invalid record structure")
    return (offset, LOG_OVERHEAD + size, crc, magic, attributes, timestamp, key_pos, key_len, value_pos, value_len, msg)
