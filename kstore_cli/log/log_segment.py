"""Kafka's ``LogSegment``: one segment's files (``.log``, offset index, time index, transaction index) and
what is derived from them, written once for every command.

* :func:`read_next_offset` is ``LogSegment.readNextOffset``: the offset after the last complete
  batch (the base offset when there is none); a damaged tail stops the walk, as recovery would cut.
* :func:`largest_timestamp` is ``LogSegment.largestTimestamp`` as a broker has it after loading the
  directory (retention's age, the cleaner's compaction lag, ``offsetsForTimes``' segment skip), with
  the source it came from: the time index's last entry, the batches (when the loader would rebuild
  the time index), or the ``.log``'s mtime (no timestamp at all).

* :func:`recover_log` (:meth:`LogSegment.recover`) is ``LogSegment.recover``, in memory: every batch
  checked (size, CRC, offsets), the indexes rebuilt by recovery's rule (§6.1), producer state tracked
  for the aborted transactions, the walk stopped at the first bad batch and the tail classified
  (partial batch, CRC mismatch, bad size, invalid marker or offsets, or a preallocated zero tail).
* :meth:`LogSegment.translate_offset` is ``LogSegment.translateOffset``'s index step: the position
  the offset index gives for an offset (0: scan the segment from its start).

Lookups pass a :class:`LookupStats` to count what they read.
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional, Protocol, Tuple, Type, TypeVar, Union

from kstore_cli.errors import CorruptDataError, CorruptRecordError, InvalidRecordError, KstoreError, RemoteReadError
from kstore_cli.log import names
from kstore_cli.log.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    AbortedTxn,
    IndexAppendError,
    IndexFile,
    OffsetIndex,
    SegmentIndexBuilder,
    TimeIndex,
    TransactionIndex,
    pack_aborted_txns,
)
from kstore_cli.record.batch import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAX_INT32, Batch
from kstore_cli.record import storage
from kstore_cli.record.reader import RELEASE_EVERY, map_file, read_batches, release_pages

TS_TIMEINDEX = "timeindex"
TS_BATCHES = "batches"
TS_MTIME = "mtime"
TS_NEW_SEGMENT = "new segment"


def mtime_ms(path: str) -> int:
    """File.lastModified: milliseconds, truncated (a remote object's: its listing's)."""
    if storage.is_uri(path):
        return storage.stat(path)[1]
    return os.stat(path).st_mtime_ns // 1_000_000


def _getsize(path: str) -> int:
    """A file's size, or a remote object's (from its listing)."""
    return storage.stat(path)[0] if storage.is_uri(path) else os.path.getsize(path)


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
            "bytes_read": self.bytes_read,
            "index_bytes_read": self.index_bytes,
            "log_bytes_read": self.log_bytes,
            "batches_scanned": self.batches_scanned,
            "used_index": self.used_index,
            "scanned_segments": self.segments_scanned,
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
    except RemoteReadError:
        raise  # no damage: the object could not be read
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
    except RemoteReadError:
        raise  # no damage: the object could not be read
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
    except RemoteReadError:
        raise  # no damage: the object could not be read
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


# --------------------------------------------------------------------------- recovery


class ProducerStateTracker(Protocol):
    """What recovery needs of producer state (kstore_cli.log.producer_state.TxnState): each batch with a
    producer id applied, the aborted transaction a marker completes returned."""

    def update(self, batch: Batch) -> Optional[AbortedTxn]: ...


StateT = TypeVar("StateT", bound=ProducerStateTracker)

# Kinds of trouble found where the valid data of a segment ends.
ZERO_TAIL = "zero-filled-tail"  # preallocated (or sparse) zeros: not corruption
PARTIAL_BATCH = "partial-batch"  # the last batch runs past the end of the file
SHORT_TAIL = "short-tail"  # fewer bytes than a batch header
BAD_SIZE = "bad-size"  # a size field below 14 (LegacyRecord.RECORD_OVERHEAD_V0)
CORRUPT_BATCH = "corrupt-batch"  # ensureValid failed: CRC mismatch or a too-small batch
INVALID_CONTROL = "invalid-control-record"  # a transaction marker that does not parse
INVALID_OFFSETS = "invalid-offsets"  # a CRC-valid header whose offsets Kafka rejects (negative, past Long.MAX_VALUE)
# Not cut by Kafka's recovery (it raises instead), so never cut by kstore either.
OFFSET_OVERFLOW = "offset-overflow"  # LogSegmentOffsetOverflowException: Kafka splits the segment
OFFSETS_NOT_INCREASING = "offsets-not-increasing"  # InvalidOffsetException: Kafka empties the segment

#: Kinds Kafka's recovery fixes by truncating the .log.
TRUNCATABLE = frozenset({ZERO_TAIL, PARTIAL_BATCH, SHORT_TAIL, BAD_SIZE, CORRUPT_BATCH, INVALID_CONTROL,
                         INVALID_OFFSETS})

_ZERO_CHUNK = bytes(1 << 20)


def is_zero(buf: memoryview, start: int, end: int) -> bool:
    """Whether bytes [start, end) of buf are all zero.

    A preallocated segment is mostly zeros: pages of a mapped file are released as they are checked
    (else all of them would count in RSS), and each 1 MiB is copied out to be compared with memcmp
    (comparing a memoryview goes item by item, ~10 times slower).
    """
    pos = start
    released = start
    while pos < end:
        n = min(end - pos, len(_ZERO_CHUNK))
        if bytes(buf[pos : pos + n]) != _ZERO_CHUNK[:n]:
            return False
        pos += n
        if pos - released >= RELEASE_EVERY:
            release_pages(buf, released, pos)
            released = pos
    return True


class TailProblem:
    """Where a segment's valid data ends and what was found there."""

    __slots__ = ("kind", "position", "message", "tail_bytes")

    def __init__(self, kind: str, position: int, message: str, tail_bytes: int) -> None:
        self.kind = kind
        self.position = position
        self.message = message
        self.tail_bytes = tail_bytes

    @property
    def truncatable(self) -> bool:
        """Whether Kafka's recovery fixes this by cutting the .log at `position`."""
        return self.kind in TRUNCATABLE

    @property
    def is_corruption(self) -> bool:
        return self.kind != ZERO_TAIL

    def to_dict(self, manifest: bool = False) -> dict:
        """--json's keys; with `manifest`, the quarantine manifest's (a file format: its keys do not change)."""
        return {"kind": self.kind, "position": self.position, "tailBytes" if manifest else "tail_bytes": self.tail_bytes,
                "message": self.message}

    def __repr__(self) -> str:
        return f"TailProblem({self.kind}, position={self.position}, tail_bytes={self.tail_bytes})"


#: Called with each batch recovery accepts: (position, base offset or None for a legacy entry, last offset,
#: max timestamp). Nothing per batch is kept by recovery itself: a 1 GiB segment can hold millions.
BatchSink = Callable[[int, Optional[int], int, int], None]


class RecoveryResult:
    """What LogSegment.recover would leave for one segment."""

    def __init__(self, base_offset: int, path: Optional[str], log_size: int) -> None:
        self.base_offset = base_offset
        self.path = path
        self.log_size = log_size
        self.valid_bytes = 0
        self.problem: Optional[TailProblem] = None
        self.batches = 0
        self.records_known = 0  # v2 record counts (legacy counts need decompression)
        self.first_offset: Optional[int] = None
        self.last_offset: Optional[int] = None
        self.max_timestamp = -1
        self.min_timestamp: Optional[int] = None
        self.magics: set = set()
        self.codecs: set = set()
        self.producer_ids: set = set()
        self.aborted: List[AbortedTxn] = []
        self.index_bytes = b""
        self.timeindex_bytes = b""
        self.offset_of_max_timestamp = base_offset

    @property
    def truncated_bytes(self) -> int:
        """Bytes Kafka's recovery would cut from the .log (0 when the problem is not cut)."""
        if self.problem is not None and not self.problem.truncatable:
            return 0
        return self.log_size - self.valid_bytes

    @property
    def next_offset(self) -> int:
        return self.base_offset if self.last_offset is None else self.last_offset + 1

    @property
    def txnindex_bytes(self) -> bytes:
        return pack_aborted_txns(self.aborted)

    def __repr__(self) -> str:
        return (
            f"RecoveryResult(base_offset={self.base_offset}, valid_bytes={self.valid_bytes}, "
            f"truncated_bytes={self.truncated_bytes}, problem={self.problem})"
        )


def _classify_tail(buf: memoryview, valid: int, size: int, exc: Optional[KstoreError], kind: Optional[str]) -> TailProblem:
    tail = size - valid
    if kind in (OFFSET_OVERFLOW, OFFSETS_NOT_INCREASING):
        return TailProblem(kind, valid, str(exc.message if exc else ""), tail)
    if is_zero(buf, valid, size):
        return TailProblem(
            ZERO_TAIL, valid,
            f"{tail} zero bytes from byte {valid} to the end: a preallocated (or never written) tail, not corruption",
            tail,
        )
    if kind is not None:
        return TailProblem(kind, valid, exc.message if exc is not None else kind, tail)
    if tail <= HEADER_SIZE_UP_TO_MAGIC:
        return TailProblem(SHORT_TAIL, valid, f"{tail} trailing bytes, too few for a batch header", tail)
    declared = int.from_bytes(buf[valid + 8 : valid + 12], "big", signed=True)
    return TailProblem(
        PARTIAL_BATCH, valid,
        f"partial batch: the entry at byte {valid} declares {declared + LOG_OVERHEAD} bytes but only {tail} remain",
        tail,
    )


def _offset_overflow(batch: Batch, base_offset: int, path: Optional[str]) -> CorruptDataError:
    return CorruptDataError(
        f"Detected offset overflow at offset {batch.last_offset} in segment with base offset {base_offset}: "
        "Kafka splits such a segment (LogSegmentOffsetOverflowException); kstore does not",
        path=path, position=batch.position,
    )


def _batch_problem(batch: Batch, base_offset: int,
                   path: Optional[str]) -> Tuple[Optional[KstoreError], Optional[str]]:
    """Why recovery stops at this batch (the error and its kind), or (None, None)."""
    try:
        batch.ensure_valid()
        batch.ensure_valid_offsets()
    except CorruptRecordError as e:
        return e, CORRUPT_BATCH
    except InvalidRecordError as e:
        # LogSegment.recover truncates at an InvalidRecordException as at a CRC failure.
        return e, INVALID_OFFSETS
    last = batch.last_offset
    if last - base_offset < 0 or last - base_offset > MAX_INT32:
        return _offset_overflow(batch, base_offset, path), OFFSET_OVERFLOW
    return None, None


def _first_offset(batch: Batch, last: int) -> int:
    try:
        return batch.base_offset  # a legacy wrapper decompresses here, once
    except KstoreError:
        return last


def _update_producer_state(batch: Batch, state: Optional[StateT], producer_state: Callable[[], StateT],
                           aborted: List[AbortedTxn]) -> Tuple[Optional[StateT], Optional[KstoreError]]:
    """The producer state after a v2 batch with a producer id (taken from `producer_state` at the first
    transactional or control batch), and the error that makes the batch invalid, if any."""
    if state is None and (batch.is_transactional or batch.is_control):
        state = producer_state()
    if state is not None:
        try:
            txn = state.update(batch)
        except (InvalidRecordError, CorruptDataError) as e:
            # Kafka counted the batch as valid before updating producer state.
            return state, e
        if txn is not None:
            aborted.append(txn)
    return state, None


def _recover_batches(
    buf: memoryview,
    result: RecoveryResult,
    builder: SegmentIndexBuilder,
    producer_state: Callable[[], StateT],
    on_batch: Optional[BatchSink],
) -> Tuple[Optional[StateT], Optional[KstoreError], Optional[str]]:
    """LogSegment.recover's loop: each batch validated, indexed and applied to the producer state, up to
    the first that fails. Fills `result`'s scan fields; returns the producer state (None when never
    needed) and the error that ended the walk with its kind (None, None at the end of the file)."""
    base_offset, path = result.base_offset, result.path
    state: Optional[StateT] = None
    exc: Optional[KstoreError] = None
    kind: Optional[str] = None
    magics, codecs, pids = result.magics, result.codecs, result.producer_ids
    recovered_batch = builder.recovered_batch
    valid = n = records = 0
    first_offset = last_offset = min_ts = None
    try:
        for batch in read_batches(buf, path=path, check_crc=True):
            exc, kind = _batch_problem(batch, base_offset, path)
            if exc is not None:
                break
            last, position, max_ts = batch.last_offset, batch.position, batch.max_timestamp
            try:
                recovered_batch(position, batch.size, last, max_ts)
            except IndexAppendError as e:
                exc, kind = e, OFFSETS_NOT_INCREASING
                break
            valid = position + batch.size
            magic = batch.magic
            magics.add(magic)
            codecs.add(batch.compression)
            if first_offset is None:
                first_offset = _first_offset(batch, last)
            last_offset = last
            if max_ts >= 0 and (min_ts is None or max_ts < min_ts):
                min_ts = max_ts
            n += 1
            if on_batch is not None:
                on_batch(position, batch.base_offset if magic >= 2 else None, last, max_ts)
            if magic >= 2:
                records += batch.count
                if batch.producer_id >= 0:
                    pids.add(batch.producer_id)
                    state, exc = _update_producer_state(batch, state, producer_state, result.aborted)
                    if exc is not None:
                        kind = INVALID_CONTROL
                        break
    except CorruptRecordError as e:  # a size field below 14
        exc, kind = e, BAD_SIZE
    result.valid_bytes, result.batches, result.records_known = valid, n, records
    result.first_offset, result.last_offset, result.min_timestamp = first_offset, last_offset, min_ts
    return state, exc, kind


def recover_log(
    source: Union[str, bytes, bytearray, memoryview],
    base_offset: int,
    producer_state: Callable[[], StateT],
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    path: Optional[str] = None,
    on_batch: Optional[BatchSink] = None,
) -> Tuple[RecoveryResult, Optional[StateT]]:
    """LogSegment.recover over one segment's bytes (a path or a buffer), in memory: nothing is written.

    `producer_state` is called (at most once, at the first transactional or control batch with a
    producer id) for the producer state at the segment's base offset. `on_batch` sees every batch
    recovery accepts, in file order. Returns the result and the producer state at the end of the
    valid data (None when the segment never needed it).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = memoryview(source)
    else:
        path = os.fspath(source) if path is None else path
        buf = map_file(source)
    size = len(buf)
    result = RecoveryResult(base_offset, path, size)
    builder = SegmentIndexBuilder(base_offset, index_interval_bytes, path)
    state, exc, kind = _recover_batches(buf, result, builder, producer_state, on_batch)
    if result.valid_bytes < size or kind in (OFFSET_OVERFLOW, OFFSETS_NOT_INCREASING):
        result.problem = _classify_tail(buf, result.valid_bytes, size, exc, kind)
    builder.finish()
    result.max_timestamp = builder.max_timestamp
    result.offset_of_max_timestamp = builder.offset_of_max_timestamp
    result.index_bytes = builder.offset_index_bytes()
    result.timeindex_bytes = builder.time_index_bytes()
    return result, state


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
        other._size = _getsize(self.log)
        other._mtime_ms = mtime_ms(self.log)
        other._index_bytes = _getsize(self.index) if self.index else 0
        other._timeindex_bytes = _getsize(self.timeindex) if self.timeindex else 0
        other._next, other._txns = None, None
        return other

    @property
    def log_size(self) -> int:
        """The ``.log``'s size now."""
        return _getsize(self.log)

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
            self._index_bytes = _getsize(self.index) if self.index else 0
        return self._index_bytes

    @index_bytes.setter
    def index_bytes(self, value: int) -> None:
        self._index_bytes = value

    @property
    def timeindex_bytes(self) -> int:
        if self._timeindex_bytes is None:
            self._timeindex_bytes = _getsize(self.timeindex) if self.timeindex else 0
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
        except RemoteReadError:
            raise  # no damage: the object could not be read
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
        if not 0 <= position <= _getsize(self.log):
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

    def recover(self, producer_state: Callable[[], StateT], *,
                index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                on_batch: Optional[BatchSink] = None) -> Tuple[RecoveryResult, Optional[StateT]]:
        """LogSegment.recover, in memory (:func:`recover_log` over the ``.log``)."""
        return recover_log(self.log, self.base_offset, producer_state,
                           index_interval_bytes=index_interval_bytes, on_batch=on_batch)

    def __repr__(self) -> str:
        return f"LogSegment({self.base_offset})"
