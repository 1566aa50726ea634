"""What both record-decoder twins share: the underflow signal, the legacy wire structs, the scan statuses.

The twins (:mod:`._decode_py`, pure Python, and the C extension ``_decode_c``) must raise the
same classes with the same messages; the classes live here (and in :mod:`kstore_cli.errors`)
so that both import the very same objects.
"""

from __future__ import annotations

import struct
from typing import Tuple

from kstore_cli.java import MAX_INT32  # noqa: F401 - re-exported to the twins


def write_uvarint(u: int, out: bytearray) -> None:
    """Append the unsigned varint of u (ByteUtils.writeUnsignedVarint's bytes; callers zigzag first)."""
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


class Underflow(Exception):
    """A varint ran past the end of the buffer (callers turn it into Kafka's message for the spot)."""


_Underflow = Underflow  # the name the twins (and _decode_c.c's import) use


#: (offset_delta, timestamp_delta, size_in_bytes, key_pos, key_len, value_pos, value_len, headers)
#: key_len/value_len are -1 for null; headers is a tuple of (key_pos, key_len, value_pos, value_len).
V2Record = Tuple[int, int, int, int, int, int, int, tuple]

# A legacy log entry: offset int64, size int32, then the message:
#   crc uint32, magic int8, attributes int8, [timestamp int64 (v1)], keyLength int32, key,
#   valueLength int32, value
LEGACY_ENTRY_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
LOG_OVERHEAD = 12
RECORD_OVERHEAD_V0 = 14

#: (offset, size_in_bytes, crc, magic, attributes, timestamp, key_pos, key_len, value_pos, value_len, msg_pos)
LegacyEntry = Tuple[int, int, int, int, int, int, int, int, int, int, int]

# The v2 batch header (DefaultRecordBatch), as batch.py documents it field by field.
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
V2_CRC_START = struct.calcsize(">qiibI")  # 21: the CRC covers attributes to the end
V2_CRC_POS = struct.calcsize(">qiib")  # 17
HEADER_SIZE_UP_TO_MAGIC = 17

#: One v2 batch header found by ``scan_batches``: its position, then the fields of V2_HEADER in order.
BatchHead = Tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int]

#: scan_batches statuses. SCAN_END: fewer than 18 bytes remain, nothing more can be framed.
#: SCAN_MORE: the batch limit was reached (call again from the returned position).
#: SCAN_OTHER: the entry at the returned position is not a plain valid v2 batch (legacy, size
#: below 14, partial tail, under 61 bytes, or a CRC mismatch when asked to check): the caller
#: handles that one entry its own (generic) way.
SCAN_END = 0
SCAN_MORE = 1
SCAN_OTHER = 2



def _int32(value: int) -> int:
    """Java int arithmetic: wrap to a signed 32-bit value."""
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: wraps from Integer.MAX_VALUE to 0.

    Every step wraps like Java's int, so damaged headers give the numbers Kafka prints.
    """
    if sequence > _int32(MAX_INT32 - increment):
        return _int32(_int32(increment - _int32(MAX_INT32 - sequence)) - 1)
    return _int32(sequence + increment)
