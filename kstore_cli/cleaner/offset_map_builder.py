"""Cleaner.buildOffsetMap: MD5(key) -> latest offset over the dirty segments (aborted transactional
batches skipped), bounded by the dedupe buffer; and how the cleaner reads a segment, in chunks of its
I/O buffer (Cleaner's readBuffer, growBuffersOrFail), for the map as for cleanSegments."""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

from kstore_cli.errors import CorruptRecordError
from kstore_cli.java import MAX_INT64
from kstore_cli.log.config import CleanerSettings
from kstore_cli.log.log_segment import LogSegment
from kstore_cli.log.unified_log import UnifiedLog
from kstore_cli.record import record_filter
from kstore_cli.record.batch import LOG_OVERHEAD, Batch
from kstore_cli.record.reader import iterate_source, map_file, release_pages
from kstore_cli.record.record_filter import OffsetMap
from kstore_cli.cleaner.cleaned_transaction_metadata import CleanedTransactionMetadata
from kstore_cli.cleaner.cleaner_stats import CleanerStats

LONG_MAX = MAX_INT64  # Long.MAX_VALUE
_SIZE_FIELD = 8  # byte of a batch's size field
RELEASE_EVERY = 8 * 1024 * 1024  # drop read pages of the mapped segment this often


def read_chunks(buf: memoryview, start: int, settings: CleanerSettings, max_message_bytes: int, path: str
            ) -> Iterator[Tuple[int, int, int]]:
    """(chunk position, end of its complete batches, buffer capacity) as Cleaner reads a segment: ``readInto``
    of the I/O buffer from the position, only whole batches, the buffer doubled (growBuffersOrFail) while
    not even one batch fits. The consumer sends back how many bytes it consumed."""
    size = len(buf)
    position = released = start
    capacity = settings.io_buffer_bytes
    while position < size:
        end = min(size, position + capacity)
        stop, bad = record_filter.frame_end(buf, position, end)
        if bad >= 0:
            list(iterate_source(buf, position, end, path))  # raises FileLogInputStream's error for that entry
        if stop == position:
            capacity = _grow_buffers(buf, position, capacity, settings, max_message_bytes, path)
            continue
        consumed = yield position, stop, capacity
        position += consumed if consumed is not None else stop - position
        if position - released >= RELEASE_EVERY:
            release_pages(buf, released, position)  # pages already filtered leave the process (RSS stays flat)
            released = position


def _grow_buffers(buf: memoryview, position: int, capacity: int, settings: CleanerSettings, max_message_bytes: int,
          path: str) -> int:
    """Cleaner.growBuffersOrFail + growBuffers: the next I/O buffer size, or an error."""
    size = len(buf)
    if capacity >= max_message_bytes:
        if size - position < 12:
            raise CorruptRecordError(f"Could not determine next batch size for log segment {path} at position "
                                     f"{position}", path=path, position=position)
        next_size = int.from_bytes(buf[position + _SIZE_FIELD: position + 12], "big", signed=True) + LOG_OVERHEAD
        if next_size <= capacity:
            raise CorruptRecordError(f"Batch size {next_size} < buffer size {capacity}, but not processed",
                                     path=path, position=position)
        if next_size > size - position:
            raise CorruptRecordError(f"Log segment may be corrupt, batch size {next_size} > {size - position} "
                                     "bytes left in segment", path=path, position=position)
        wanted = next_size
    else:
        wanted = max_message_bytes
    limit = max(wanted, settings.max_io_buffer_bytes)
    if capacity >= limit:
        raise CorruptRecordError(f"This log contains a message larger than maximum allowable size of {limit}.",
                                 path=path, position=position)
    return min(capacity * 2, limit)



def build_offset_map(view: UnifiedLog, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats,
                     settings: CleanerSettings, max_message_bytes: int, *, limit: int = LONG_MAX) -> Optional[int]:
    """Cleaner.buildOffsetMap over the dirty segments in [start, end); only records below `limit`
    are entered (a resumed pass, see :mod:`interrupted_pass`). Returns the offset of the first record
    that did not fit when the map filled up, else None."""
    offset_map.clear()
    dirty = view.log_segments(start, end)
    txns = CleanedTransactionMetadata()
    txns.add_aborted_transactions(view.collect_aborted_transactions(start, end))
    for i, seg in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        stop = _map_segment(seg, offset_map, start, next_start, txns, stats, settings, max_message_bytes, limit)
        if stop is not None:
            stats.map_full = True
            return stop
    return None


def _map_segment(seg: LogSegment, offset_map: OffsetMap, start: int, next_start: int,
                 txns: CleanedTransactionMetadata, stats: CleanerStats, settings: CleanerSettings,
                 max_message_bytes: int, limit: int = LONG_MAX) -> Optional[int]:
    """Cleaner.buildOffsetMapForSegment; the offset of the record that did not fit when the map
    filled up, else None."""
    buf = map_file(seg.log)
    chunks = read_chunks(buf, seg.start_position(start), settings, max_message_bytes, seg.log)
    try:
        position, stop, _capacity = next(chunks)
        while True:
            full = map_chunk(buf, position, stop, seg.log, offset_map, start, limit, txns, stats)
            if full is not None:
                return full
            stats.map_bytes_read += stop - position
            position, stop, _capacity = chunks.send(stop - position)
    except StopIteration:
        pass
    offset_map.update_latest_offset(next_start - 1)  # offset gaps: fast forward to the segment's end
    return None


def map_chunk(buf: memoryview, position: int, stop: int, path: str, offset_map: OffsetMap, start: int, limit: int,
               txns: CleanedTransactionMetadata, stats: CleanerStats) -> Optional[int]:
    """The batches of one chunk into the map: runs of plain data batches natively
    (record_filter.map_batches), any other batch by :func:`_map_batch`. The offset that did not fit
    when the map filled up, else None."""
    native = record_filter.fits_int64(start, limit)
    state = record_filter.map_state()
    pos = position
    while pos < stop:
        if native:
            pos, status = record_filter.map_batches(offset_map, buf, pos, stop, start, limit, state,
                                                    record_filter.decompress, txns.transaction_view())
            stats.map_messages_read += state[record_filter.M_MESSAGES_READ]
            state[record_filter.M_MESSAGES_READ] = 0
            if state[record_filter.M_LAST_OFFSET] != record_filter.NO_OFFSET:
                # The batches taken were plain or committed transactions': reading them moves the aborted ones on.
                txns.consume_up_to(state[record_filter.M_LAST_OFFSET])
                state[record_filter.M_LAST_OFFSET] = record_filter.NO_OFFSET
            if status == record_filter.RUN_MAP_FULL:
                return state[record_filter.M_STOP_OFFSET]
            if pos >= stop:
                break
        batch = next(iterate_source(buf, pos, stop, path, check_crc=True))
        batch.ensure_valid()  # the native runs leave a batch whose CRC fails to this
        batch.ensure_valid_offsets()  # and one whose offsets Kafka rejects
        full = _map_batch(batch, offset_map, start, limit, txns, stats)
        if full is not None:
            return full
        pos += batch.size
    return None


def _map_batch(batch: Batch, offset_map: OffsetMap, start: int, limit: int, txns: CleanedTransactionMetadata,
               stats: CleanerStats) -> Optional[int]:
    """One batch of Cleaner.buildOffsetMapForSegment (the reference of record_filter.map_batches)."""
    if batch.is_control:
        txns.on_control_batch_read(batch)
        stats.map_messages_read += 1
    elif txns.on_batch_read(batch):
        stats.map_messages_read += batch.count  # aborted: keys not entered
    else:
        max_entries = offset_map.max_entries
        for record in batch.records():
            if record.has_key and start <= record.offset < limit:
                if offset_map.size < max_entries:
                    offset_map.put(record.key_view(), record.offset)
                else:
                    return record.offset
            stats.map_messages_read += 1
    if batch.last_offset >= start:
        offset_map.update_latest_offset(batch.last_offset)
    return None
