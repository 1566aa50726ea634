"""Cleaner.groupSegmentsBySize and Cleaner.cleanSegments: each group of source segments filtered as
MemoryRecords.filterTo does (SegmentCleaner, chunk by chunk) into one ``.cleaned`` segment, then swapped
in (see cleaner.py for the pass, interrupted_pass.py for the intent written before each swap)."""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.log import fileops, names
from kstore_cli.log.config import CleanerSettings, TopicConfig
from kstore_cli.log.log_segment import LogSegment
from kstore_cli.log.logdir import Partition
from kstore_cli.log.unified_log import UnifiedLog
from kstore_cli.log.writer import PartitionWriter, WrittenSegment
from kstore_cli.record import record_filter
from kstore_cli.record.batch import CREATE_TIME, LOG_APPEND_TIME, Batch
from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_v2_batch
from kstore_cli.record.reader import iterate_source, map_file
from kstore_cli.record.record_filter import OffsetMap
from kstore_cli.cleaner.cleaned_transaction_metadata import CleanedTransactionMetadata
from kstore_cli.cleaner.cleaner_stats import CleanerStats
from kstore_cli.cleaner.compact_intent import PassIntent, drop_intent, file_identity, intent_path
from kstore_cli.cleaner.log_cleaner_manager import CleaningPlan, update_cleaner_checkpoint
from kstore_cli.cleaner.offset_map_builder import read_chunks
from kstore_cli.log import swap

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
        chunks = read_chunks(buf, 0, self.settings, self.max_message_bytes, seg.log)
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


def clean_groups(partition: Partition, view: UnifiedLog, groups: List[List[LogSegment]], first: int,
                 cleaner: SegmentCleaner, txns: CleanedTransactionMetadata, intent: PassIntent, result: PassResult,
                 *, config: TopicConfig, legacy_horizon: int, dry_run: bool,
                 progress: Optional[Callable[[int], None]]) -> None:
    """Clean groups[first:] one by one, each written as ``.cleaned``, the intent saved, then swapped
    in (Kafka's order, one group's worth of extra disk at a time); then the checkpoint, then the
    intent removed."""
    index_interval = config.get("index.interval.bytes")
    delta = 0
    for number in range(first, len(groups)):
        group = groups[number]
        result.groups.append([s.base_offset for s in group])
        txn_before = txns.to_json()
        writer = PartitionWriter(None if dry_run else partition.path, index_interval_bytes=index_interval)
        new = clean_segments(view, group, writer, cleaner, txns, legacy_horizon=legacy_horizon, dry_run=dry_run,
                             progress=progress)
        delta += new.log_size - sum(s.size for s in group)
        result.new_segments.append(new.base_offset)
        if dry_run:
            continue
        intent.data.update(current=number, txnBefore=txn_before, txnAfter=txns.to_json())
        _swap_in(partition, group, new, writer, intent, first_group=number == 0)
        result.removed_snapshots += _remove_replaced_snapshots(partition, group)
    result.bytes_after = result.bytes_before + delta
    result.cleaned = True
    if not dry_run:
        key = (partition.topic, partition.partition)
        update_cleaner_checkpoint(partition.data_dir, key, intent.end_offset)  # doneCleaning, after every swap
        drop_intent(partition.path)


def clean_segments(view: UnifiedLog, group: List[LogSegment], writer: PartitionWriter, cleaner: SegmentCleaner,
                   txns: CleanedTransactionMetadata, *, legacy_horizon: int, dry_run: bool,
                   progress: Optional[Callable[[int], None]]) -> WrittenSegment:
    """Cleaner.cleanSegments: one group of source segments filtered into one new ``.cleaned`` segment
    (removed again when this fails)."""
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
    return written[0]


def _swap_in(partition: Partition, group: List[LogSegment], new: WrittenSegment, writer: PartitionWriter,
             intent: PassIntent, *, first_group: bool) -> None:
    """The intent saved with the identity of the group's new files, then the swap (LocalLog.replaceSegments)."""
    extra: List[str] = []
    try:
        # The snapshot at the group's base offset stays (UnifiedLog.replaceSegments keeps it), but
        # a broker or a rerun completing an interrupted swap deletes every file in the swapped
        # range: it goes through the swap with the segment, as convert-format's do.
        kept = partition.snapshots.get(new.base_offset)
        if kept is not None and new.next_offset > new.base_offset:
            swap.stage_extra(kept, extra)
        intent.data.update(newFiles={
            os.path.basename(p)[len(names.filename_prefix(new.base_offset)):-len(names.CLEANED_SUFFIX)]:
                file_identity(p) for p in new.files})
        intent.save(partition.path)
        swap.replace_segments(partition.path, [new.base_offset], group, extra=extra)
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
            if first_group and os.path.exists(intent_path(partition.path)):
                drop_intent(partition.path)
        raise


def _remove_replaced_snapshots(partition: Partition, group: List[LogSegment]) -> List[str]:
    """UnifiedLog.replaceSegments: snapshots of replaced segments with another base offset go."""
    doomed = [partition.snapshots[s.base_offset] for s in group[1:] if s.base_offset in partition.snapshots]
    for path in doomed:
        fileops.unlink(path)
    if doomed:
        fileops.fsync_dir(partition.path)
    return doomed
