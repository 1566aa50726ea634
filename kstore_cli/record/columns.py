"""A segment's records as columns: runs of plain v2 batches decoded in bulk, no object per record.

The common case of a log (uncompressed v2 data batches) goes through ``decode.decode_v2_run``:
one call decodes up to ``max_rows`` records / ``max_bytes`` of batches straight into Arrow-ready
buffers, so a 1-record batch costs about what a record costs. Every other entry (compressed,
control, legacy, damaged, or outside the asked offset range) is handed out as the batch object
:func:`~kstore_cli.record.reader.read_batches` would give, for the caller's batch path; Kafka's
errors come from there too. What :func:`read_columns` yields, in file order, covers the same
entries as :func:`read_batches`.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Union

from kstore_cli.record import decode
from kstore_cli.record.batch import Batch
from kstore_cli.record.decode import SCAN_MORE, SCAN_OTHER
from kstore_cli.record import storage
from kstore_cli.record.reader import RELEASE_EVERY, Source, iterate_source, open_source, release_pages, remote_windows

#: Records per run (one decode call).
MAX_ROWS = 65536
#: Bytes of batches per run (a run's first batch always joins). Small runs keep the output buffers in the
#: CPU cache and below malloc's mmap threshold (128 KiB): 1 MiB runs were 2-3x slower on ~1 KiB values,
#: every run's buffers being fresh pages from the kernel.
MAX_BYTES = 64 * 1024
_NO_BASES = (0, 0, 0, 0, 0)
_MAGIC = 16  # byte positions in a batch: magic, and the low byte of the attributes
_ATTRIBUTES = 22
_NOT_PLAIN = 0x27  # a codec, or a control batch
_TRANSACTIONAL = 0x10


class RecordColumns(NamedTuple):
    """The records of consecutive plain v2 batches (``position`` up to ``stop``), as native-endian buffers.

    ``*_ends`` are Arrow offsets without their leading 0 (int32); ``*_valid`` one byte per item
    (0 null, 1 set); ``timestamp_types`` int32 (0 create time, 1 log append time); header
    columns are empty unless asked for: row i's headers are ``header_ends[i-1]:header_ends[i]``
    of the header key/value columns.
    """

    position: int
    stop: int
    batches: int
    rows: int
    offsets: bytes
    timestamps: bytes
    timestamp_types: bytes
    key_ends: bytes
    key_data: bytes
    key_valid: bytes
    value_ends: bytes
    value_data: bytes
    value_valid: bytes
    header_ends: bytes
    header_key_ends: bytes
    header_key_data: bytes
    header_value_ends: bytes
    header_value_data: bytes
    header_value_valid: bytes


def read_columns(
    source: Source,
    *,
    start: int = 0,
    end: Optional[int] = None,
    path: Optional[str] = None,
    check_crc: bool = False,
    with_headers: bool = False,
    min_offset: Optional[int] = None,
    end_offset: Optional[int] = None,
    stop_transactional: bool = False,
    max_rows: int = MAX_ROWS,
    max_bytes: int = MAX_BYTES,
) -> Iterator[Union[RecordColumns, Batch]]:
    """The entries from byte `start` up to `end`: :class:`RecordColumns` for runs of plain v2 data
    batches, batch objects for everything else.

    A batch is left to the batch path when it holds an offset outside ``[min_offset, end_offset)``,
    is transactional with `stop_transactional`, fails its CRC with `check_crc`, or (with
    `with_headers`) has a header key that is not strict UTF-8 (Java's decoder replaces bytes there).
    """
    if storage.is_uri(source):
        return remote_windows(source, start, end, lambda b, p, e: _runs(
            b, p, e, source, check_crc, with_headers, min_offset, end_offset, stop_transactional, max_rows, max_bytes))
    buf, path = open_source(source, path)
    end = len(buf) if end is None else min(end, len(buf))
    return _runs(buf, start, end, path, check_crc, with_headers, min_offset, end_offset, stop_transactional,
                 max_rows, max_bytes)


def _runs(buf: memoryview, pos: int, end: int, path: Optional[str], check_crc: bool, with_headers: bool,
          min_offset: Optional[int], end_offset: Optional[int], stop_transactional: bool, max_rows: int,
          max_bytes: int) -> Iterator[Union[RecordColumns, Batch]]:
    run = decode.decode_v2_run
    released = pos
    while True:
        rows, stop, status, batches, cols = run(buf, pos, end, max_rows, max_bytes, check_crc, min_offset,
                                                end_offset, stop_transactional, with_headers, _NO_BASES)
        if batches:
            yield RecordColumns(pos, stop, batches, rows, *cols)
        pos = stop
        if pos - released >= RELEASE_EVERY:
            release_pages(buf, released, pos)
            released = pos
        if status == SCAN_MORE:
            continue
        if status != SCAN_OTHER:
            return
        # Entries the batch way (the reader's framing: legacy, codecs, errors, a partial tail), up to one
        # that could start a run again. One generator for them all: a fresh one per entry framed 8
        # batches to hand out one (columnar reads of compressed 1-record batches were 0.6x the object API).
        entries = iterate_source(buf, pos, end, path, check_crc)
        try:
            for batch in entries:
                yield batch
                pos = batch.position + batch.size
                if _may_run(buf, pos, end, stop_transactional):
                    break
            else:
                return
        finally:
            entries.close()


def _may_run(buf: memoryview, pos: int, end: int, stop_transactional: bool) -> bool:
    """Whether the entry at `pos` looks like a plain v2 data batch (decode_v2_run decides)."""
    if pos + _ATTRIBUTES + 1 > end or buf[pos + _MAGIC] != 2:
        return False
    return not buf[pos + _ATTRIBUTES] & (_NOT_PLAIN | (_TRANSACTIONAL if stop_transactional else 0))
