"""Writing segments: batches appended to new ``.log`` files, with their indexes kept by Kafka's rules.

What a :class:`PartitionWriter` leaves in its directory, per segment (``S`` is the file suffix,
``.cleaned`` unless told otherwise, so :mod:`~kstore_cli.log.swap` can swap them in)::

    <base>.log S         the batches, byte for byte as appended, nothing after the last one
    <base>.index S       trimmed: exactly entries x 8 bytes
    <base>.timeindex S   trimmed, with the final (roll/close) entry (§4.4)
    <base>.txnindex S    only when the segment holds ABORT markers of non-empty transactions

Index entries follow ``LogSegment.append`` (§4.3) with **one batch per append**. With that
granularity the append rule and recovery's per-batch rule (§6.1) give the same entries: an
offset entry (batch last offset, batch position) whenever the batch starts more than
``index.interval.bytes`` after the previous entry, the time index taking the running maximum
timestamp and the last offset of the batch that holds it. So ``verify-index`` passes and
``rebuild-index`` (recovery's rule) would write the same bytes.

Rolling follows ``LogSegment.shouldRoll`` on size: a new segment starts when the current one is
not empty and ``size > segment_bytes - batch size``; it is also forced when a batch's last offset
would not fit the segment's int32 relative range or the file would pass 2 GiB. A new segment is
named after the first offset of the batch that opens it.

``.txnindex`` entries come from the producer state, tracked as recovery tracks it
(:class:`~kstore_cli.log.producer_state.TxnState`), starting from the state at the first segment.
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional

from kstore_cli.errors import CorruptDataError, KstoreError, UsageError
from kstore_cli.log import fileops, names
from kstore_cli.record.batch import MAX_INT32, Batch
from kstore_cli.log.index import DEFAULT_INDEX_INTERVAL_BYTES, AbortedTxn, SegmentIndexBuilder, pack_aborted_txns
from kstore_cli.log.producer_state import TxnState
from kstore_cli.record.reader import read_batches

#: Kafka's default segment.bytes (1 GiB).
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
#: A segment file must stay below Integer.MAX_VALUE bytes (FileRecords).
MAX_SEGMENT_FILE_BYTES = MAX_INT32
_SEGMENT_SUFFIXES = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)


class WrittenSegment:
    """One finished segment: where its files are and what it holds."""

    __slots__ = ("base_offset", "files", "log_size", "batches", "last_offset", "max_timestamp",
                 "index_entries", "time_entries", "aborted", "index_bytes", "timeindex_bytes")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        #: Paths written (with the writer's suffix), .log first.
        self.files: List[str] = []
        self.log_size = 0
        self.batches = 0
        self.last_offset: Optional[int] = None
        self.max_timestamp = -1
        self.index_entries = 0
        self.time_entries = 0
        self.aborted: List[AbortedTxn] = []
        self.index_bytes = b""
        self.timeindex_bytes = b""

    @property
    def next_offset(self) -> int:
        """Kafka's readNextOffset: last offset + 1, or the base offset when empty."""
        return self.base_offset if self.last_offset is None else self.last_offset + 1

    def __repr__(self) -> str:
        return f"WrittenSegment({self.base_offset}, batches={self.batches}, log_size={self.log_size})"


class _Open:
    __slots__ = ("seg", "log", "builder", "mtime")

    def __init__(self, seg: WrittenSegment, log: Optional[fileops.NewFile], builder: SegmentIndexBuilder,
                 mtime: Optional[float]) -> None:
        self.seg = seg
        self.log = log
        self.builder = builder
        self.mtime = mtime


class PartitionWriter:
    """Appends batches to new segments of one partition directory (a builder: ``append``, ``close``).

    `directory` None writes nothing and only measures (a dry run). `txn_state` is called at most
    once, at the first transactional or control batch, for the producer state at the first
    segment's base offset (omit it when the data has no open transactions before it).
    """

    def __init__(
        self,
        directory: Optional[str],
        *,
        suffix: str = names.CLEANED_SUFFIX,
        segment_bytes: Optional[int] = None,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        txn_state: Optional[Callable[[], object]] = None,
    ) -> None:
        if segment_bytes is not None and segment_bytes < 1:
            raise UsageError(f"segment bytes must be positive, got {segment_bytes}")
        if index_interval_bytes < 0:
            raise UsageError(f"index interval must be >= 0, got {index_interval_bytes}")
        self.directory = None if directory is None else os.path.abspath(directory)
        self.suffix = suffix
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self._txn_factory = txn_state
        self._txn = None
        self._cur: Optional[_Open] = None
        self._last_offset: Optional[int] = None
        self.segments: List[WrittenSegment] = []
        self.bytes_written = 0
        self._closed = False

    # ------------------------------------------------------------------ segments
    @property
    def next_offset(self) -> Optional[int]:
        """The offset after the last batch appended (None before any)."""
        return None if self._last_offset is None else self._last_offset + 1

    @property
    def current_base_offset(self) -> Optional[int]:
        return None if self._cur is None else self._cur.seg.base_offset

    def path_for(self, base_offset: int, suffix: str) -> str:
        if self.directory is None:
            raise UsageError("a dry-run writer has no files")
        return os.path.join(self.directory, names.filename_prefix(base_offset) + suffix + self.suffix)

    def start_segment(self, base_offset: int, *, mtime: Optional[float] = None) -> None:
        """Finish the current segment (if any) and open a new one named `base_offset`.

        Used to keep a source segment's name (and mtime, for time retention of data without
        timestamps), or to leave an empty active segment at a log end offset.
        """
        if self._last_offset is not None and base_offset <= self._last_offset:
            raise UsageError(f"a new segment at {base_offset} would hold offsets already written "
                             f"(up to {self._last_offset})")
        self._finish_current()
        seg = WrittenSegment(base_offset)
        log = None
        if self.directory is not None:
            path = self.path_for(base_offset, names.LOG_SUFFIX)
            log = fileops.create_file(path)
            seg.files.append(path)
        self._cur = _Open(seg, log, SegmentIndexBuilder(base_offset, self.index_interval_bytes,
                                                         None if log is None else log.path), mtime)

    def set_mtime(self, mtime: Optional[float]) -> None:
        """The modification time the current segment's files get when finished."""
        if self._cur is not None:
            self._cur.mtime = mtime

    # ------------------------------------------------------------------ appending
    def append(self, batch: Batch, first_offset: Optional[int] = None) -> None:
        """Append one batch (its exact bytes, ``batch.buffer``); roll first when needed.

        `first_offset` is the batch's first offset when the caller knows it (a legacy
        compressed wrapper only learns it by decompressing); it names a segment the batch opens.
        """
        if self._closed:
            raise UsageError("the writer is closed")
        size = batch.size
        last = batch.last_offset
        if first_offset is not None:
            first = first_offset
        elif batch.magic >= 2 or not batch.compression:
            first = batch.base_offset
        else:
            first = last  # a legacy wrapper's first offset needs decompression
        if self._last_offset is not None and first <= self._last_offset:
            raise CorruptDataError(
                f"batch offsets must increase: a batch from {first} to {last} after one ending at {self._last_offset}",
                path=batch.path, position=batch.position,
            )
        cur = self._cur
        if cur is None or self._must_roll(cur.seg, size, last):
            base = batch.base_offset if first_offset is None else first_offset
            mtime = cur.mtime if cur is not None else None
            self.start_segment(base, mtime=mtime)
            cur = self._cur
        seg = cur.seg
        if last - seg.base_offset < 0 or (first_offset is not None and first_offset < seg.base_offset):
            raise CorruptDataError(
                f"offset {last if first_offset is None else first_offset} is below the segment's base offset "
                f"{seg.base_offset}", path=batch.path, position=batch.position,
            )
        position = seg.log_size
        if cur.log is not None:
            cur.log.write(batch.buffer)
        max_ts = batch.max_timestamp
        cur.builder.appended(position, size, last, max_ts, last)
        seg.log_size += size
        seg.batches += 1
        seg.last_offset = last
        self._last_offset = last
        self.bytes_written += size
        if batch.magic >= 2 and batch.producer_id >= 0 and (batch.is_transactional or batch.is_control):
            if self._txn is None:
                if self._txn_factory is not None:
                    self._txn = self._txn_factory()
                else:
                    self._txn = TxnState()
            aborted = self._txn.update(batch)
            if aborted is not None:
                seg.aborted.append(aborted)

    def append_chunk(self, data: "bytes | memoryview", *, first_offset: int, largest_offset: int,
                     max_timestamp: int, offset_of_max_timestamp: int) -> None:
        """One ``LogSegment.append`` of several batches at once, as the cleaner appends a filtered chunk.

        The index entry (if one is due) is ``(largest_offset, position of the chunk)``, and the time
        index takes ``(max_timestamp, offset_of_max_timestamp)`` when it is a new maximum (§4.3): the
        cleaner's indexes follow its chunks, not its batches. Never rolls (a cleaned group is one
        segment); ``.txnindex`` entries come only from :meth:`add_aborted_txn`.
        """
        if self._closed:
            raise UsageError("the writer is closed")
        cur = self._cur
        if cur is None:
            raise UsageError("start_segment first: a chunk is appended to the current segment")
        size = len(data)
        if size == 0:
            return
        seg = cur.seg
        if self._last_offset is not None and first_offset <= self._last_offset:
            raise CorruptDataError(f"batch offsets must increase: a chunk from {first_offset} after one ending at "
                                   f"{self._last_offset}", path=self.path_for(seg.base_offset, names.LOG_SUFFIX)
                                   if self.directory is not None else None)
        if largest_offset - seg.base_offset > MAX_INT32 or first_offset < seg.base_offset:
            raise CorruptDataError(f"offsets {first_offset}..{largest_offset} do not fit the segment based at "
                                   f"{seg.base_offset}")
        position = seg.log_size
        if cur.log is not None:
            cur.log.write(data)
        cur.builder.appended(position, size, largest_offset, max_timestamp, offset_of_max_timestamp)
        seg.log_size += size
        seg.batches += 1
        seg.last_offset = largest_offset if seg.last_offset is None else max(seg.last_offset, largest_offset)
        self._last_offset = seg.last_offset
        self.bytes_written += size

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        """Append an entry to the current segment's ``.txnindex`` (the cleaner decides which)."""
        if self._cur is None:
            raise UsageError("start_segment first")
        self._cur.seg.aborted.append(txn)

    def append_bytes(self, data: "bytes | memoryview", first_offset: Optional[int] = None) -> None:
        """Append every batch in `data` (one append per batch); `first_offset` applies to the first."""
        for i, batch in enumerate(read_batches(data)):
            self.append(batch, first_offset if i == 0 else None)

    def _must_roll(self, seg: WrittenSegment, size: int, last: int) -> bool:
        if seg.log_size == 0:
            return False
        if self.segment_bytes is not None and seg.log_size > self.segment_bytes - size:
            return True
        if last - seg.base_offset > MAX_INT32:
            return True
        return seg.log_size + size > MAX_SEGMENT_FILE_BYTES

    # ------------------------------------------------------------------ finishing
    def _finish_current(self) -> None:
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        seg = cur.seg
        builder = cur.builder
        builder.finish()  # the final time-index entry (onBecomeInactiveSegment / close)
        seg.max_timestamp = builder.max_timestamp
        seg.index_entries = builder.index_entries
        seg.time_entries = builder.time_entries
        seg.index_bytes = builder.offset_index_bytes()
        seg.timeindex_bytes = builder.time_index_bytes()
        if cur.log is not None:
            f = None
            try:
                cur.log.finish()
                outputs = [(names.INDEX_SUFFIX, seg.index_bytes), (names.TIME_INDEX_SUFFIX, seg.timeindex_bytes)]
                if seg.aborted:
                    outputs.append((names.TXN_INDEX_SUFFIX, pack_aborted_txns(seg.aborted)))
                for suffix, data in outputs:
                    path = self.path_for(seg.base_offset, suffix)
                    f = fileops.create_file(path)
                    f.write(data)
                    f.finish()
                    f = None
                    seg.files.append(path)
                if cur.mtime is not None:
                    for path in seg.files:
                        fileops.set_mtime(path, cur.mtime)
            except BaseException:
                # An error (a full disk...) while finishing: this segment is in neither _cur nor
                # segments any more, so abort() would not see its files; remove them here.
                if f is not None:
                    f.abort()
                try:
                    cur.log.abort()
                except KstoreError:
                    pass
                for path in seg.files[1:]:
                    fileops.unlink(path)
                raise
        self.segments.append(seg)

    def close(self) -> List[WrittenSegment]:
        """Finish the last segment (trimmed, final time entry) and fsync the directory."""
        if not self._closed:
            self._finish_current()
            self._closed = True
            if self.directory is not None and self.segments:
                fileops.fsync_dir(self.directory)
        return self.segments

    def abort(self) -> None:
        """Delete every file written so far (nothing of it was swapped in)."""
        cur = self._cur
        self._cur = None
        self._closed = True
        if cur is not None and cur.log is not None:
            cur.log.abort()
        for seg in self.segments:
            for path in seg.files:
                fileops.unlink(path)
        if self.directory is not None:
            fileops.fsync_dir(self.directory)

    def __enter__(self) -> "PartitionWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()
