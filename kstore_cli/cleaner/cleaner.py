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

Crash safety (the pass intent written before each group's swap, and how a rerun finishes an
interrupted pass): interrupted_pass.py. Kafka's split: offset_map_builder (buildOffsetMap),
clean_segments (groupSegmentsBySize, cleanSegments), log_cleaner_manager (the cleanable range,
the checkpoint).
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional

from kstore_cli.errors import CorruptDataError, CorruptRecordError, InvalidRecordError, UsageError
from kstore_cli.log import fileops, swap
from kstore_cli.log.config import CleanerSettings, TopicConfig
from kstore_cli.log.log_segment import LogSegment
from kstore_cli.log.logdir import Partition
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.log.unified_log import DataDirState, UnifiedLog
from kstore_cli.record.reader import read_batches
from kstore_cli.record.record_filter import OffsetMap
from kstore_cli.cleaner.cleaned_transaction_metadata import CleanedTransactionMetadata
from kstore_cli.cleaner.clean_segments import PassResult, SegmentCleaner, clean_groups, group_segments_by_size
from kstore_cli.cleaner.compact_intent import INTENT_FILE, INTENT_VERSION, PassIntent, intent_path
from kstore_cli.cleaner.interrupted_pass import finish_interrupted_pass
from kstore_cli.cleaner.log_cleaner_manager import (
    CleaningPlan,
    plan_cleaning,
    read_cleaner_checkpoint,
    update_cleaner_checkpoint,
)
from kstore_cli.cleaner.offset_map_builder import build_offset_map


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



def _resolve_leftovers(partition: Partition, state: DataDirState, result: PassResult, *, now: int,
                       config: TopicConfig, settings: CleanerSettings, dry_run: bool,
                       progress: Optional[Callable[[int], None]]) -> Optional[Partition]:
    """What a pass does first: an interrupted swap resolved, stray snapshots removed, an interrupted
    pass's intent acted on. The partition as it is now, or None when this invocation's pass is over
    (the interrupted one was finished)."""
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
        elif finish_interrupted_pass(partition, state, result, now=now, config=config, settings=settings,
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
    plan = result.plan = _plan(partition, view, config, producers, result, now=now, dry_run=dry_run)
    if not plan.eligible and not force_clean:
        return result
    if plan.first_uncleanable_offset <= plan.first_dirty_offset or plan.cleanable_bytes == 0:
        result.notes.append("nothing to clean: the dirty range is empty")
        return result
    try:
        offset_map = OffsetMap(settings.dedupe_buffer_bytes, settings.load_factor)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    map_stop = _map_dirty_range(view, plan, offset_map, result, config=config, settings=settings)
    clean_section = view.log_segments(0, plan.first_dirty_offset)
    legacy_horizon = clean_section[-1].mtime_ms - config.get("delete.retention.ms") if clean_section else 0
    txns = CleanedTransactionMetadata()
    last_records = producers.last_records()
    cleaner = SegmentCleaner(offset_map, config, now, txns, last_records, plan.first_uncleanable_offset,
                             result.stats, settings)
    groups = group_segments_by_size(view.log_segments(0, result.end_offset), config.get("segment.bytes"),
                                    config.get("segment.index.bytes"), plan.first_uncleanable_offset)
    intent = PassIntent({
        "version": INTENT_VERSION, "topic": partition.topic, "partition": partition.partition,
        "checkpointed": plan.checkpointed, "firstDirtyOffset": plan.first_dirty_offset,
        "firstUncleanableOffset": plan.first_uncleanable_offset, "endOffset": result.end_offset,
        "mapStopOffset": map_stop, "legacyHorizon": legacy_horizon, "now": now,
        "lastRecords": sorted([pid, last, epoch] for pid, (last, epoch) in last_records.items()),
        "groups": [[[s.base_offset, s.size] for s in group] for group in groups]})
    clean_groups(partition, view, groups, 0, cleaner, txns, intent, result, config=config,
                 legacy_horizon=legacy_horizon, dry_run=dry_run, progress=progress)
    result.stats.buffer_utilization = offset_map.utilization
    return result


def _plan(partition: Partition, view: UnifiedLog, config: TopicConfig, producers: ProducerStateManager,
          result: PassResult, *, now: int, dry_run: bool) -> CleaningPlan:
    """LogCleanerManager's plan from cleaner-offset-checkpoint; a checkpoint outside the log is reset
    (written unless `dry_run`), and the plan then starts from the reset entry."""
    key = (partition.topic, partition.partition)
    checkpointed = read_cleaner_checkpoint(partition.data_dir).get(key)
    plan = plan_cleaning(view, config, producers, now=now, checkpointed=checkpointed)
    if plan.checkpoint_reset:
        result.notes.append(f"cleaner-offset-checkpoint {checkpointed} is outside [log start offset "
                            f"{view.log_start_offset}, log end offset {view.log_end_offset}]: reset to "
                            f"{plan.first_dirty_offset}")
        if not dry_run:
            update_cleaner_checkpoint(partition.data_dir, key, plan.first_dirty_offset)
            plan.checkpointed = plan.first_dirty_offset
    return plan


def _map_dirty_range(view: UnifiedLog, plan: CleaningPlan, offset_map: OffsetMap, result: PassResult, *,
                     config: TopicConfig, settings: CleanerSettings) -> Optional[int]:
    """Cleaner.buildOffsetMap over the dirty range, every batch the pass reads checked first; sets the
    pass's end offset. Returns where a full map stopped, else None."""
    try:
        # Every batch the pass reads passes ensureValid first: the map checks the dirty range as it reads it.
        refuse_damaged_batches(view.log_segments(0, plan.first_dirty_offset))
        map_stop = build_offset_map(view, plan.first_dirty_offset, plan.first_uncleanable_offset, offset_map,
                                    result.stats, settings, config.get("max.message.bytes"))
        end_offset = offset_map.latest_offset + 1
        if map_stop is not None:
            refuse_damaged_batches(view.log_segments(map_stop, end_offset))  # the map's last segment, past its stop
    except (CorruptRecordError, InvalidRecordError) as exc:
        raise _not_cleaned(exc) from None
    result.end_offset = end_offset
    if result.stats.map_full:
        result.notes.append(f"the offset map filled up ({offset_map.size} keys, dedupe buffer "
                            f"{settings.dedupe_buffer_bytes} bytes): this pass ends at {end_offset}; run again "
                            "to continue")
    return map_stop


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

