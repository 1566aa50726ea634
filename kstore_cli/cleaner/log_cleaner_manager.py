"""What LogCleanerManager decides before a pass: the cleanable range (firstDirtyOffset from
cleaner-offset-checkpoint, firstUncleanableOffset), the dirty ratio and max.compaction.lag.ms, and the
checkpoint written after it (see cleaner.py for the pass)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.log import fileops
from kstore_cli.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, format_offset_checkpoint, read_offset_checkpoint
from kstore_cli.log.config import TopicConfig
from kstore_cli.record.reader import read_batches
from kstore_cli.log.log_segment import largest_timestamp

if TYPE_CHECKING:  # the pass's own classes (cleaner.py imports this module)
    from kstore_cli.log.producer_state import ProducerStateManager
    from kstore_cli.log.unified_log import UnifiedLog

class CleaningPlan:
    """LogToClean: the dirty range and whether the broker would clean this log now."""

    def __init__(self) -> None:
        self.first_dirty_offset = 0
        #: The checkpoint had to be reset to the log start offset (forceUpdateCheckpoint).
        self.checkpoint_reset = False
        self.checkpointed: Optional[int] = None
        self.uncleanable_offset = 0
        self.first_uncleanable_offset = 0
        self.last_stable_offset = 0
        self.clean_bytes = 0
        self.cleanable_bytes = 0
        self.compaction_delay_ms = 0
        self.eligible = False
        self.reason = ""

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def need_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0

    def to_dict(self) -> dict:
        return {"first_dirty_offset": self.first_dirty_offset, "checkpoint_reset": self.checkpoint_reset,
                "first_uncleanable_offset": self.first_uncleanable_offset, "last_stable_offset": self.last_stable_offset,
                "clean_bytes": self.clean_bytes, "cleanable_bytes": self.cleanable_bytes,
                "dirty_ratio": round(self.dirty_ratio, 6), "compaction_delay_ms": self.compaction_delay_ms,
                "eligible": self.eligible, "reason": self.reason}


def plan_cleaning(view: UnifiedLog, config: TopicConfig, producers: ProducerStateManager, *, now: int,
                  checkpointed: Optional[int]) -> CleaningPlan:
    """LogCleanerManager.cleanableOffsets, calculateCleanableBytes, maxCompactionDelay and the
    eligibility test of grabFilthiestCompactedLog, for one log."""
    plan = CleaningPlan()
    plan.checkpointed = checkpointed
    lso_start = view.log_start_offset
    dirty = lso_start if checkpointed is None else checkpointed
    if dirty < lso_start or dirty > view.log_end_offset:
        dirty, plan.checkpoint_reset = lso_start, True
    plan.first_dirty_offset = dirty
    bound, bound_why = _uncleanable_bound(view, config, producers, plan, now=now)
    plan.uncleanable_offset = max(dirty, bound)
    # calculateCleanableBytes: down to the base of the segment holding it.
    following = view.non_active_from(plan.uncleanable_offset)
    plan.first_uncleanable_offset = following[0].base_offset if following else view.active.base_offset
    plan.cleanable_bytes = sum(s.size for s in view.log_segments(min(dirty, plan.first_uncleanable_offset),
                                                                 plan.first_uncleanable_offset))
    plan.clean_bytes = sum(s.size for s in view.log_segments(-1, dirty))
    plan.compaction_delay_ms = _max_compaction_delay(view, config, dirty, now=now)
    ratio_needed = config.get("min.cleanable.dirty.ratio")
    if plan.total_bytes == 0:
        if view.log_end_offset <= view.log_start_offset:
            plan.reason = "the log is empty"
        else:
            # Segments hold offsets, but none lies wholly below the bound (calculateCleanableBytes counts
            # whole segments up to the one holding it).
            plan.reason = f"{bound_why} and nothing below it is cleanable"
    elif plan.need_compaction_now and plan.cleanable_bytes > 0:
        plan.eligible = True
        plan.reason = f"max.compaction.lag.ms passed {plan.compaction_delay_ms} ms ago"
    elif plan.dirty_ratio > ratio_needed:
        plan.eligible = True
        plan.reason = f"dirty ratio {plan.dirty_ratio:.3f} > min.cleanable.dirty.ratio {ratio_needed}"
    else:
        plan.reason = f"dirty ratio {plan.dirty_ratio:.3f} <= min.cleanable.dirty.ratio {ratio_needed}"
    return plan


def _uncleanable_bound(view: UnifiedLog, config: TopicConfig, producers: ProducerStateManager, plan: CleaningPlan, *,
                       now: int) -> Tuple[int, str]:
    """The first of cleanableOffsets' bounds (last stable offset, active segment, min.compaction.lag.ms),
    with what to tell the user when it is the one that leaves nothing; sets the plan's last stable offset."""
    dirty = plan.first_dirty_offset
    open_txn = producers.first_open_transaction()
    unstable = None if open_txn is None else open_txn[0]
    plan.last_stable_offset = view.high_watermark if unstable is None else min(view.high_watermark, unstable)
    if unstable is not None and unstable <= view.high_watermark:
        lso_why = (f"cleaning stops at the first unstable offset {unstable}, where producer {open_txn[1]}'s "
                   "transaction is still open,")
    else:
        lso_why = f"cleaning stops at the high watermark {view.high_watermark},"
    bounds = [(plan.last_stable_offset, lso_why),
              (view.active.base_offset,
               f"cleaning stops at the active segment, which starts at offset {view.active.base_offset} and is "
               "never cleaned,")]
    lag = max(config.get("min.compaction.lag.ms"), 0)
    if lag > 0:
        for seg in view.non_active_from(dirty):
            if largest_timestamp(seg)[0] > now - lag:  # §7's largestTimestamp
                bounds.append((seg.base_offset, f"cleaning stops at segment {seg.base_offset}, which has records "
                                                f"newer than min.compaction.lag.ms {lag},"))
                break
    return min(bounds, key=lambda b: b[0])  # ties: the first listed (min keeps it)


def _max_compaction_delay(view: UnifiedLog, config: TopicConfig, dirty: int, *, now: int) -> int:
    """LogCleanerManager.maxCompactionDelay: how long ago max.compaction.lag.ms passed for the earliest
    first-batch timestamp among dirty non-active segments (0 when it has not)."""
    max_lag = max(config.get("max.compaction.lag.ms"), 0)
    firsts = []
    for seg in view.non_active_from(dirty):
        try:
            first = next(iter(read_batches(seg.log)), None)
        except KstoreError:
            first = None
        if first is not None and first.max_timestamp > 0:
            firsts.append(first.max_timestamp)
    clean_until = now - max_lag
    if firsts and min(firsts) < clean_until:
        return clean_until - min(firsts)
    return 0


def cleaner_checkpoint_path(data_dir: str) -> str:
    return os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT)


def read_cleaner_checkpoint(data_dir: str) -> Dict[Tuple[str, int], int]:
    path = cleaner_checkpoint_path(data_dir)
    return read_offset_checkpoint(path) if os.path.exists(path) else {}


def update_cleaner_checkpoint(data_dir: str, key: Tuple[str, int], offset: int) -> None:
    """LogCleanerManager.updateCheckpoints for one partition (atomically)."""
    entries = read_cleaner_checkpoint(data_dir)
    entries[key] = offset
    fileops.atomic_write(cleaner_checkpoint_path(data_dir), format_offset_checkpoint(entries).encode())
