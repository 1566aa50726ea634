"""What both record-decoder twins share: the underflow signal, the tuple shapes, the scan statuses.

The twins (:mod:`._decode_py`, pure Python, and the C extension ``_decode_c``) must raise the
same classes with the same messages: both take the underflow signal from here (it is :mod:`.wire`'s)
and the errors from :mod:`kstore_cli.errors`, so that they use the very same objects.
"""

from __future__ import annotations

from typing import Tuple

from kstore_cli.java import MAX_INT32  # noqa: F401 - re-exported to the twins
from kstore_cli.record.wire import Underflow

_Underflow = Underflow  # the name the twins (and _decode_c.c's import) use


#: (offset_delta, timestamp_delta, size_in_bytes, key_pos, key_len, value_pos, value_len, headers)
#: key_len/value_len are -1 for null; headers is a tuple of (key_pos, key_len, value_pos, value_len).
V2Record = Tuple[int, int, int, int, int, int, int, tuple]

#: (offset, size_in_bytes, crc, magic, attributes, timestamp, key_pos, key_len, value_pos, value_len, msg_pos)
LegacyEntry = Tuple[int, int, int, int, int, int, int, int, int, int, int]

#: One v2 batch header found by ``scan_batches``: its position, then the fields of wire.V2_HEADER in order.
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
