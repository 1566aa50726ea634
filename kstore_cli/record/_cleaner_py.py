"""The pure-Python twin of the cleaner's native runs (the C twin is ``_cleaner_c``; pick through
:mod:`.record_filter`).

The native twin takes runs of plain data batches off the cleaner's hands (building the offset map,
MemoryRecords.filterTo) without a Python object per record. Here the run functions take no batch:
they return at once with :data:`RUN_PYTHON`, and the cleaner's per-batch path
(:class:`kstore_cli.cleaner.clean_segments.SegmentCleaner`, the reference both twins are checked against)
does every batch. :class:`OffsetMap` is :class:`kstore_cli.record.offset_map.OffsetMap`.

The interface (what the native twin does with it is in ``_cleaner_c.c``'s comments):

* ``frame_end(buf, pos, end) -> (stop, bad)``: how far ``buf[pos:end]`` holds complete entries, as
  FileLogInputStream frames them, and the position of an entry whose size field is below 14 (-1);
* ``skip_anonymous(buf, pos, end) -> pos``: past the complete v2 batches without a producer id (at
  least 61 bytes each) from pos, what the producer-state replay can skip;
* ``map_batches(offset_map, buf, pos, stop, start, limit, state, decompress[, txn_view]) -> (pos, status)``;
* ``filter_batches(offset_map, buf, pos, stop, capacity, out, state, now, new_horizon, specials,
  decompress, compress[, txn_view, marker_last]) -> (pos, status)``: with ``txn_view``
  (CleanedTransactionMetadata.transaction_view()) the native twin also takes committed transactions'
  batches and their COMMIT markers (``marker_last``: the producers whose last entry is a marker, whose
  markers keep their place: those stay with Python);

``state`` is an ``array('q')`` of :data:`MAP_SLOTS` / :data:`FILTER_SLOTS` slots (the ``M_*`` and
``F_*`` indexes below); ``status`` one of the ``RUN_*`` values.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Tuple

from kstore_cli.record.offset_map import OffsetMap  # noqa: F401 - the twin's map
from kstore_cli.record.wire import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, RECORD_OVERHEAD_V0, SIZE_OFFSET

#: Every entry up to `stop` was taken.
RUN_DONE = 0
#: The entry at the returned position is for the cleaner's per-batch Python path.
RUN_PYTHON = 1
#: map_batches: the map is full; the offset that did not fit is in state[M_STOP_OFFSET].
RUN_MAP_FULL = 2
#: filter_batches: the output outgrew the capacity (KAFKA-5316); the rest is read again.
RUN_OUTPUT_FULL = 3

# map_batches' state: records read, the highest last offset of the batches taken, where the map filled.
M_MESSAGES_READ, M_LAST_OFFSET, M_STOP_OFFSET = range(3)
MAP_SLOTS = 3
# filter_batches' state: the chunk's FilterResult (first offset when F_HAS_FIRST, max offset, max
# timestamp and its shallow offset, bytes read), the highest last offset taken, then CleanerStats counts.
(F_HAS_FIRST, F_FIRST_OFFSET, F_MAX_OFFSET, F_MAX_TIMESTAMP, F_OFFSET_OF_MAX_TIMESTAMP, F_BYTES_READ,
 F_LAST_OFFSET, F_MESSAGES_READ, F_INVALID_MESSAGES, F_TOMBSTONES_REMOVED, F_BATCHES_READ, F_BATCHES_WRITTEN,
 F_BATCHES_REBUILT, F_MESSAGES_WRITTEN, F_MARKERS_REMOVED) = range(15)
FILTER_SLOTS = 15

_SIZE = struct.Struct(">i")


def md5(data: "bytes | memoryview") -> bytes:
    """The offset map's hash of a key."""
    return hashlib.md5(data).digest()


def frame_end(buf: "bytes | memoryview", pos: int, end: int) -> Tuple[int, int]:
    """(end of the complete entries from pos, position of an entry with a size field below 14 or -1):
    reader.iterate_source's framing without making batches."""
    if pos < 0 or end < 0 or end > len(buf):
        raise ValueError("pos / end outside the buffer")
    while end - pos > HEADER_SIZE_UP_TO_MAGIC:
        size = _SIZE.unpack_from(buf, pos + SIZE_OFFSET)[0]
        if size < RECORD_OVERHEAD_V0:
            return pos, pos
        if size + LOG_OVERHEAD > end - pos:
            break
        pos += LOG_OVERHEAD + size
    return pos, -1


def skip_anonymous(buf: "bytes | memoryview", pos: int, end: int) -> int:
    """Skips nothing (the native twin: the v2 batches without a producer id from pos)."""
    if pos < 0 or end < pos or end > len(buf):
        raise ValueError("pos / stop outside the buffer")
    return pos


def map_batches(offset_map: OffsetMap, buf, pos: int, stop: int, start: int, limit: int, state,
                decompress, txn_view=None) -> Tuple[int, int]:
    """Takes no batch: every one goes to the cleaner's per-batch path."""
    return pos, RUN_DONE if pos >= stop else RUN_PYTHON


def filter_batches(offset_map: OffsetMap, buf, pos: int, stop: int, capacity: int, out: bytearray, state, now: int,
                   new_horizon, specials, decompress, compress, txn_view=None, marker_last=None) -> Tuple[int, int]:
    """Takes no batch: every one goes to the cleaner's per-batch path."""
    return pos, RUN_DONE if pos >= stop else RUN_PYTHON
