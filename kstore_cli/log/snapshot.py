"""Producer-state snapshots (``<offset>.snapshot``, ProducerStateManager).

Layout, big-endian::

    0  version      int16    1
    2  crc          uint32   CRC-32C of bytes [6, end of file)
    6  count        int32
    10 entries      count x 46 bytes:
         producerId int64, epoch int16, lastSequence int32, lastOffset int64,
         offsetDelta int32, timestamp int64, coordinatorEpoch int32,
         currentTxnFirstOffset int64

Entries are in the broker's HashMap order; they are kept in file order.
"""

from __future__ import annotations

import os
import struct
from typing import List, Optional

from kstore_cli.errors import CorruptSnapshotError
from kstore_cli.record.batch import decrement_sequence
from kstore_cli.record.crc import crc32c
from kstore_cli.log.names import base_offset_from_name
from kstore_cli.record.reader import map_file

SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, count
PRODUCER_ENTRY = struct.Struct(">qhiqiqiq")
PRODUCER_ENTRIES_OFFSET = 6  # the CRC covers from the count to the end
SNAPSHOT_VERSION = 1


class ProducerEntry:
    """One producer's state in a snapshot."""

    __slots__ = (
        "producer_id",
        "producer_epoch",
        "last_sequence",
        "last_offset",
        "offset_delta",
        "timestamp",
        "coordinator_epoch",
        "current_txn_first_offset",
    )

    def __init__(self, producer_id: int, producer_epoch: int, last_sequence: int, last_offset: int,
                 offset_delta: int, timestamp: int, coordinator_epoch: int, current_txn_first_offset: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_sequence = last_sequence
        self.last_offset = last_offset
        self.offset_delta = offset_delta
        self.timestamp = timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def has_batch_metadata(self) -> bool:
        """Kafka keeps one batch-metadata item when lastOffset >= 0."""
        return self.last_offset >= 0

    @property
    def first_sequence(self) -> int:
        return decrement_sequence(self.last_sequence, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta

    @property
    def open_transaction_first_offset(self) -> Optional[int]:
        """First offset of the open transaction, None when none is open."""
        return self.current_txn_first_offset if self.current_txn_first_offset >= 0 else None

    def pack(self) -> bytes:
        return PRODUCER_ENTRY.pack(
            self.producer_id, self.producer_epoch, self.last_sequence, self.last_offset, self.offset_delta,
            self.timestamp, self.coordinator_epoch, self.current_txn_first_offset,
        )

    def __repr__(self) -> str:
        return f"ProducerEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, last_offset={self.last_offset})"


class ProducerSnapshot:
    """A parsed snapshot file."""

    def __init__(self, path: Optional[str], offset: Optional[int], version: int, crc: int, producers: List[ProducerEntry]) -> None:
        self.path = path
        self.offset = offset
        self.version = version
        self.crc = crc
        self.producers = producers


def parse_snapshot(data: "bytes | memoryview", path: Optional[str] = None) -> ProducerSnapshot:
    """Parse and verify snapshot bytes; raises CorruptSnapshotError with Kafka's messages."""
    buf = memoryview(data)
    if len(buf) < 2:
        raise CorruptSnapshotError("Snapshot failed schema validation: null", path=path)
    (version,) = struct.unpack_from(">h", buf, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: Snapshot contained an unknown file version {version}", path=path
        )
    if len(buf) < SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError("Snapshot failed schema validation: null", path=path)
    _version, crc, count = SNAPSHOT_HEADER.unpack_from(buf, 0)
    if count < 0:
        raise CorruptSnapshotError(
            "Snapshot failed schema validation: non-nullable field producerEntries was serialized as null", path=path
        )
    end = SNAPSHOT_HEADER.size + count * PRODUCER_ENTRY.size
    if end > len(buf):
        raise CorruptSnapshotError("Snapshot failed schema validation: null", path=path)
    producers = [
        ProducerEntry(*PRODUCER_ENTRY.unpack_from(buf, SNAPSHOT_HEADER.size + i * PRODUCER_ENTRY.size))
        for i in range(count)
    ]
    computed = crc32c(buf[PRODUCER_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}", path=path
        )
    offset = None
    if path is not None:
        try:
            offset = base_offset_from_name(path)
        except Exception:
            offset = None
    return ProducerSnapshot(path, offset, version, crc, producers)


def read_snapshot(path: "str | os.PathLike[str]") -> ProducerSnapshot:
    """Read and verify a ``.snapshot`` file."""
    path = os.fspath(path)
    return parse_snapshot(map_file(path), path)


def build_snapshot(producers: List[ProducerEntry]) -> bytes:
    """Snapshot bytes for these producers, in the given order."""
    body = struct.pack(">i", len(producers)) + b"".join(p.pack() for p in producers)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body
