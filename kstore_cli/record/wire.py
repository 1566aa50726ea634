"""Kafka's wire building blocks, once: the log-entry prefix, the batch and legacy headers, varints.

Offsets are those of Kafka's constants (Records, DefaultRecordBatch, LegacyRecord); the C
extensions have the same numbers in ``_wire.h``. Varints are ByteUtils': LEB128, zigzag for the
signed ones, at most 5 bytes (varint) or 10 (varlong).
"""

from __future__ import annotations

import struct
from typing import Tuple

from kstore_cli.errors import InvalidRecordError
from kstore_cli.java import java_long

# ------------------------------------------------------------------ every log entry (Records)

OFFSET_OFFSET = 0  # Records.OFFSET_OFFSET: int64 offset (a v2 batch's base offset)
SIZE_OFFSET = 8  # Records.SIZE_OFFSET: int32 size of what follows the log overhead
LOG_OVERHEAD = 12  # Records.LOG_OVERHEAD
MAGIC_OFFSET = 16  # Records.MAGIC_OFFSET: int8 magic, at the same place in every format
HEADER_SIZE_UP_TO_MAGIC = 17  # Records.HEADER_SIZE_UP_TO_MAGIC
#: offset, size, (v2 leader epoch | legacy CRC), magic: what FileLogInputStream reads to frame an entry.
LOG_ENTRY_PREFIX = struct.Struct(">qiib")
#: offset, size: the log overhead alone.
LOG_ENTRY_HEADER = struct.Struct(">qi")

# ------------------------------------------------------------------ a magic v2 batch (DefaultRecordBatch)

BASE_OFFSET_OFFSET = 0  # int64 baseOffset
LENGTH_OFFSET = 8  # int32 batchLength: bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = 12  # int32, not covered by the CRC
CRC_OFFSET = 17  # uint32 CRC-32C of [ATTRIBUTES_OFFSET, end of batch); after the magic (MAGIC_OFFSET)
ATTRIBUTES_OFFSET = 21  # int16: codec 0-2, timestamp type 3, transactional 4, control 5, delete horizon 6
LAST_OFFSET_DELTA_OFFSET = 23  # int32
BASE_TIMESTAMP_OFFSET = 27  # int64, the delete horizon when attribute bit 6 is set
MAX_TIMESTAMP_OFFSET = 35  # int64
PRODUCER_ID_OFFSET = 43  # int64
PRODUCER_EPOCH_OFFSET = 51  # int16
BASE_SEQUENCE_OFFSET = 53  # int32
RECORDS_COUNT_OFFSET = 57  # int32
RECORDS_OFFSET = 61  # the records start here
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET  # DefaultRecordBatch.RECORD_BATCH_OVERHEAD: 61

#: Every field above, in order (V2_HEADER.size == RECORD_BATCH_OVERHEAD).
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = RECORD_BATCH_OVERHEAD
V2_CRC_POS = CRC_OFFSET
V2_CRC_START = ATTRIBUTES_OFFSET

# ------------------------------------------------------------------ a legacy entry (LegacyRecord, magic 0/1)

# Offsets inside the message, which follows the log overhead:
LEGACY_CRC_OFFSET = 0  # LegacyRecord.CRC_OFFSET: uint32 CRC-32 of [MAGIC_OFFSET, end of message)
LEGACY_MAGIC_OFFSET = 4  # LegacyRecord.MAGIC_OFFSET
LEGACY_ATTRIBUTES_OFFSET = 5  # LegacyRecord.ATTRIBUTES_OFFSET: int8, codec 0-2, timestamp type 3 (v1)
LEGACY_TIMESTAMP_OFFSET = 6  # LegacyRecord.TIMESTAMP_OFFSET: int64, magic 1 only
KEY_SIZE_OFFSET_V0 = 6  # LegacyRecord.KEY_SIZE_OFFSET_V0: int32 key length, then key, value length, value
KEY_SIZE_OFFSET_V1 = 14  # LegacyRecord.KEY_SIZE_OFFSET_V1
RECORD_OVERHEAD_V0 = 14  # LegacyRecord.RECORD_OVERHEAD_V0: the smallest size a log entry may declare
RECORD_OVERHEAD_V1 = 22  # LegacyRecord.RECORD_OVERHEAD_V1
#: offset, size, crc, magic, attributes: a legacy entry up to its timestamp (v1) or key length (v0).
LEGACY_ENTRY_HEADER = struct.Struct(">qiIbb")

# ------------------------------------------------------------------ varints (ByteUtils)


class Underflow(Exception):
    """A varint ran past the end of the buffer (callers turn it into Kafka's message for the spot)."""


def zigzag32(n: int) -> int:
    """The zigzag of n as ByteUtils.writeVarint writes it (low 32 bits)."""
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def zigzag64(n: int) -> int:
    """The zigzag of n as ByteUtils.writeVarlong writes it; past int64, n wraps first as a Java long."""
    n = java_long(n)
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def write_uvarint(u: int, out: bytearray) -> None:
    """Append the unsigned varint of u (ByteUtils.writeUnsignedVarint's bytes; callers zigzag first)."""
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def encode_uvarint(u: int) -> bytes:
    """The unsigned varint of u as bytes."""
    out = bytearray()
    write_uvarint(u, out)
    return bytes(out)


def write_varint(n: int, out: bytearray) -> None:
    """Append n as a zigzag varint (minimal encoding)."""
    write_uvarint(zigzag32(n), out)


def write_varlong(n: int, out: bytearray) -> None:
    """Append n as a zigzag varlong (minimal encoding)."""
    write_uvarint(zigzag64(n), out)


def size_of_varint(value: int) -> int:
    """Bytes needed for value as a zigzag varint."""
    v = zigzag32(value)
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def read_varint(buf: "bytes | memoryview", pos: int, end: int) -> Tuple[int, int]:
    """A zigzag varint (at most 5 bytes) at pos: (value, next position).

    Raises Underflow past end, and Kafka's InvalidRecordError when the 5th byte continues.
    """
    value = 0
    shift = 0
    i = 0
    while True:
        if pos >= end:
            raise Underflow
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
    """A zigzag varlong (at most 10 bytes) at pos: (value, next position); errors as :func:`read_varint`."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise Underflow
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
