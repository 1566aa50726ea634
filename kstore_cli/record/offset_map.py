"""The cleaner's key -> latest offset map, bounded like Kafka's ``SkimpyOffsetMap``.

Kafka's map is one ``ByteBuffer`` of ``log.cleaner.dedupe.buffer.size / threads`` bytes, used
as an open-addressing hash table. Each slot is 24 bytes::

    0  hash    16 bytes   MD5 of the key's bytes (CleanerConfig.HASH_ALGORITHM)
    16 offset  int64      big-endian

Keys are compared **only by their MD5**; a slot whose 24 bytes are all zero is empty. Probe
``i`` of a hash reads a big-endian int32 at byte ``min(i, 12)`` of the hash and adds
``max(0, i - 12)`` (32-bit wrapping), slot = ``Utils.abs(probe) % slots``.

kstore keeps the same layout but does not touch all of it up front. A small map (few keys, the
common case) lives in a ``bytearray`` that starts at 4096 slots and doubles (rehashing) when it
is 70 % full. Once doubling would pass 1/64 of the buffer, the entries move to Kafka's full
table: ``slots = memory // 24`` slots in an anonymous ``mmap``, whose zero pages cost no memory
until a slot on them is written (at that switch about 85 % of its pages get touched, and the
small table is 1/64 of the buffer, so the peak stays below the buffer). The full table takes
entries up to Kafka's cap, ``int(slots * load_factor)``, with Kafka's exact slot layout. Memory
therefore never exceeds the dedupe buffer, and because equality is by MD5 and the cap is
Kafka's, every answer (``get``, ``size``, where a pass stops when the map is full) is the one
Kafka's map gives.
"""

from __future__ import annotations

import hashlib
import mmap
import struct

HASH_SIZE = 16  # MD5 digest length
BYTES_PER_ENTRY = HASH_SIZE + 8  # hash + int64 offset
#: Kafka's log.cleaner.dedupe.buffer.size default (128 MiB).
DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024
#: Kafka's log.cleaner.io.buffer.load.factor default.
DEFAULT_LOAD_FACTOR = 0.9

_OFFSET = struct.Struct(">q")
_PROBE = struct.Struct(">i")
_EMPTY = bytes(BYTES_PER_ENTRY)
_INITIAL_SLOTS = 1 << 12
_GROW_AT = 0.7
_SMALL_FRACTION = 64  # a small table stays below memory / 64


def _full_table(slots: int) -> mmap.mmap:
    """Kafka's whole table, zero-filled; its pages become resident only when written."""
    return mmap.mmap(-1, slots * BYTES_PER_ENTRY)


def _slot_of(digest: bytes, attempt: int, slots: int) -> int:
    """SkimpyOffsetMap.positionOf, as a slot number."""
    probe = _PROBE.unpack_from(digest, min(attempt, HASH_SIZE - 4))[0] + max(0, attempt - HASH_SIZE + 4)
    probe = ((probe + 0x80000000) & 0xFFFFFFFF) - 0x80000000  # Java int addition wraps
    if probe == -0x80000000:
        probe = 0  # Utils.abs(Integer.MIN_VALUE) == 0
    return abs(probe) % slots


class OffsetMap:
    """MD5(key) -> offset, latest put wins (``put``, ``get``, ``latest_offset``, ``size``)."""

    __slots__ = ("memory", "max_slots", "max_entries", "_slots", "_table", "_entries", "latest_offset")

    def __init__(self, memory: int = DEFAULT_DEDUPE_BUFFER_BYTES, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        #: The dedupe buffer this map stands for (bytes).
        self.memory = memory
        #: Kafka's slot count: memory / 24.
        self.max_slots = memory // BYTES_PER_ENTRY
        #: Cleaner.buildOffsetMapForSegment's maxDesiredMapSize.
        self.max_entries = int(self.max_slots * load_factor)
        if self.max_entries < 1:
            raise ValueError("offset map is too small to fit in even a single message, so log cleaning "
                             "will never make progress; increase the dedupe buffer")
        self._slots = 0
        self._table: "bytearray | mmap.mmap" = bytearray()
        self._entries = 0
        self.clear()
        #: The latest offset put (or set by update_latest_offset); -1 when empty.
        self.latest_offset = -1

    @property
    def slots(self) -> int:
        """Kafka's slot count (what capacity and utilization are measured against)."""
        return self.max_slots

    @property
    def size(self) -> int:
        """Entries put (distinct MD5s)."""
        return self._entries

    @property
    def utilization(self) -> float:
        return self._entries / self.max_slots if self.max_slots else 0.0

    @property
    def allocated_bytes(self) -> int:
        """Bytes the table holds now (at most ``memory``)."""
        return len(self._table)

    @property
    def full(self) -> bool:
        """Kafka's check before every put: ``map.size < maxDesiredMapSize`` no longer holds."""
        return self._entries >= self.max_entries

    def clear(self) -> None:
        """An empty map (SkimpyOffsetMap.clear)."""
        if _INITIAL_SLOTS * BYTES_PER_ENTRY * _SMALL_FRACTION >= self.memory:
            self._slots = self.max_slots
            self._table = _full_table(self.max_slots)
        else:
            self._slots = _INITIAL_SLOTS
            self._table = bytearray(self._slots * BYTES_PER_ENTRY)
        self._entries = 0
        self.latest_offset = -1

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    # The two hot methods: one MD5, then probes over the bytearray.
    def put(self, key: "bytes | memoryview", offset: int) -> None:
        """Associate `offset` with the key's MD5 (overwriting), and make it the latest offset."""
        digest = hashlib.md5(key).digest()
        self._put_digest(digest, offset)
        self.latest_offset = offset

    def _put_digest(self, digest: bytes, offset: int) -> None:
        table = self._table
        slots = self._slots
        attempt = 0
        while True:
            pos = _slot_of(digest, attempt, slots) * BYTES_PER_ENTRY
            if table[pos : pos + BYTES_PER_ENTRY] == _EMPTY:
                break
            if table[pos : pos + HASH_SIZE] == digest:
                _OFFSET.pack_into(table, pos + HASH_SIZE, offset)  # an existing entry: size unchanged
                return
            attempt += 1
        table[pos : pos + HASH_SIZE] = digest
        _OFFSET.pack_into(table, pos + HASH_SIZE, offset)
        self._entries += 1
        if self._slots < self.max_slots and self._entries > self._slots * _GROW_AT:
            self._grow()

    def get(self, key: "bytes | memoryview") -> int:
        """The offset stored for the key's MD5, or -1 (SkimpyOffsetMap.get)."""
        digest = hashlib.md5(key).digest()
        table = self._table
        slots = self._slots
        max_attempts = slots + HASH_SIZE - 4
        attempt = 0
        while attempt < max_attempts:
            pos = _slot_of(digest, attempt, slots) * BYTES_PER_ENTRY
            if table[pos : pos + BYTES_PER_ENTRY] == _EMPTY:
                return -1
            if table[pos : pos + HASH_SIZE] == digest:
                return _OFFSET.unpack_from(table, pos + HASH_SIZE)[0]
            attempt += 1
        return -1

    def _grow(self) -> None:
        """Double the small table, or move to Kafka's full table; re-insert every entry."""
        old = self._table
        doubled = self._slots * 2
        if doubled * BYTES_PER_ENTRY * _SMALL_FRACTION > self.memory or doubled >= self.max_slots:
            self._slots = self.max_slots
            self._table = _full_table(self.max_slots)
        else:
            self._slots = doubled
            self._table = bytearray(doubled * BYTES_PER_ENTRY)
        self._entries = 0
        view = memoryview(old)
        for pos in range(0, len(old), BYTES_PER_ENTRY):
            if view[pos : pos + BYTES_PER_ENTRY] != _EMPTY:
                self._put_digest(bytes(view[pos : pos + HASH_SIZE]), _OFFSET.unpack_from(old, pos + HASH_SIZE)[0])
