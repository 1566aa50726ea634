"""Offset index (``.index``) and time index (``.timeindex``) files.

Entries, big-endian, no header and no count (the file length decides)::

    .index      relativeOffset int32, position int32        (8 bytes)
    .timeindex  timestamp int64, relativeOffset int32        (12 bytes)

The base offset comes from the file name. An untrimmed (preallocated) file of
the active segment counts every slot as an entry, zero slots included, exactly
as Kafka's reader does; :attr:`IndexFile.zero_tail_start` tells where the
unwritten zero slots begin.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Callable, Iterator, List, Optional, Tuple

from kstore_cli.errors import CorruptIndexError
from kstore_cli.java import MAX_INT32
from kstore_cli.log.names import base_offset_from_name
from kstore_cli.record.reader import release_pages, map_file

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_WARM_BYTES = 8192  # AbstractIndex: the hot tail searched first


def _data_end(path: str, length: int) -> int:
    """Where the file's last data extent ends (SEEK_DATA/SEEK_HOLE), `length` when that cannot be told."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return length
    try:
        end = pos = 0
        while pos < length:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after pos
                    break
                return length
            end = pos = os.lseek(fd, start, os.SEEK_HOLE)
        return min(end, length)
    except (AttributeError, OSError):
        return length
    finally:
        os.close(fd)


class IndexFile:
    """Shared behaviour of the offset and time index: slots, length, lookups."""

    entry_size = 0
    _entry = OFFSET_ENTRY

    def __init__(self, path: "str | os.PathLike[str]", base_offset: Optional[int] = None) -> None:
        self.path = os.fspath(path)
        self.base_offset = base_offset_from_name(self.path) if base_offset is None else base_offset
        self._buf = map_file(self.path)
        self.length = len(self._buf)
        self._zero_tail_start: Optional[int] = None

    @property
    def entries(self) -> int:
        """Entries as Kafka counts them: floor(length / entry size), zero slots included."""
        return self.length // self.entry_size

    def __len__(self) -> int:
        return self.entries

    def raw_entry(self, n: int) -> Tuple[int, int]:
        return self._entry.unpack_from(self._buf, n * self.entry_size)

    #: How Kafka's sanity check names the file kind in its size message.
    size_label = "Index file"

    def size_problem(self) -> Optional[str]:
        """Kafka's message when the length is not a whole number of entries, else None."""
        if self.length % self.entry_size == 0:
            return None
        return (
            f"{self.size_label} {os.path.abspath(self.path)} is corrupt, found {self.length} bytes "
            f"which is neither positive nor a multiple of {self.entry_size}"
        )

    def is_zero_slot(self, n: int) -> bool:
        """Whether slot n holds only zeros (an unwritten, preallocated slot)."""
        size = self.entry_size
        return self._buf[n * size : (n + 1) * size] == bytes(size)

    def slot_for(self, target: int, *, entries: Optional[int] = None,
                 on_read: Optional[Callable[[], None]] = None) -> int:
        """AbstractIndex.largestLowerBoundSlotFor on the entry key (offset or timestamp) over the first
        `entries` slots (all by default), -1 when every key is above `target`; `on_read` is called for
        every slot read."""
        def key(n: int) -> int:
            if on_read is not None:
                on_read()
            return self.entry(n)[0]

        return largest_lower_bound_slot(self.entries if entries is None else entries, self.entry_size, target, key)

    def zero_tail_start(self) -> int:
        """Index of the first trailing all-zero slot (== entries when there is none); worked out once."""
        if self._zero_tail_start is None:
            self._zero_tail_start = self._find_zero_tail()
        return self._zero_tail_start

    def _find_zero_tail(self) -> int:
        size = self.entry_size
        # Backwards a chunk at a time (a sparse multi-GB index is all zeros: one slot at a time took hours);
        # a chunk is a whole number of slots.
        step = (1 << 20) // size
        n = self.entries
        if n > step:
            # Slots past the file's last data extent are holes, zeros by definition: not read at all (a file
            # of one chunk or less is read whole: cheaper than asking for its extents).
            n = min(n, -(-_data_end(self.path, self.length) // size))
        buf = self._buf
        while n > 0:
            lo = max(0, n - step)
            chunk = bytes(buf[lo * size : n * size])
            if chunk.count(0) != len(chunk):
                break
            release_pages(buf, lo * size, n * size)  # walked past: keep RSS flat
            n = lo
        zero = b"\x00" * size
        while n > 0 and buf[(n - 1) * size : n * size] == zero:
            n -= 1
        return n


class OffsetIndex(IndexFile):
    """A ``.index`` file: (absolute offset, position) entries."""

    entry_size = OFFSET_ENTRY.size

    def entry(self, n: int) -> Tuple[int, int]:
        """(absolute offset, position) of slot n."""
        relative, position = OFFSET_ENTRY.unpack_from(self._buf, n * 8)
        return self.base_offset + relative, position

    def __iter__(self) -> Iterator[Tuple[int, int]]:
        base = self.base_offset
        for relative, position in OFFSET_ENTRY.iter_unpack(self._buf[: self.entries * OFFSET_ENTRY.size]):
            yield base + relative, position

    def last_offset(self) -> int:
        """Offset of the last slot (the base offset when empty), as Kafka's lastOffset."""
        return self.entry(self.entries - 1)[0] if self.entries else self.base_offset

    def sanity_check(self) -> None:
        """Kafka's OffsetIndex.sanityCheck; raises CorruptIndexError."""
        path = os.path.abspath(self.path)
        if self.entries != 0 and self.last_offset() < self.base_offset:
            raise CorruptIndexError(
                f"Corrupt index found, index file {path} has non-zero size but the last offset "
                f"is {self.last_offset()} which is less than the base offset {self.base_offset}",
                path=self.path,
            )
        if self.size_problem():
            raise CorruptIndexError(self.size_problem(), path=self.path)

    def lookup(self, target: int) -> Tuple[int, int]:
        """Largest entry with offset <= target, or (base offset, 0): OffsetIndex.lookup."""
        slot = self.slot_for(target)
        if slot == -1:
            return self.base_offset, 0
        return self.entry(slot)


class TimeIndex(IndexFile):
    """A ``.timeindex`` file: (timestamp, absolute offset) entries."""

    entry_size = TIME_ENTRY.size
    _entry = TIME_ENTRY
    size_label = "Time index file"

    def entry(self, n: int) -> Tuple[int, int]:
        """(timestamp, absolute offset) of slot n."""
        timestamp, relative = TIME_ENTRY.unpack_from(self._buf, n * 12)
        return timestamp, self.base_offset + relative

    def __iter__(self) -> Iterator[Tuple[int, int]]:
        base = self.base_offset
        for timestamp, relative in TIME_ENTRY.iter_unpack(self._buf[: self.entries * TIME_ENTRY.size]):
            yield timestamp, base + relative

    def last_entry(self) -> Tuple[int, int]:
        """The last slot, or (-1, base offset) when empty (TimeIndex.lastEntry)."""
        return self.entry(self.entries - 1) if self.entries else (-1, self.base_offset)

    def sanity_check(self) -> None:
        """Kafka's TimeIndex.sanityCheck; raises CorruptIndexError."""
        path = os.path.abspath(self.path)
        if self.entries != 0:
            last_ts, last_offset = self.last_entry()
            first_ts = self.entry(0)[0]
            if last_ts < first_ts:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                    f"timestamp is {last_ts} which is less than the first timestamp {first_ts}",
                    path=self.path,
                )
            if last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                    f"offset is {last_offset} which is less than the first offset {self.base_offset}",
                    path=self.path,
                )
        if self.size_problem():
            raise CorruptIndexError(self.size_problem(), path=self.path)

    def lookup(self, target_timestamp: int) -> Tuple[int, int]:
        """Largest entry with timestamp <= target, or (-1, base offset): TimeIndex.lookup."""
        slot = self.slot_for(target_timestamp)
        if slot == -1:
            return -1, self.base_offset
        return self.entry(slot)


def largest_lower_bound_slot(entries: int, entry_size: int, target: int, key: Callable[[int], int]) -> int:
    """AbstractIndex.largestLowerBoundSlotFor over `entries` slots of `entry_size` bytes: searches the
    warm tail first."""
    if entries == 0:
        return -1

    def bsearch(lo: int, hi: int) -> int:
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            k = key(mid)
            if k > target:
                hi = mid - 1
            elif k < target:
                lo = mid
            else:
                return mid
        return lo

    warm = _WARM_BYTES // entry_size
    first_hot = max(0, entries - 1 - warm)
    if key(first_hot) < target:
        return bsearch(first_hot, entries - 1)
    if key(0) > target:
        return -1
    return bsearch(0, first_hot)


# --------------------------------------------------------------------------- txnindex

ABORTED_TXN = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
ABORTED_TXN_SIZE = ABORTED_TXN.size  # 34


class AbortedTxn:
    """One ``.txnindex`` entry."""

    __slots__ = ("version", "producer_id", "first_offset", "last_offset", "last_stable_offset")

    def __init__(self, version: int, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> None:
        self.version = version
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.last_stable_offset = last_stable_offset

    def pack(self) -> bytes:
        return ABORTED_TXN.pack(self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AbortedTxn) and self.pack() == other.pack()

    def __repr__(self) -> str:
        return (
            f"AbortedTxn(version={self.version}, producerId={self.producer_id}, firstOffset={self.first_offset}, "
            f"lastOffset={self.last_offset}, lastStableOffset={self.last_stable_offset})"
        )


class TransactionIndex:
    """A ``.txnindex`` file: 34-byte aborted-transaction entries; a partial tail is ignored."""

    def __init__(self, path: "str | os.PathLike[str]", base_offset: Optional[int] = None) -> None:
        self.path = os.fspath(path)
        self.base_offset = base_offset_from_name(self.path) if base_offset is None else base_offset
        self._buf = map_file(self.path)
        self.length = len(self._buf)

    def __iter__(self) -> Iterator[AbortedTxn]:
        buf = self._buf
        for pos in range(0, self.length - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
            _v, pid, first, last, lso = ABORTED_TXN.unpack_from(buf, pos)
            # Kafka reads the version as one byte: the high byte of the int16 written.
            version = buf[pos]
            yield AbortedTxn(version, pid, first, last, lso)

    def entries(self) -> List[AbortedTxn]:
        return list(self)

    def sanity_check(self) -> None:
        """Kafka's TransactionIndex.sanityCheck; raises CorruptIndexError."""
        path = os.path.abspath(self.path)
        for txn in self:
            if txn.version > 0:
                raise CorruptIndexError(
                    f"Unexpected aborted transaction version {txn.version} in transaction index {path}, current version is 0",
                    path=self.path,
                )
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index {path} is less than start offset {self.base_offset}",
                    path=self.path,
                )


# --------------------------------------------------------------------------- writing

#: Kafka's default segment.index.bytes: the size a new (preallocated) index file gets.
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
#: Kafka's default index.interval.bytes.
DEFAULT_INDEX_INTERVAL_BYTES = 4096


class IndexAppendError(CorruptIndexError):
    """An entry cannot be appended (Kafka's InvalidOffsetException / IndexOffsetOverflowException)."""


def pack_offset_entries(base_offset: int, entries: List[Tuple[int, int]]) -> bytes:
    """``.index`` bytes for (absolute offset, position) entries."""
    out = bytearray(len(entries) * OFFSET_ENTRY.size)
    pack = OFFSET_ENTRY.pack_into
    for n, (offset, position) in enumerate(entries):
        pack(out, n * 8, offset - base_offset, position)
    return bytes(out)


def pack_time_entries(base_offset: int, entries: List[Tuple[int, int]]) -> bytes:
    """``.timeindex`` bytes for (timestamp, absolute offset) entries."""
    out = bytearray(len(entries) * TIME_ENTRY.size)
    pack = TIME_ENTRY.pack_into
    for n, (timestamp, offset) in enumerate(entries):
        pack(out, n * 12, timestamp, offset - base_offset)
    return bytes(out)


def pack_aborted_txns(entries: List[AbortedTxn]) -> bytes:
    """``.txnindex`` bytes for these entries, in order."""
    return b"".join(txn.pack() for txn in entries)


class SegmentIndexBuilder:
    """The ``.index`` and ``.timeindex`` of one segment, built in memory with Kafka's rules.

    Two feeding styles, matching the two places Kafka writes index entries:

    * :meth:`recovered_batch` - ``LogSegment.recover``: one call per batch, an
      offset entry (batch last offset, batch position) whenever the batch starts
      more than ``index_interval_bytes`` past the previous entry (§6.1);
    * :meth:`appended` - ``LogSegment.append``: one call per append (which may hold
      several batches), an entry (largest offset of the append, position of its
      start) when more than ``index_interval_bytes`` were appended since the last
      entry, counted before this append (§4.3).

    :meth:`finish` adds the time index's final entry (roll, close, end of recovery).
    Entries follow ``OffsetIndex.append`` and ``TimeIndex.maybeAppend``: offsets
    strictly increasing, timestamps appended only when strictly greater.
    """

    __slots__ = (
        "base_offset",
        "index_interval_bytes",
        "path",
        "max_timestamp",
        "offset_of_max_timestamp",
        "_index",
        "_timeindex",
        "_last_offset",
        "_last_time",
        "_last_entry_position",
        "_bytes_since_last_entry",
    )

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 path: Optional[str] = None) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.path = path
        # Entries are kept packed, as the files hold them (8 and 12 bytes each): a segment's index can have
        # hundreds of thousands of entries, and a tuple of two ints per entry cost ~15 times the file's size.
        self._index = bytearray()
        self._timeindex = bytearray()
        self._last_offset: Optional[int] = None  # offset of the last .index entry
        self._last_time: Optional[Tuple[int, int]] = None  # (timestamp, offset) of the last .timeindex entry
        # TimestampOffset read from an empty time index: (-1, base offset).
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._last_entry_position = 0
        self._bytes_since_last_entry = 0

    @property
    def index_entries(self) -> int:
        return len(self._index) // OFFSET_ENTRY.size

    @property
    def time_entries(self) -> int:
        return len(self._timeindex) // TIME_ENTRY.size

    @property
    def offsets(self) -> List[Tuple[int, int]]:
        """The offset index's (absolute offset, position) entries so far."""
        base = self.base_offset
        return [(base + relative, position) for relative, position in OFFSET_ENTRY.iter_unpack(self._index)]

    @property
    def times(self) -> List[Tuple[int, int]]:
        """The time index's (timestamp, absolute offset) entries so far."""
        base = self.base_offset
        return [(timestamp, base + relative) for timestamp, relative in TIME_ENTRY.iter_unpack(self._timeindex)]

    # -- Kafka's two primitive appends
    def append_offset(self, offset: int, position: int) -> None:
        """OffsetIndex.append: offset must be larger than the last one and fit in an int32."""
        relative = offset - self.base_offset
        if relative < 0 or relative > MAX_INT32:
            raise IndexAppendError(f"Integer overflow for offset: {offset} ({self.path})", path=self.path)
        last = self._last_offset
        if last is not None and offset <= last:
            raise IndexAppendError(
                f"Attempt to append an offset {offset} to position {self.index_entries} no larger than "
                f"the last offset appended ({last}) to {self.path}.",
                path=self.path,
            )
        self._index += OFFSET_ENTRY.pack(relative, position)
        self._last_offset = offset

    def maybe_append_time(self, timestamp: int, offset: int) -> None:
        """TimeIndex.maybeAppend: append only when timestamp > the last entry's."""
        if self._last_time is not None:
            last_ts, last_offset = self._last_time
            if offset < last_offset:
                raise IndexAppendError(
                    f"Attempt to append an offset ({offset}) to slot {self.time_entries} no larger than "
                    f"the last offset appended ({last_offset}) to {self.path}.",
                    path=self.path,
                )
            if timestamp < last_ts:
                raise IndexAppendError(
                    f"Attempt to append a timestamp ({timestamp}) to slot {self.time_entries} no larger than "
                    f"the last timestamp appended ({last_ts}) to {self.path}.",
                    path=self.path,
                )
        else:
            last_ts = -1
        if timestamp > last_ts:
            relative = offset - self.base_offset
            if relative < 0 or relative > MAX_INT32:
                raise IndexAppendError(f"Integer overflow for offset: {offset} ({self.path})", path=self.path)
            self._timeindex += TIME_ENTRY.pack(timestamp, relative)
            self._last_time = (timestamp, offset)

    # -- recovery (§6.1)
    def recovered_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        """One batch read back by recovery, at `position` (its start), `size` bytes long."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if position - self._last_entry_position > self.index_interval_bytes:
            self.append_offset(last_offset, position)
            self.maybe_append_time(self.max_timestamp, self.offset_of_max_timestamp)
            self._last_entry_position = position

    # -- the append path (§4.3), for the segment writer
    def appended(self, position: int, size: int, largest_offset: int, largest_timestamp: int,
                 offset_of_largest_timestamp: int) -> None:
        """One append call of `size` bytes starting at `position`."""
        if size <= 0:
            return
        if largest_timestamp > self.max_timestamp:
            self.max_timestamp = largest_timestamp
            self.offset_of_max_timestamp = offset_of_largest_timestamp
        if self._bytes_since_last_entry > self.index_interval_bytes:
            self.append_offset(largest_offset, position)
            self.maybe_append_time(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_last_entry = 0
        self._bytes_since_last_entry += size

    def finish(self) -> None:
        """The final time-index entry (onBecomeInactiveSegment / close / end of recover)."""
        self.maybe_append_time(self.max_timestamp, self.offset_of_max_timestamp)

    def offset_index_bytes(self) -> bytes:
        return bytes(self._index)

    def time_index_bytes(self) -> bytes:
        return bytes(self._timeindex)
