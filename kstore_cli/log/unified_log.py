"""The offsets a broker's ``UnifiedLog`` reports once it has loaded a partition, worked out once.

* log start offset: the data dir's ``log-start-offset-checkpoint`` entry, never below the first
  segment's base offset (``UnifiedLog``'s constructor); the first segment when the partition is not
  listed;
* log end offset: the last segment's ``readNextOffset`` (kstore_cli.log.log_segment);
* high watermark: the ``replication-offset-checkpoint`` entry clamped to [log start, log end]
  (``UnifiedLog.updateHighWatermark``); a partition missing from it starts at 0, raised to the log
  start offset; a data dir with no such file at all (a copy, an archive) is taken at the log end.

Every value carries its source, as the commands print it.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointEntries,
    read_offset_checkpoint,
)
from kstore_cli.log.index import AbortedTxn
from kstore_cli.log.log_segment import LogSegment, read_next_offset
from kstore_cli.log.logdir import Partition

LSO_CHECKPOINT = "log-start-offset-checkpoint"
LSO_FIRST_SEGMENT = "first segment"
LSO_UNREADABLE = "first segment (log-start-offset-checkpoint unreadable)"
HW_CHECKPOINT = "replication-offset-checkpoint"
HW_NOT_LISTED = "not in replication-offset-checkpoint: 0, raised to the log start offset"
HW_NO_CHECKPOINT = "no replication-offset-checkpoint: the log end offset"


class DataDirState:
    """The data dir's offset checkpoints, read once (under the lock) for all its partitions.

    Strict by default (a corrupt checkpoint raises, as a broker refuses to start on one);
    ``tolerant=True`` (read-only reports) records the error and goes on without that checkpoint, and keeps
    the entries compactly (:class:`OffsetCheckpointEntries`: 10,000 partitions).
    """

    def __init__(self, data_dir: str, *, tolerant: bool = False) -> None:
        self.path = os.path.abspath(data_dir)
        lso_path = os.path.join(self.path, LOG_START_OFFSET_CHECKPOINT)
        hw_path = os.path.join(self.path, REPLICATION_OFFSET_CHECKPOINT)
        #: The error that made a checkpoint unusable (tolerant mode only).
        self.log_start_offsets_error: Optional[KstoreError] = None
        self.high_watermarks_error: Optional[KstoreError] = None
        self.log_start_offsets: Mapping[Tuple[str, int], int] = self._read(lso_path, tolerant, "log_start_offsets") or {}
        #: None when there is no replication-offset-checkpoint at all (a copy, an archive).
        self.high_watermarks: Optional[Mapping[Tuple[str, int], int]] = self._read(hw_path, tolerant, "high_watermarks")

    def _read(self, path: str, tolerant: bool, what: str) -> Optional[Mapping[Tuple[str, int], int]]:
        if not os.path.exists(path):
            return None
        try:
            return OffsetCheckpointEntries.read(path) if tolerant else read_offset_checkpoint(path)
        except KstoreError as exc:
            if not tolerant:
                raise
            setattr(self, what + "_error", exc)
            return None


class DataDirStates:
    """Each data dir's checkpoints read once, tolerantly: a report goes on past a bad checkpoint."""

    def __init__(self) -> None:
        self._states: Dict[str, DataDirState] = {}

    def __getitem__(self, data_dir: str) -> DataDirState:
        if data_dir not in self._states:
            self._states[data_dir] = DataDirState(data_dir, tolerant=True)
        return self._states[data_dir]


@dataclass(frozen=True)
class LogOffsets:
    """Log start offset, log end offset and high watermark of a loaded partition, with their sources."""

    log_start_offset: int
    log_start_offset_source: str
    log_end_offset: int
    high_watermark: int
    high_watermark_source: str

    def to_dict(self) -> dict:
        return asdict(self)


def log_start_offset(first_base_offset: int, checkpointed: Optional[int]) -> int:
    """UnifiedLog's log start offset: the log-start-offset-checkpoint entry (None: not listed), never below
    the first segment's base offset."""
    return first_base_offset if checkpointed is None else max(first_base_offset, checkpointed)


def log_offsets(partition: Partition, state: DataDirState, *, log_end_offset: Optional[int] = None) -> LogOffsets:
    """The offsets a broker would report for `partition` after loading it; `log_end_offset` when the
    caller has already read it (a recovery walk), else the last segment's readNextOffset."""
    segments = partition.segments
    first = segments[0].base_offset if segments else 0
    if log_end_offset is None:
        log_end_offset = read_next_offset(segments[-1].log, segments[-1].base_offset) if segments else 0
    key = (partition.topic, partition.partition)
    checkpointed = state.log_start_offsets.get(key)
    lso = log_start_offset(first, checkpointed)
    if checkpointed is not None:
        lso_source = LSO_CHECKPOINT
    else:
        lso_source = LSO_UNREADABLE if state.log_start_offsets_error is not None else LSO_FIRST_SEGMENT
    if state.high_watermarks is None:
        hw, hw_source = log_end_offset, HW_NO_CHECKPOINT
    else:
        raw = state.high_watermarks.get(key)
        hw_source = HW_CHECKPOINT if raw is not None else HW_NOT_LISTED
        hw = min(max(raw or 0, lso), log_end_offset)
    return LogOffsets(lso, lso_source, log_end_offset, hw, hw_source)


class UnifiedLog:
    """A loaded partition: its LogSegments and the offsets a broker's UnifiedLog reports (log start, log end,
    high watermark and their sources)."""

    def __init__(self, partition: Partition, state: DataDirState) -> None:
        self.partition = partition
        self.segments = [s.loaded() for s in partition.segments]
        self._bases = [s.base_offset for s in self.segments]
        offsets = log_offsets(partition, state,
                              log_end_offset=self.segments[-1].next_offset if self.segments else 0)
        self.log_start_offset = offsets.log_start_offset
        self.log_end_offset = offsets.log_end_offset
        self.high_watermark = offsets.high_watermark
        self.high_watermark_source = offsets.high_watermark_source

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    def log_segments(self, start: int, end: int) -> List[LogSegment]:
        """LogSegments.values(from, to): the floor segment of `start` through those based below `end`."""
        if start >= end:
            return []
        lo = bisect.bisect_right(self._bases, start) - 1
        hi = bisect.bisect_left(self._bases, end)
        return self.segments[max(lo, 0):hi]

    def non_active_from(self, start: int) -> List[LogSegment]:
        """UnifiedLog.nonActiveLogSegmentsFrom."""
        if not self.segments or start > self.active.base_offset:
            return []
        return self.log_segments(start, self.active.base_offset)

    def collect_aborted_transactions(self, base_offset: int, upper_bound: int) -> List[AbortedTxn]:
        """UnifiedLog.collectAbortedTransactions: ``.txnindex`` entries overlapping
        [log start offset, upper_bound), from the floor segment of `base_offset` onward, until an
        entry's last stable offset reaches `upper_bound` (TransactionIndex.collectAbortedTxns)."""
        i = bisect.bisect_right(self._bases, base_offset) - 1
        if i < 0:
            return []
        out: List[AbortedTxn] = []
        for seg in self.segments[i:]:
            for txn in seg.aborted_txns():
                if txn.last_offset >= self.log_start_offset and txn.first_offset < upper_bound:
                    out.append(txn)
                if txn.last_stable_offset >= upper_bound:
                    return out
        return out
