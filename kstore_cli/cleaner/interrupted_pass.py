"""Finishing a pass that a crash or an error interrupted while its groups were being swapped in.

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
from typing import Callable, List, Optional, Tuple

from kstore_cli.log import fileops
from kstore_cli.log.config import CleanerSettings, TopicConfig
from kstore_cli.log.logdir import Partition
from kstore_cli.log.unified_log import DataDirState, UnifiedLog
from kstore_cli.record.record_filter import OffsetMap
from kstore_cli.cleaner.clean_segments import PassResult, SegmentCleaner, clean_groups
from kstore_cli.cleaner.cleaned_transaction_metadata import CleanedTransactionMetadata
from kstore_cli.cleaner.cleaner_stats import CleanerStats
from kstore_cli.cleaner.compact_intent import INTENT_FILE, PassIntent, drop_intent
from kstore_cli.cleaner.log_cleaner_manager import CleaningPlan, read_cleaner_checkpoint, update_cleaner_checkpoint
from kstore_cli.cleaner.offset_map_builder import LONG_MAX, build_offset_map

def finish_interrupted_pass(partition: Partition, state: DataDirState, result: PassResult, *,
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
        stale, done, leftovers = _check_intent(partition, intent, checkpointed)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        result.notes.append(f"{INTENT_FILE} is unreadable: removed, cleaning normally")
        drop_intent(partition.path)
        return False
    if stale is not None:
        result.notes.append(f"{INTENT_FILE} is stale ({stale}): removed, cleaning normally")
        drop_intent(partition.path)
        return False
    if leftovers:
        for path in leftovers:
            fileops.unlink(path)
        fileops.fsync_dir(partition.path)
        result.notes.append(f"finished the interrupted swap of group {intent.data['current'] + 1}: removed "
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
        drop_intent(partition.path)
        return True
    if done == 0:
        # Nothing of it took effect: the input is as it was, a normal pass does the same again.
        drop_intent(partition.path)
        return False
    return _resume_pass(partition, state, intent, done, result, config=config, settings=settings,
                        progress=progress)


def _check_intent(partition: Partition, intent: PassIntent, checkpointed: Optional[int]
                  ) -> Tuple[Optional[str], int, List[str]]:
    """Why the intent no longer fits the directory (None when it does), how many of its groups are
    swapped in, and the files of the current group's old segments its completed swap left behind."""
    data = intent.data
    if [data["topic"], data["partition"]] != [partition.topic, partition.partition]:
        return "it names another partition", 0, []
    if checkpointed not in (data["checkpointed"], intent.end_offset):
        return f"cleaner-offset-checkpoint moved since ({checkpointed})", 0, []
    completed = intent.swap_completed(partition.path)
    done = data["current"] + 1 if completed else data["current"]
    stale = None
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
    return stale, done, leftovers


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
        drop_intent(partition.path)
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
    clean_groups(partition, view, groups, done, cleaner, txns, intent, result, config=config,
                 legacy_horizon=data["legacyHorizon"], dry_run=False, progress=progress)
    stats.buffer_utilization = offset_map.utilization
    return True

