"""Log compaction offline: one pass of Kafka's log cleaner (``LogCleanerManager`` + ``Cleaner``) over a
partition directory (spec §8). Kafka's classes, one module each: this one is ``Cleaner`` (the pass),
``log_cleaner_manager`` ``LogCleanerManager`` (the cleanable range, the checkpoint), ``offset_map`` /
``record_filter`` ``SkimpyOffsetMap`` and the per-record work, ``cleaned_transaction_metadata`` and
``cleaner_stats`` theirs; ``compact_intent`` is kstore's crash record of a pass being swapped in.

A pass, in Kafka's order::

    plan     LogCleanerManager.cleanableOffsets / calculateCleanableBytes / maxCompactionDelay:
             firstDirtyOffset from cleaner-offset-checkpoint (reset to the log start offset when it
             is below it or above the log end), firstUncleanableOffset = min(last stable offset,
             active segment, first segment within min.compaction.lag.ms) rounded down to a segment
             base; dirty ratio and max.compaction.lag.ms decide whether the broker would clean it
    map      Cleaner.buildOffsetMap: MD5(key) -> latest offset over the dirty segments (aborted
             transactional batches skipped), bounded by the dedupe buffer (offset_map.py); a full map
             ends the pass early at the last offset it holds
    groups   Cleaner.groupSegmentsBySize over the segments below endOffset = latest offset + 1
    clean    per group, Cleaner.cleanSegments: each source segment read in chunks of the I/O buffer
             (256 KiB, doubled while one batch does not fit), every chunk filtered as
             MemoryRecords.filterTo does (batch retention, record retention, delete horizons,
             transaction markers, empty batches) and appended to a new ``.cleaned`` segment as one
             LogSegment.append (so index entries follow the chunks), then mtimes, then the swap
             (LocalLog.replaceSegments via swap.py) and removal of the replaced segments' snapshots
    done     cleaner-offset-checkpoint := endOffset, only after every group is swapped in

What Kafka keeps as live state is rebuilt from the directory: the producer state at the log end
(latest snapshot + replay, for the last stable offset and ``lastRecordsOfActiveProducers``) and the
high watermark (replication-offset-checkpoint when present, else the log end offset).

Crash safety. Each group is written as ``.cleaned`` files and swapped in on its own, as Kafka does
(so a pass needs one group's worth of extra disk, not the whole pass's), and the checkpoint is
advanced after the last swap. Kafka lets a crash in between make the next pass clean the swapped
range again; that second pass is not idempotent (a tombstone's or marker's delete horizon honoured
one pass early, an ABORT marker's ``.txnindex`` entry dropped once its data is gone), so a rerun
would not converge to what an uninterrupted run leaves. kstore therefore writes a *pass intent*
(``kstore-compact-intent.json`` in the partition directory, atomically through fileops) before each
group's swap: the checkpoint entry the pass started from, the dirty range, end offset and where the
offset map stopped, the legacy delete horizon, the pass's clock, the active producers, the groups
(old bases and sizes), the group being swapped with the size and SHA-256 of its new files, and the
transaction state before and after that group. Every run first resolves leftovers with LogLoader's
rules (:func:`~kstore_cli.log.swap.resolve_leftovers`), removes stray producer snapshots
(ProducerStateManager.removeStraySnapshots), then, finding an intent:

* the group's swap took effect (its new files are there, byte for byte) and it was the last: the
  checkpoint is advanced to the intent's end offset and the intent removed; nothing is cleaned again;
* a later group is left: the pass is resumed from the next group -- the offset map rebuilt over the
  same range (the swapped groups kept every record the map pointed at, so lookups for the records
  still to clean give the same answers), the transaction state, producers and clock from the intent;
* the swap was rolled back: the same, from that group; for the first group the intent is simply
  removed and a normal pass runs (the input is as it was);
* the intent does not fit the directory (the checkpoint entry moved, a segment still to clean
  changed: a broker ran in between) or cannot be read: it is removed and a normal pass runs.

Kafka's LogLoader ignores the intent (no segment suffix, no leading offset: §6.2), so a broker
started on a crashed directory is unaffected; the partition directory rather than the data dir root
keeps it with its partition (a broker moving or deleting the partition takes it along). An error
(a full disk, a permission error) before a group's swap begins removes that group's ``.cleaned``
files, and the intent when no group took effect; once a swap has begun the state is a crash's.
The producer snapshot at a group's base offset (which Kafka keeps) goes through the swap with the
segment: LogLoader, completing an interrupted swap, deletes every file in the swapped range.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from kstore_cli.java import MAX_INT64
from kstore_cli.errors import CorruptDataError, CorruptRecordError, InvalidRecordError, KstoreError, UsageError
from kstore_cli.log import fileops, names
from kstore_cli.record import record_filter
from kstore_cli.record.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    Batch,
)
from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_v2_batch
from kstore_cli.log.config import CleanerSettings, TopicConfig
from kstore_cli.log.logdir import Partition
from kstore_cli.record.record_filter import OffsetMap
from kstore_cli.record.reader import iterate_source, map_file, read_batches, release_pages
from kstore_cli.log.log_segment import LogSegment
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.log.unified_log import DataDirState, UnifiedLog
from kstore_cli.log.writer import PartitionWriter
from kstore_cli.cleaner.cleaned_transaction_metadata import CleanedTransactionMetadata
from kstore_cli.cleaner.cleaner_stats import CleanerStats
from kstore_cli.cleaner.compact_intent import INTENT_FILE, INTENT_VERSION, PassIntent, file_identity, intent_path
from kstore_cli.cleaner.log_cleaner_manager import (
    CleaningPlan,
    plan_cleaning,
    read_cleaner_checkpoint,
    update_cleaner_checkpoint,
)

LONG_MAX = MAX_INT64  # Long.MAX_VALUE
_SIZE_FIELD = 8  # byte of a batch's size field
RELEASE_EVERY = 8 * 1024 * 1024  # drop read pages of the mapped segment this often


# --------------------------------------------------------------------------- the log as the cleaner sees it


# --------------------------------------------------------------------------- which range to clean


# --------------------------------------------------------------------------- transactions


# --------------------------------------------------------------------------- statistics


# --------------------------------------------------------------------------- chunked reading


def _chunks(buf: memoryview, start: int, settings: CleanerSettings, max_message_bytes: int, path: str
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
            capacity = _grow(buf, position, capacity, settings, max_message_bytes, path)
            continue
        consumed = yield position, stop, capacity
        position += consumed if consumed is not None else stop - position
        if position - released >= RELEASE_EVERY:
            release_pages(buf, released, position)  # pages already filtered leave the process (RSS stays flat)
            released = position


def _grow(buf: memoryview, position: int, capacity: int, settings: CleanerSettings, max_message_bytes: int,
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


# --------------------------------------------------------------------------- the offset map


def build_offset_map(view: UnifiedLog, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats,
                     settings: CleanerSettings, max_message_bytes: int, *, limit: int = LONG_MAX) -> Optional[int]:
    """Cleaner.buildOffsetMap over the dirty segments in [start, end); only records below `limit`
    are entered (a resumed pass, see :func:`_resume_pass`). Returns the offset of the first record
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
    chunks = _chunks(buf, seg.start_position(start), settings, max_message_bytes, seg.log)
    try:
        position, stop, _capacity = next(chunks)
        while True:
            full = _map_chunk(buf, position, stop, seg.log, offset_map, start, limit, txns, stats)
            if full is not None:
                return full
            stats.map_bytes_read += stop - position
            position, stop, _capacity = chunks.send(stop - position)
    except StopIteration:
        pass
    offset_map.update_latest_offset(next_start - 1)  # offset gaps: fast forward to the segment's end
    return None


def _map_chunk(buf: memoryview, position: int, stop: int, path: str, offset_map: OffsetMap, start: int, limit: int,
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


# --------------------------------------------------------------------------- filtering (MemoryRecords.filterTo)

RETAIN_EMPTY, DELETE, DELETE_EMPTY = "RETAIN_EMPTY", "DELETE", "DELETE_EMPTY"


class _ChunkResult:
    """MemoryRecords.FilterResult of one chunk: the output, and its metadata in a record_filter state
    array that the native runs update in place (with their CleanerStats counts, see :meth:`take_counts`)."""

    __slots__ = ("out", "state")

    def __init__(self) -> None:
        self.out = bytearray()
        self.state = record_filter.filter_state()

    @property
    def bytes_read(self) -> int:
        return self.state[record_filter.F_BYTES_READ]

    @property
    def max_offset(self) -> int:
        return self.state[record_filter.F_MAX_OFFSET]

    @property
    def max_timestamp(self) -> int:
        return self.state[record_filter.F_MAX_TIMESTAMP]

    @property
    def offset_of_max_timestamp(self) -> int:
        return self.state[record_filter.F_OFFSET_OF_MAX_TIMESTAMP]

    @property
    def first_offset(self) -> Optional[int]:
        return self.state[record_filter.F_FIRST_OFFSET] if self.state[record_filter.F_HAS_FIRST] else None

    def read(self, size: int) -> None:
        self.state[record_filter.F_BYTES_READ] += size

    def retained(self, data: "bytes | memoryview", first_offset: int, max_timestamp: int, shallow_offset: int,
                 max_offset: int) -> None:
        """updateRetainedBatchMetadata."""
        state = self.state
        if not state[record_filter.F_HAS_FIRST]:
            state[record_filter.F_HAS_FIRST] = 1
            state[record_filter.F_FIRST_OFFSET] = first_offset
        self.out += data
        if max_timestamp > state[record_filter.F_MAX_TIMESTAMP]:
            state[record_filter.F_MAX_TIMESTAMP] = max_timestamp
            state[record_filter.F_OFFSET_OF_MAX_TIMESTAMP] = shallow_offset
        if max_offset > state[record_filter.F_MAX_OFFSET]:
            state[record_filter.F_MAX_OFFSET] = max_offset

    def take_counts(self, stats: CleanerStats, txns: CleanedTransactionMetadata, bytes_before: int) -> None:
        """Move what a native run counted into the stats, and move the transaction state past the
        batches it took (plain ones, or committed transactions' that it entered itself: reading them only consumes
        aborted ones)."""
        state = self.state
        stats.bytes_read += state[record_filter.F_BYTES_READ] - bytes_before
        for slot, name in _RUN_COUNTS:
            stats_value = getattr(stats, name)
            setattr(stats, name, stats_value + state[slot])
            state[slot] = 0
        if state[record_filter.F_LAST_OFFSET] != record_filter.NO_OFFSET:
            txns.consume_up_to(state[record_filter.F_LAST_OFFSET])
            state[record_filter.F_LAST_OFFSET] = record_filter.NO_OFFSET


_RUN_COUNTS = ((record_filter.F_MESSAGES_READ, "messages_read"),
               (record_filter.F_INVALID_MESSAGES, "invalid_messages_read"),
               (record_filter.F_TOMBSTONES_REMOVED, "tombstones_removed"),
               (record_filter.F_BATCHES_READ, "batches_read"),
               (record_filter.F_BATCHES_WRITTEN, "batches_written"),
               (record_filter.F_BATCHES_REBUILT, "batches_rebuilt"),
               (record_filter.F_MESSAGES_WRITTEN, "messages_written"),
               (record_filter.F_MARKERS_REMOVED, "markers_removed"))


class SegmentCleaner:
    """The parts of Cleaner.cleanInto that hold for a whole pass: the map, the clock, the
    transaction state, the active producers, the round's upper bound."""

    def __init__(self, offset_map: OffsetMap, config: TopicConfig, now: int, txns: CleanedTransactionMetadata,
                 last_records: Dict[int, Tuple[Optional[int], int]], upper_bound: int, stats: CleanerStats,
                 settings: CleanerSettings) -> None:
        self.map = offset_map
        self.now = now
        self.delete_retention_ms = config.get("delete.retention.ms")
        self.max_message_bytes = config.get("max.message.bytes")
        self.txns = txns
        self.last_records = last_records
        self.upper_bound = upper_bound
        self.stats = stats
        self.settings = settings
        # The batches native runs leave to _filter_batch because they keep their place even when
        # emptied: each active producer's last data batch, and the round's last batch.
        self._specials = record_filter.specials([last for last, _epoch in last_records.values()]
                                                + [upper_bound - 1])
        #: Producers whose last entry is a marker: isBatchLastRecordOfProducer keeps their markers' place.
        self._marker_last = frozenset(pid for pid, (last, _epoch) in last_records.items() if last is None)
        self._native = record_filter.fits_int64(now)

    def clean_into(self, seg: LogSegment, writer: PartitionWriter, retain_legacy_deletes: bool) -> None:
        """Filter one source segment chunk by chunk into the writer's current segment."""
        buf = map_file(seg.log)
        chunks = _chunks(buf, 0, self.settings, self.max_message_bytes, seg.log)
        try:
            position, stop, capacity = next(chunks)
            while True:
                result = self.filter_to(buf, position, stop, seg.log, retain_legacy_deletes, capacity)
                if result.out:
                    writer.append_chunk(result.out, first_offset=result.first_offset,
                                        largest_offset=result.max_offset, max_timestamp=result.max_timestamp,
                                        offset_of_max_timestamp=result.offset_of_max_timestamp)
                    self.stats.bytes_written += len(result.out)
                position, stop, capacity = chunks.send(result.bytes_read)
        except StopIteration:
            pass

    def filter_to(self, buf: memoryview, position: int, stop: int, path: Optional[str], retain_legacy_deletes: bool,
                  capacity: int) -> _ChunkResult:
        """MemoryRecords.filterTo with the cleaner's RecordFilter over the complete batches of
        buf[position:stop]: runs of plain data batches natively (record_filter.filter_batches), any
        other batch by :meth:`_filter_batch`."""
        result = _ChunkResult()
        pos = position
        while pos < stop:
            if self._native:
                bytes_before = result.bytes_read
                pos, status = record_filter.filter_batches(
                    self.map, buf, pos, stop, capacity, result.out, result.state, self.now,
                    self.now + self.delete_retention_ms, self._specials, record_filter.decompress,
                    record_filter.compress, self.txns.transaction_view(), self._marker_last)
                result.take_counts(self.stats, self.txns, bytes_before)
                if status == record_filter.RUN_OUTPUT_FULL or pos >= stop:
                    break
            batch = next(iterate_source(buf, pos, stop, path))
            self._filter_batch(batch, result, retain_legacy_deletes)
            pos += batch.size
            if len(result.out) > capacity:
                break  # KAFKA-5316: the output outgrew the write buffer; the rest is read again
        return result

    def _filter_batch(self, batch: Batch, result: _ChunkResult, retain_legacy_deletes: bool) -> None:
        """One batch of MemoryRecords.filterTo (the reference of record_filter.filter_batches)."""
        stats = self.stats
        is_control = batch.is_control
        can_discard = self.txns.on_control_batch_read(batch) if is_control else self.txns.on_batch_read(batch)
        horizon = batch.delete_horizon_ms
        if is_control:
            discard_records = can_discard and horizon is not None and horizon <= self.now
        else:
            discard_records = can_discard
        if batch.producer_id >= 0 and self._last_of_producer(batch):
            retention = RETAIN_EMPTY  # keeps the producer's sequence / epoch
        elif batch.next_offset == self.upper_bound:
            retention = RETAIN_EMPTY  # keeps the round's last offset
        elif discard_records:
            retention = DELETE
        else:
            retention = DELETE_EMPTY
        result.read(batch.size)
        stats.bytes_read += batch.size
        stats.batches_read += 1
        if retention == DELETE:
            if is_control:
                stats.markers_removed += 1
            else:
                stats.deleted_batch_records += batch.count or 0
                stats.aborted_records_removed += batch.count or 0
            return
        retained, write_original, tombstones, max_offset = self._retained_records(
            batch, discard_records, can_discard, retain_legacy_deletes)
        if retained:
            need_horizon = batch.magic >= 2 and (tombstones or (can_discard and is_control)) and horizon is None
            self._write_retained(batch, result, retained, write_original, need_horizon, horizon, max_offset)
        elif retention == RETAIN_EMPTY:
            self._write_empty(batch, result)
        elif is_control:
            stats.markers_removed += 1

    def _retained_records(self, batch: Batch, discard_records: bool, can_discard: bool,
                          retain_legacy_deletes: bool) -> Tuple[list, bool, bool, int]:
        """The records kept, whether the batch can be written as it is, whether a kept record is a
        tombstone, and the highest kept offset."""
        stats = self.stats
        is_control = batch.is_control
        retained = []
        write_original = True
        tombstones = False
        max_offset = -1
        for record in batch.records():
            stats.messages_read += 1
            if self._retain(batch, record, discard_records, is_control, retain_legacy_deletes):
                if record.magic != batch.magic:
                    write_original = False  # KAFKA-4298: recopy to fix the inner magic
                if record.offset > max_offset:
                    max_offset = record.offset
                retained.append(record)
                if not record.has_value:
                    tombstones = True
            else:
                write_original = False
                if not is_control:
                    if can_discard:
                        stats.aborted_records_removed += 1
                    elif not record.has_value:
                        stats.tombstones_removed += 1
        return retained, write_original, tombstones, max_offset

    def _write_retained(self, batch: Batch, result: _ChunkResult, retained: list, write_original: bool,
                        need_horizon: bool, horizon: Optional[int], max_offset: int) -> None:
        """The batch as it is, or rebuilt around its kept records (a new delete horizon when needed)."""
        first = batch.base_offset if batch.magic >= 2 else retained[0].offset
        if write_original and not need_horizon:
            result.retained(batch.buffer, first, batch.max_timestamp, batch.last_offset, batch.last_offset)
        else:
            new_horizon = self.now + self.delete_retention_ms if need_horizon else horizon
            data, max_ts, shallow = _rebuild(batch, retained, new_horizon)
            result.retained(data, first, max_ts, shallow, max_offset)
            self.stats.batches_rebuilt += 1
        self.stats.messages_written += len(retained)
        self.stats.batches_written += 1

    def _write_empty(self, batch: Batch, result: _ChunkResult) -> None:
        """An emptied batch that keeps its place (its producer's last, or the round's last)."""
        if batch.magic < 2:
            raise UsageError("Empty batches are only supported for magic v2 and above",
                             path=batch.path, position=batch.position)
        data = build_v2_batch(
            [], base_offset=batch.base_offset, last_offset_delta=batch.last_offset_delta,
            timestamp_type=batch.timestamp_type, max_timestamp=batch.max_timestamp,
            partition_leader_epoch=batch.partition_leader_epoch, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional, is_control=batch.is_control)
        result.retained(data, batch.base_offset, batch.max_timestamp, batch.last_offset, batch.last_offset)
        self.stats.batches_written += 1
        self.stats.empty_batches_written += 1

    def _last_of_producer(self, batch: Batch) -> bool:
        """isBatchLastRecordOfProducer."""
        last = self.last_records.get(batch.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset is not None:
            return batch.last_offset == last_data_offset
        return batch.is_control and batch.producer_epoch == epoch

    def _retain(self, batch: Batch, record, discard_records: bool, is_control: bool,
                retain_legacy_deletes: bool) -> bool:
        """The RecordFilter's shouldRetainRecord and Cleaner.shouldRetainRecord."""
        if discard_records:
            return False
        if is_control:
            return True
        if record.offset > self.map.latest_offset:
            return True
        if not record.has_key:
            self.stats.invalid_messages_read += 1
            return False
        if record.offset < self.map.get(record.key_view()):
            return False
        if record.has_value:
            return True
        if batch.magic >= 2:
            horizon = batch.delete_horizon_ms
            return horizon is None or self.now < horizon
        return retain_legacy_deletes


def _spec(record) -> RecordSpec:
    if record.is_legacy:
        return RecordSpec(record.offset, record.timestamp, record.key, record.value)
    headers = list(zip(record.header_key_bytes(), (h.value for h in record.headers)))
    return RecordSpec(record.offset, record.timestamp, record.key, record.value, headers)


def _rebuild(batch: Batch, retained: list, horizon: Optional[int]) -> Tuple[bytes, int, int]:
    """MemoryRecords.buildRetainedRecordsInto: (bytes, max timestamp, shallow offset of it)."""
    specs = [_spec(r) for r in retained]
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    if batch.magic >= 2:
        # Same range (overrideLastOffset keeps the last sequence), codec, producer fields, flags.
        data = build_v2_batch(
            specs, base_offset=batch.base_offset, last_offset_delta=batch.last_offset_delta,
            codec=batch.compression, timestamp_type=batch.timestamp_type,
            log_append_time=batch.max_timestamp if log_append else None,
            partition_leader_epoch=batch.partition_leader_epoch, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional, is_control=batch.is_control, delete_horizon_ms=horizon)
        max_ts = batch.max_timestamp if log_append else max((s.timestamp for s in specs), default=-1)
        return data, max_ts, batch.last_offset  # MemoryRecordsBuilder.info: v2 -> the last offset
    # v0/v1: the wrapper covers the retained records only.
    data = build_legacy_batch(specs, magic=batch.magic, codec=batch.compression,
                              timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
                              log_append_time=batch.max_timestamp if log_append else None)
    last = specs[-1].offset
    if batch.magic == 0:
        return data, -1, last
    if log_append:
        return data, batch.max_timestamp, last if batch.compression else specs[0].offset
    max_ts = max(s.timestamp for s in specs)
    if batch.compression:
        return data, max_ts, last
    return data, max_ts, next(s.offset for s in specs if s.timestamp == max_ts)


# --------------------------------------------------------------------------- grouping


def group_segments_by_size(segments: List[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> List[List[LogSegment]]:
    """Cleaner.groupSegmentsBySize."""
    groups: List[List[LogSegment]] = []
    i = 0
    n = len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].index_bytes
        time_size = segments[i].timeindex_bytes
        i += 1
        while i < n:
            nxt = segments[i]
            last_estimate = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            if not (log_size + nxt.size <= max_size and index_size + nxt.index_bytes <= max_index_size
                    and time_size + nxt.timeindex_bytes <= max_index_size
                    and (nxt.size == 0 or last_estimate - group[0].base_offset <= 0x7FFFFFFF)):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.index_bytes
            time_size += nxt.timeindex_bytes
            i += 1
        groups.append(group)
    return groups


# --------------------------------------------------------------------------- a whole pass


class PassResult:
    """What one cleaner pass did (or, in a dry run, would do) to one partition."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.plan: Optional[CleaningPlan] = None
        self.end_offset: Optional[int] = None
        self.stats = CleanerStats()
        self.cleaned = False
        self.groups: List[List[int]] = []
        self.new_segments: List[int] = []
        self.bytes_before = 0
        self.bytes_after = 0
        self.removed_snapshots: List[str] = []
        self.leftovers: Optional[dict] = None
        self.notes: List[str] = []

    def to_dict(self) -> dict:
        out = {"partition": self.partition.path, "topic": self.partition.topic,
               "partition_id": self.partition.partition, "cleaned": self.cleaned, "end_offset": self.end_offset,
               "groups": self.groups, "new_segments": self.new_segments, "bytes_before": self.bytes_before,
               "bytes_after": self.bytes_after, "records_removed": self.stats.records_removed,
               "stats": self.stats.to_dict(), "removed_snapshots": self.removed_snapshots, "notes": self.notes}
        if self.plan is not None:
            out.update(self.plan.to_dict())
        if self.leftovers is not None:
            out["leftovers"] = self.leftovers
        return out


def remove_stray_snapshots(partition: Partition, *, dry_run: bool = False) -> List[str]:
    """ProducerStateManager.removeStraySnapshots (run by LogLoader): snapshots at offsets that are
    no segment's base offset are deleted, except the newest one when it is above every segment base."""
    bases = {s.base_offset for s in partition.segments}
    if not bases:
        return []
    stray = [o for o in sorted(partition.snapshots) if o not in bases]
    doomed = stray[:-1]
    if stray and stray[-1] < max(bases):
        doomed.append(stray[-1])
    paths = [partition.snapshots[o] for o in doomed]
    if not dry_run and paths:
        for path in paths:
            fileops.unlink(path)
        fileops.fsync_dir(partition.path)
    return paths


# --------------------------------------------------------------------------- the pass intent


def _drop_intent(partition: Partition) -> None:
    fileops.unlink(intent_path(partition.path))
    fileops.fsync_dir(partition.path)


def _finish_interrupted_pass(partition: Partition, state: DataDirState, result: PassResult, *,
                             now: int, config: TopicConfig, settings: CleanerSettings,
                             progress: Optional[Callable[[int], None]]) -> bool:
    """Act on a pass intent left by a run that stopped (a crash, an error) while swapping groups in,
    after resolve_leftovers has finished or rolled back the swap. True when this invocation's pass
    is over (the interrupted one was finished); False to go on with a normal pass."""
    key = (partition.topic, partition.partition)
    checkpointed = read_cleaner_checkpoint(partition.data_dir).get(key)
    try:
        intent = PassIntent.load(partition.path)
        if intent is None:
            return False
        data = intent.data
        stale = None
        if [data["topic"], data["partition"]] != [partition.topic, partition.partition]:
            stale = "it names another partition"
        elif checkpointed not in (data["checkpointed"], intent.end_offset):
            stale = f"cleaner-offset-checkpoint moved since ({checkpointed})"
        if stale is None:
            completed = intent.swap_completed(partition.path)
            done = data["current"] + 1 if completed else data["current"]
            if done < len(intent.groups) and checkpointed != data["checkpointed"]:
                stale = f"cleaner-offset-checkpoint moved since ({checkpointed})"
            bases = {s.base_offset: s for s in partition.segments}
            for group in intent.groups[done:]:
                for base, size in group:
                    seg = bases.get(base)
                    if stale is None and (seg is None or os.path.getsize(seg.log) != size):
                        stale = f"segment {base} changed since"
            leftovers: List[str] = []
            if stale is None and completed:
                leftovers, stale = intent.swap_leftovers(partition.path)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        result.notes.append(f"{INTENT_FILE} is unreadable: removed, cleaning normally")
        _drop_intent(partition)
        return False
    if stale is not None:
        result.notes.append(f"{INTENT_FILE} is stale ({stale}): removed, cleaning normally")
        _drop_intent(partition)
        return False
    if leftovers:
        for path in leftovers:
            fileops.unlink(path)
        fileops.fsync_dir(partition.path)
        result.notes.append(f"finished the interrupted swap of group {data['current'] + 1}: removed "
                            + ", ".join(os.path.basename(p) for p in leftovers))
        partition = Partition(partition.path)
        result.partition = partition
    if done == len(intent.groups):
        # Every group is swapped in: the pass is done but for its checkpoint. Cleaning the range
        # again would be a second pass (delete horizons, transaction markers one pass further).
        result.notes.append(f"finished the pass interrupted after its swap: cleaner-offset-checkpoint := "
                            f"{intent.end_offset}")
        result.end_offset = intent.end_offset
        if checkpointed != intent.end_offset:
            update_cleaner_checkpoint(partition.data_dir, key, intent.end_offset)
        _drop_intent(partition)
        return True
    if done == 0:
        # Nothing of it took effect: the input is as it was, a normal pass does the same again.
        _drop_intent(partition)
        return False
    return _resume_pass(partition, state, intent, done, result, config=config, settings=settings,
                        progress=progress)


def _resume_pass(partition: Partition, state: DataDirState, intent: PassIntent, done: int, result: PassResult, *,
                 config: TopicConfig, settings: CleanerSettings,
                 progress: Optional[Callable[[int], None]]) -> bool:
    """Clean the groups an interrupted pass had not swapped in, as that pass would have.

    The offset map is rebuilt over the same range: the groups already swapped in kept, for every key,
    the record the map pointed at (or lost it with all its older records, past a tombstone's
    horizon), so for the records still to clean every lookup gives what the first map gave. The
    transaction state and the rest come from the intent.
    """
    data = intent.data
    plan = result.plan = CleaningPlan()
    plan.checkpointed = data["checkpointed"]
    plan.first_dirty_offset = data["firstDirtyOffset"]
    plan.uncleanable_offset = plan.first_uncleanable_offset = data["firstUncleanableOffset"]
    plan.eligible = True
    plan.reason = f"resuming a pass interrupted after {done} of {len(intent.groups)} groups"
    view = UnifiedLog(partition, state)
    result.bytes_before = result.bytes_after = sum(s.size for s in view.segments)
    stats = result.stats
    offset_map = OffsetMap(settings.dedupe_buffer_bytes, settings.load_factor)
    stop = data["mapStopOffset"]
    if build_offset_map(view, data["firstDirtyOffset"], data["firstUncleanableOffset"], offset_map, stats,
                        settings, config.get("max.message.bytes"),
                        limit=LONG_MAX if stop is None else stop) is not None:
        result.notes.append(f"the rebuilt offset map does not fit: {INTENT_FILE} removed, cleaning normally")
        result.stats = CleanerStats()
        result.plan = None
        _drop_intent(partition)
        return False
    offset_map.update_latest_offset(intent.end_offset - 1)
    stats.map_full = stop is not None
    result.end_offset = intent.end_offset
    group_state = data["txnBefore"] if done == data["current"] else data["txnAfter"]
    txns = CleanedTransactionMetadata.from_json(group_state)
    last_records = {pid: (last, epoch) for pid, last, epoch in data["lastRecords"]}
    # The pass's own clock: its delete horizons are the ones an uninterrupted run would have set.
    cleaner = SegmentCleaner(offset_map, config, data["now"], txns, last_records, data["firstUncleanableOffset"],
                             stats, settings)
    infos = {s.base_offset: s for s in view.segments}
    # The groups already swapped in are merged away: only the ones still to clean are looked up.
    groups = [[infos[base] for base, _size in group] if number >= done else []
              for number, group in enumerate(intent.groups)]
    _clean_groups(partition, view, groups, done, cleaner, txns, intent, result, config=config,
                  legacy_horizon=data["legacyHorizon"], dry_run=False, progress=progress)
    stats.buffer_utilization = offset_map.utilization
    return True


# --------------------------------------------------------------------------- one pass


def _resolve_leftovers(partition: Partition, state: DataDirState, result: PassResult, *, now: int,
                       config: TopicConfig, settings: CleanerSettings, dry_run: bool,
                       progress: Optional[Callable[[int], None]]) -> Optional[Partition]:
    """What a pass does first: an interrupted swap resolved, stray snapshots removed, an interrupted
    pass's intent acted on. The partition as it is now, or None when this invocation's pass is over
    (the interrupted one was finished)."""
    from kstore_cli.log import swap

    report = swap.resolve_leftovers(partition.path, dry_run=dry_run)
    if report.outcome is not None:
        result.leftovers = report.to_dict()
        if not dry_run:
            partition = Partition(partition.path)
            result.partition = partition
        else:
            result.notes.append(f"an interrupted replacement would be {report.outcome} first")
    stray = remove_stray_snapshots(partition, dry_run=dry_run)
    if stray:
        result.removed_snapshots += stray
        if not dry_run:
            partition = Partition(partition.path)
            result.partition = partition
    if os.path.exists(intent_path(partition.path)):
        if dry_run:
            result.notes.append(f"{INTENT_FILE}: an interrupted pass would be finished first")
        elif _finish_interrupted_pass(partition, state, result, now=now, config=config, settings=settings,
                                      progress=progress):
            return None
        else:
            partition = Partition(partition.path)
            result.partition = partition
    return partition


def compact_partition(partition: Partition, config: TopicConfig, state: DataDirState, *, now: int,
                      settings: CleanerSettings, force_clean: bool = False, dry_run: bool = False,
                      progress: Optional[Callable[[int], None]] = None) -> PassResult:
    """One cleaner pass over one partition directory (the caller holds the data dir's lock).

    Not eligible by the ratio / lag rules and not `force_clean`: nothing is written (a checkpoint
    reset is still written, as the broker does when it evaluates the log). `dry_run` writes
    nothing at all and reports what a pass would do. A pass intent left by an interrupted run is
    acted on first (see the module docstring): that pass is finished instead of a new one.
    """
    result = PassResult(partition)
    resolved = _resolve_leftovers(partition, state, result, now=now, config=config, settings=settings,
                                  dry_run=dry_run, progress=progress)
    if resolved is None:
        return result
    partition = resolved
    if not partition.segments:
        result.notes.append("no segments")
        return result
    view = UnifiedLog(partition, state)
    result.bytes_before = result.bytes_after = sum(s.size for s in view.segments)
    producers = ProducerStateManager.load(partition, log_start_offset=view.log_start_offset,
                                          log_end_offset=view.log_end_offset)
    producers.remove_expired_producers(now, settings.producer_id_expiration_ms)
    key = (partition.topic, partition.partition)
    checkpointed = read_cleaner_checkpoint(partition.data_dir).get(key)
    plan = plan_cleaning(view, config, producers, now=now, checkpointed=checkpointed)
    result.plan = plan
    if plan.checkpoint_reset:
        result.notes.append(f"cleaner-offset-checkpoint {checkpointed} is outside [log start offset "
                            f"{view.log_start_offset}, log end offset {view.log_end_offset}]: reset to "
                            f"{plan.first_dirty_offset}")
        if not dry_run:
            update_cleaner_checkpoint(partition.data_dir, key, plan.first_dirty_offset)
            checkpointed = plan.first_dirty_offset
    if not plan.eligible and not force_clean:
        return result
    if plan.first_uncleanable_offset <= plan.first_dirty_offset or plan.cleanable_bytes == 0:
        result.notes.append("nothing to clean: the dirty range is empty")
        return result

    stats = result.stats
    try:
        offset_map = OffsetMap(settings.dedupe_buffer_bytes, settings.load_factor)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    max_message_bytes = config.get("max.message.bytes")
    try:
        # Every batch the pass reads passes ensureValid first: the map checks the dirty range as it reads it.
        refuse_damaged_batches(view.log_segments(0, plan.first_dirty_offset))
        map_stop = build_offset_map(view, plan.first_dirty_offset, plan.first_uncleanable_offset, offset_map, stats,
                                    settings, max_message_bytes)
        end_offset = offset_map.latest_offset + 1
        if map_stop is not None:
            refuse_damaged_batches(view.log_segments(map_stop, end_offset))  # the map's last segment, past its stop
    except (CorruptRecordError, InvalidRecordError) as exc:
        raise _not_cleaned(exc) from None
    result.end_offset = end_offset
    if stats.map_full:
        result.notes.append(f"the offset map filled up ({offset_map.size} keys, dedupe buffer "
                            f"{settings.dedupe_buffer_bytes} bytes): this pass ends at {end_offset}; run again "
                            "to continue")
    clean_section = view.log_segments(0, plan.first_dirty_offset)
    legacy_horizon = clean_section[-1].mtime_ms - config.get("delete.retention.ms") if clean_section else 0
    txns = CleanedTransactionMetadata()
    last_records = producers.last_records()
    cleaner = SegmentCleaner(offset_map, config, now, txns, last_records, plan.first_uncleanable_offset, stats,
                             settings)
    groups = group_segments_by_size(view.log_segments(0, end_offset), config.get("segment.bytes"),
                                    config.get("segment.index.bytes"), plan.first_uncleanable_offset)
    intent = PassIntent({
        "version": INTENT_VERSION, "topic": partition.topic, "partition": partition.partition,
        "checkpointed": checkpointed, "firstDirtyOffset": plan.first_dirty_offset,
        "firstUncleanableOffset": plan.first_uncleanable_offset, "endOffset": end_offset, "mapStopOffset": map_stop,
        "legacyHorizon": legacy_horizon, "now": now,
        "lastRecords": sorted([pid, last, epoch] for pid, (last, epoch) in last_records.items()),
        "groups": [[[s.base_offset, s.size] for s in group] for group in groups]})
    _clean_groups(partition, view, groups, 0, cleaner, txns, intent, result, config=config,
                  legacy_horizon=legacy_horizon, dry_run=dry_run, progress=progress)
    stats.buffer_utilization = offset_map.utilization
    return result


def refuse_damaged_batches(segments: List[LogSegment]) -> None:
    """Every batch a pass reads must pass Kafka's ensureValid (size, CRC), or the partition is not cleaned.
    Kafka's Cleaner does not check: it would drop a damaged batch's unreadable records and give a rebuilt
    batch a fresh, valid CRC, laundering the damage. Raises CorruptRecordError (file and byte); and
    InvalidRecordError for offsets Kafka rejects (``Batch.ensure_valid_offsets``)."""
    for seg in segments:
        for batch in read_batches(seg.log, check_crc=True):
            batch.ensure_valid()
            batch.ensure_valid_offsets()


def _not_cleaned(exc: CorruptDataError) -> CorruptDataError:
    return type(exc)(
        f"{exc.message}; not cleaned: a pass would rewrite this batch with a fresh CRC (Kafka's Cleaner does not "
        "check); repair the partition first (kstore salvage, or kstore recover)", path=exc.path, position=exc.position)


def _clean_groups(partition: Partition, view: UnifiedLog, groups: List[List[LogSegment]], first: int,
                  cleaner: SegmentCleaner, txns: CleanedTransactionMetadata, intent: PassIntent, result: PassResult,
                  *, config: TopicConfig, legacy_horizon: int, dry_run: bool,
                  progress: Optional[Callable[[int], None]]) -> None:
    """Clean groups[first:] one by one, each written as ``.cleaned``, the intent saved, then swapped
    in (Kafka's order, one group's worth of extra disk at a time); then the checkpoint, then the
    intent removed."""
    from kstore_cli.log import swap

    index_interval = config.get("index.interval.bytes")
    delta = 0
    for number in range(first, len(groups)):
        group = groups[number]
        result.groups.append([s.base_offset for s in group])
        txn_before = txns.to_json()
        writer = PartitionWriter(None if dry_run else partition.path, index_interval_bytes=index_interval)
        try:
            last_mtime = group[-1].mtime_ms
            # LogSegment.setLastModified: the mtime of the group's last source segment.
            writer.start_segment(group[0].base_offset, mtime=(last_mtime + 0.5) / 1000.0)
            txns.cleaned_index = writer.add_aborted_txn
            for i, seg in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else seg.next_offset
                txns.add_aborted_transactions(view.collect_aborted_transactions(seg.base_offset, upper))
                cleaner.clean_into(seg, writer, retain_legacy_deletes=seg.mtime_ms > legacy_horizon)
                if progress is not None:
                    progress(seg.size)
            written = writer.close()
        except BaseException:
            if not dry_run:
                writer.abort()
            raise
        new = written[0]
        delta += new.log_size - sum(s.size for s in group)
        result.new_segments.append(new.base_offset)
        if dry_run:
            continue
        extra: List[str] = []
        try:
            # The snapshot at the group's base offset stays (UnifiedLog.replaceSegments keeps it), but
            # a broker or a rerun completing an interrupted swap deletes every file in the swapped
            # range: it goes through the swap with the segment, as convert-format's do.
            kept = partition.snapshots.get(new.base_offset)
            if kept is not None and new.next_offset > new.base_offset:
                swap.stage_extra(kept, extra)
            intent.data.update(current=number, txnBefore=txn_before, txnAfter=txns.to_json(), newFiles={
                os.path.basename(p)[len(names.filename_prefix(new.base_offset)):-len(names.CLEANED_SUFFIX)]:
                    file_identity(p) for p in new.files})
            intent.save(partition.path)
            swap.replace_segments(partition.path, [new.base_offset], [s.segment for s in group], extra=extra)
        except KstoreError:
            # Stopped before the swap began (a full disk, a permission error): remove this group's
            # new files, and the intent if nothing of the pass took effect, leaving the partition as
            # it was (or as the intent of the groups swapped in says). Once a .swap exists the state
            # is a crash's, which the next run resolves; deleting .cleaned files would then turn a
            # rollback into a partial completion.
            # (The swap's first rename is .cleaned -> .swap: every .cleaned still there, it has not begun.)
            if all(os.path.exists(p) for p in extra + new.files):
                for path in extra:
                    fileops.unlink(path)
                writer.abort()
                if number == 0 and os.path.exists(intent_path(partition.path)):
                    _drop_intent(partition)
            raise
        # UnifiedLog.replaceSegments: snapshots of replaced segments with another base offset go.
        doomed = [partition.snapshots[s.base_offset] for s in group[1:] if s.base_offset in partition.snapshots]
        for path in doomed:
            fileops.unlink(path)
        if doomed:
            fileops.fsync_dir(partition.path)
        result.removed_snapshots += doomed
    result.bytes_after = result.bytes_before + delta
    result.cleaned = True
    if not dry_run:
        key = (partition.topic, partition.partition)
        update_cleaner_checkpoint(partition.data_dir, key, intent.end_offset)  # doneCleaning, after every swap
        _drop_intent(partition)
