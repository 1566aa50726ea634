"""What Kafka's ``LogSegment`` derives from a segment's files, written once for every command.

* :func:`read_next_offset` is ``LogSegment.readNextOffset``: the offset after the last complete
  batch (the base offset when there is none); a damaged tail stops the walk, as recovery would cut.
* :func:`largest_timestamp` is ``LogSegment.largestTimestamp`` as a broker has it after loading the
  directory (retention's age, the cleaner's compaction lag, ``offsetsForTimes``' segment skip), with
  the source it came from: the time index's last entry, the batches (when the loader would rebuild
  the time index), or the ``.log``'s mtime (no timestamp at all).

Lookups pass a ``LookupStats`` (kstore_cli.log.logdir) to count what they read.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.log.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from kstore_cli.record.reader import read_batches

if TYPE_CHECKING:
    from kstore_cli.log.logdir import LookupStats, Segment

TS_TIMEINDEX = "timeindex"
TS_BATCHES = "batches"
TS_MTIME = "mtime"
TS_NEW_SEGMENT = "new segment"


def mtime_ms(path: str) -> int:
    """File.lastModified: milliseconds, truncated."""
    return os.stat(path).st_mtime_ns // 1_000_000


def read_next_offset(log: str, base_offset: int) -> int:
    """LogSegment.readNextOffset of the .log at `log` (a live, .cleaned or .swap segment): the last
    batch's next offset, else the base offset. A batch whose offsets Kafka rejects ends the walk, as recovery
    cuts there (Kafka's own sum would wrap past Long.MAX_VALUE)."""
    nxt = base_offset
    try:
        for batch in read_batches(log):
            if batch.offsets_problem() is not None:
                break
            nxt = batch.last_offset + 1
    except KstoreError:
        pass  # a damaged tail: the complete batches before it decide, as recovery would cut there
    return nxt


def _scan_max_timestamp(log: str, stats: "Optional[LookupStats]") -> int:
    """The largest batch max timestamp of a .log (-1 when none), reading only batch headers."""
    largest = -1
    try:
        for batch in read_batches(log):
            if stats is not None:
                stats.log_bytes += batch.size
                stats.batches_scanned += 1
            if batch.max_timestamp > largest:
                largest = batch.max_timestamp
    except KstoreError:
        pass  # a damaged tail, where Kafka's recovery would cut
    return largest


def _time_index_last(segment: "Segment", stats: "Optional[LookupStats]") -> Optional[int]:
    """The time index's last entry's timestamp, or None when the loader would rebuild the index:
    no ``.index`` (the segment is recovered), or an untrimmed or unreadable ``.timeindex`` (an
    unclean shutdown's preallocated zeros). A missing ``.timeindex`` is created empty: -1."""
    if segment.index is None:
        return None
    if segment.timeindex is None:
        return -1
    try:
        index = TimeIndex(segment.timeindex, segment.base_offset)
        if index.length % index.entry_size or index.zero_tail_start() != index.entries:
            return None
        if stats is not None:
            stats.index_bytes += index.entry_size
        return index.last_entry()[0]
    except KstoreError:
        return None


def max_timestamp_so_far(segment: "Segment", stats: "Optional[LookupStats]" = None, *,
                         scan: bool = True) -> Optional[Tuple[int, str]]:
    """LogSegment.maxTimestampSoFar after loading, and its source; -1 when the segment holds no
    timestamp. With ``scan=False``, None where only reading the batches could tell (a planner that
    must not read data yet)."""
    ts = _time_index_last(segment, stats)
    if ts is not None:
        return ts, TS_TIMEINDEX
    if not scan:
        return None
    if stats is not None and segment.base_offset not in stats.segments_scanned:
        stats.segments_scanned.append(segment.base_offset)
    return _scan_max_timestamp(segment.log, stats), TS_BATCHES


def largest_timestamp(segment: "Segment", stats: "Optional[LookupStats]" = None) -> Tuple[int, str]:
    """LogSegment.largestTimestamp: the max timestamp so far, or the .log's mtime when below 0."""
    ts, source = max_timestamp_so_far(segment, stats)  # type: ignore[misc] - scan=True never gives None
    if ts >= 0:
        return ts, source
    return mtime_ms(segment.log), TS_MTIME


class LogSegment:
    """Kafka's LogSegment over one segment's files: base offset, ``.log`` size, mtime (ms), index sizes, next
    offset (lazy), aborted transactions, offset lookups."""

    __slots__ = ("segment", "base_offset", "size", "mtime_ms", "index_bytes", "timeindex_bytes", "_next", "_txns")

    def __init__(self, segment: "Segment") -> None:
        self.segment = segment
        self.base_offset = segment.base_offset
        self.size = os.path.getsize(segment.log)
        #: LogSegment.lastModified (File.lastModified of the .log: whole milliseconds).
        self.mtime_ms = mtime_ms(segment.log)
        self.index_bytes = os.path.getsize(segment.index) if segment.index else 0
        self.timeindex_bytes = os.path.getsize(segment.timeindex) if segment.timeindex else 0
        self._next: Optional[int] = None
        self._txns: Optional[List[AbortedTxn]] = None

    @property
    def log(self) -> str:
        return self.segment.log

    @property
    def next_offset(self) -> int:
        """LogSegment.readNextOffset: the last complete batch's next offset, else the base offset."""
        if self._next is None:
            self._next = read_next_offset(self.segment.log, self.base_offset)
        return self._next

    def aborted_txns(self) -> List[AbortedTxn]:
        """The segment's ``.txnindex`` entries (none when it has no such file)."""
        if self._txns is None:
            self._txns = TransactionIndex(self.segment.txnindex).entries() if self.segment.txnindex else []
        return self._txns

    def start_position(self, offset: int) -> int:
        """OffsetIndex.lookup(offset).position, or 0 without a usable index."""
        if self.segment.index is None or offset <= self.base_offset:
            return 0
        try:
            index = OffsetIndex(self.segment.index, self.base_offset)
            index.sanity_check()
            return index.lookup(offset)[1]
        except KstoreError:
            return 0

    def __repr__(self) -> str:
        return f"LogSegment({self.base_offset}, size={self.size})"
