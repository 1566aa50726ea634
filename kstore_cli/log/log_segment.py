"""Kafka's ``LogSegment``: one segment's files (``.log``, offset index, time index, transaction index) and
what is derived from them, written once for every command.

* :func:`read_next_offset` is ``LogSegment.readNextOffset``: the offset after the last complete
  batch (the base offset when there is none); a damaged tail stops the walk, as recovery would cut.
* :func:`largest_timestamp` is ``LogSegment.largestTimestamp`` as a broker has it after loading the
  directory (retention's age, the cleaner's compaction lag, ``offsetsForTimes``' segment skip), with
  the source it came from: the time index's last entry, the batches (when the loader would rebuild
  the time index), or the ``.log``'s mtime (no timestamp at all).

* :meth:`LogSegment.translate_offset` is ``LogSegment.translateOffset``'s index step: the position
  the offset index gives for an offset (0: scan the segment from its start).

Lookups pass a :class:`LookupStats` to count what they read.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple, Type, TypeVar

from kstore_cli.errors import KstoreError
from kstore_cli.log import names
from kstore_cli.log.index import AbortedTxn, IndexFile, OffsetIndex, TimeIndex, TransactionIndex
from kstore_cli.record.reader import read_batches

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


class LookupStats:
    """What a lookup read: index bytes, log bytes, and whether indexes were used."""

    __slots__ = ("index_bytes", "log_bytes", "batches_scanned", "segments_scanned", "notes")

    def __init__(self) -> None:
        self.index_bytes = 0
        self.log_bytes = 0
        self.batches_scanned = 0
        #: Segments read from their first byte because an index was missing or unusable.
        self.segments_scanned: List[int] = []
        self.notes: List[str] = []

    @property
    def used_index(self) -> bool:
        return not self.segments_scanned

    @property
    def bytes_read(self) -> int:
        return self.index_bytes + self.log_bytes

    def scanned(self, base_offset: int) -> None:
        """Note that the segment at `base_offset` is read from its first byte."""
        if base_offset not in self.segments_scanned:
            self.segments_scanned.append(base_offset)

    def copy(self) -> "LookupStats":
        other = LookupStats()
        other.index_bytes, other.log_bytes, other.batches_scanned = self.index_bytes, self.log_bytes, self.batches_scanned
        other.segments_scanned, other.notes = list(self.segments_scanned), list(self.notes)
        return other

    def to_dict(self) -> dict:
        return {
            "bytesRead": self.bytes_read,
            "indexBytesRead": self.index_bytes,
            "logBytesRead": self.log_bytes,
            "batchesScanned": self.batches_scanned,
            "usedIndex": self.used_index,
            "scannedSegments": self.segments_scanned,
            "notes": self.notes,
        }


IndexT = TypeVar("IndexT", bound=IndexFile)


def open_index(cls: Type[IndexT], path: Optional[str], base: int,
               stats: LookupStats) -> Tuple[Optional[IndexT], int]:
    """An index usable for lookups and its entries (its zero tail excluded), or (None, 0)."""
    if path is None:
        return None, 0
    try:
        index = cls(path, base)
    except Exception:  # noqa: BLE001 - any unreadable index means "scan instead"
        return None, 0
    if index.length % index.entry_size:
        return None, 0
    entries = index.entries
    if entries and index.is_zero_slot(entries - 1):
        # A preallocated (crash-state) index: the zero slots would break the binary search.
        entries = index.zero_tail_start()
        stats.index_bytes += (index.entries - entries) * index.entry_size
        stats.notes.append(f"{os.path.basename(path)}: ignoring {index.entries - entries} preallocated zero slots")
    return index, entries


def _counted_slot(index: IndexFile, entries: int, target: int, stats: LookupStats) -> int:
    """The index's largest lower bound slot for `target` over `entries` slots, counting the bytes read."""
    def read() -> None:
        stats.index_bytes += index.entry_size

    return index.slot_for(target, entries=entries, on_read=read)


def _scan_max_timestamp(log: str, stats: Optional["LookupStats"]) -> int:
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


def _time_index_last(segment: "LogSegment", stats: Optional["LookupStats"]) -> Optional[int]:
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


def max_timestamp_so_far(segment: "LogSegment", stats: Optional["LookupStats"] = None, *,
                         scan: bool = True) -> Optional[Tuple[int, str]]:
    """LogSegment.maxTimestampSoFar after loading, and its source; -1 when the segment holds no
    timestamp. With ``scan=False``, None where only reading the batches could tell (a planner that
    must not read data yet)."""
    ts = _time_index_last(segment, stats)
    if ts is not None:
        return ts, TS_TIMEINDEX
    if not scan:
        return None
    if stats is not None:
        stats.scanned(segment.base_offset)
    return _scan_max_timestamp(segment.log, stats), TS_BATCHES


def largest_timestamp(segment: "LogSegment", stats: Optional["LookupStats"] = None) -> Tuple[int, str]:
    """LogSegment.largestTimestamp: the max timestamp so far, or the .log's mtime when below 0."""
    ts, source = max_timestamp_so_far(segment, stats)  # type: ignore[misc] - scan=True never gives None
    if ts >= 0:
        return ts, source
    return mtime_ms(segment.log), TS_MTIME


class LogSegment:
    """One segment's files (paths are None when the file does not exist) and Kafka's LogSegment reads of them.

    ``size``, ``mtime_ms``, the index sizes, ``next_offset`` and the aborted transactions are read once, when
    first asked for (:meth:`loaded` reads the sizes and mtime at once, as a broker's load does)."""

    __slots__ = ("base_offset", "log", "index", "timeindex", "txnindex",
                 "_size", "_mtime_ms", "_index_bytes", "_timeindex_bytes", "_next", "_txns")

    def __init__(self, base_offset: int, directory: str) -> None:
        self.base_offset = base_offset
        prefix = os.path.join(directory, names.filename_prefix(base_offset))
        self.log = prefix + names.LOG_SUFFIX
        self.index: Optional[str] = None
        self.timeindex: Optional[str] = None
        self.txnindex: Optional[str] = None
        self._size: Optional[int] = None
        self._mtime_ms: Optional[int] = None
        self._index_bytes: Optional[int] = None
        self._timeindex_bytes: Optional[int] = None
        self._next: Optional[int] = None
        self._txns: Optional[List[AbortedTxn]] = None

    def path(self, suffix: str) -> str:
        """The path this segment's file with `suffix` has (or would have)."""
        return names.sibling(self.log, suffix)

    def loaded(self) -> "LogSegment":
        """A fresh LogSegment over the same files, its sizes and mtime read now (a loaded log's view)."""
        other = LogSegment.__new__(LogSegment)
        other.base_offset, other.log = self.base_offset, self.log
        other.index, other.timeindex, other.txnindex = self.index, self.timeindex, self.txnindex
        other._size = os.path.getsize(self.log)
        other._mtime_ms = mtime_ms(self.log)
        other._index_bytes = os.path.getsize(self.index) if self.index else 0
        other._timeindex_bytes = os.path.getsize(self.timeindex) if self.timeindex else 0
        other._next, other._txns = None, None
        return other

    @property
    def log_size(self) -> int:
        """The ``.log``'s size now."""
        return os.path.getsize(self.log)

    @property
    def size(self) -> int:
        """LogSegment.size: the ``.log``'s size when first asked for."""
        if self._size is None:
            self._size = self.log_size
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        self._size = value

    @property
    def mtime_ms(self) -> int:
        """LogSegment.lastModified (File.lastModified of the .log: whole milliseconds)."""
        if self._mtime_ms is None:
            self._mtime_ms = mtime_ms(self.log)
        return self._mtime_ms

    @property
    def index_bytes(self) -> int:
        if self._index_bytes is None:
            self._index_bytes = os.path.getsize(self.index) if self.index else 0
        return self._index_bytes

    @index_bytes.setter
    def index_bytes(self, value: int) -> None:
        self._index_bytes = value

    @property
    def timeindex_bytes(self) -> int:
        if self._timeindex_bytes is None:
            self._timeindex_bytes = os.path.getsize(self.timeindex) if self.timeindex else 0
        return self._timeindex_bytes

    @timeindex_bytes.setter
    def timeindex_bytes(self, value: int) -> None:
        self._timeindex_bytes = value

    @property
    def next_offset(self) -> int:
        """LogSegment.readNextOffset: the last complete batch's next offset, else the base offset."""
        if self._next is None:
            self._next = read_next_offset(self.log, self.base_offset)
        return self._next

    def aborted_txns(self) -> List[AbortedTxn]:
        """The segment's ``.txnindex`` entries (none when it has no such file)."""
        if self._txns is None:
            self._txns = TransactionIndex(self.txnindex).entries() if self.txnindex else []
        return self._txns

    def start_position(self, offset: int) -> int:
        """OffsetIndex.lookup(offset).position, or 0 without a usable index (a sanity check failing)."""
        if self.index is None or offset <= self.base_offset:
            return 0
        try:
            index = OffsetIndex(self.index, self.base_offset)
            index.sanity_check()
            return index.lookup(offset)[1]
        except KstoreError:
            return 0

    def translate_offset(self, target: int, stats: LookupStats) -> int:
        """LogSegment.translateOffset's index step: the position of the largest offset index entry at or
        below `target`, or 0 (scan the segment) with no usable index or an entry outside the ``.log``."""
        index, entries = open_index(OffsetIndex, self.index, self.base_offset, stats)
        if index is None:
            stats.scanned(self.base_offset)
            return 0
        slot = _counted_slot(index, entries, target, stats)
        if slot < 0:
            return 0
        position = index.entry(slot)[1]
        if not 0 <= position <= os.path.getsize(self.log):
            # A damaged entry pointing outside the .log: the index is not usable, scan instead.
            stats.scanned(self.base_offset)
            return 0
        return position

    def offset_for_timestamp(self, timestamp: int, stats: LookupStats) -> int:
        """The time index's step of LogSegment.findOffsetByTimestamp: the offset of the largest entry at
        or below `timestamp`, or the base offset (scanning from it when the index is unusable or empty)."""
        index, entries = open_index(TimeIndex, self.timeindex, self.base_offset, stats)
        if index is not None and entries:
            slot = _counted_slot(index, entries, timestamp, stats)
            return index.entry(slot)[1] if slot >= 0 else self.base_offset
        stats.scanned(self.base_offset)  # no usable or an empty time index
        return self.base_offset

    def __repr__(self) -> str:
        return f"LogSegment({self.base_offset})"
