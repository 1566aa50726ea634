"""Kafka's ``ProducerStateManager`` as a broker has it once a partition is loaded: the newest readable
producer snapshot (``<offset>.snapshot``) at or below the log end, then every batch with a producer id
after it replayed as ``ProducerAppendInfo`` does (REPLICATION origin: no validation):

* a data batch sets the producer's epoch (a newer epoch starts afresh), last sequence, last offset and
  last timestamp (the batch's max timestamp); a transactional one opens a transaction at its base offset
  when none is open;
* a transaction marker (control batch) closes the open transaction, records the coordinator epoch and
  takes the marker's timestamp.

Producers are kept as snapshot entries (:class:`~kstore_cli.log.snapshot.ProducerEntry`).
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Optional, Tuple

from kstore_cli.errors import CorruptSnapshotError, InvalidRecordError, KstoreError, RemoteReadError
from kstore_cli.record.batch import RECORD_BATCH_OVERHEAD, Batch, parse_control_key, parse_end_txn_marker
from kstore_cli.log.index import AbortedTxn
from kstore_cli.log.logdir import Partition, Segment
from kstore_cli.record.reader import iterate_source, map_file, read_batches, release_pages
from kstore_cli.log import fileops, names
from kstore_cli.record import record_filter, storage
from kstore_cli.log.snapshot import ProducerEntry, build_snapshot, read_snapshot


RELEASE_EVERY = 8 * 1024 * 1024  # drop read pages of a mapped segment this often


def producer_batches(path: str) -> Iterator[Batch]:
    """The batches of a ``.log`` that can carry producer state, pages released as the scan passes
    them: runs of v2 batches without a producer id are skipped natively (record_filter.skip_anonymous),
    everything else is framed as the reader frames it (a damaged entry raises); a remote one in ranged reads."""
    if storage.is_uri(path):
        yield from read_batches(path)
        return
    buf = map_file(path)
    end = len(buf)
    pos = released = 0
    while True:
        # A window at a time, so that the pages skipped are released as often as the scan's.
        pos = record_filter.skip_anonymous(buf, pos, min(end, pos + RELEASE_EVERY))
        if pos - released >= RELEASE_EVERY:
            release_pages(buf, released, pos)
            released = pos
        for batch in iterate_source(buf, pos, end, path):
            pos = batch.position + batch.size
            if pos - released >= RELEASE_EVERY:
                release_pages(buf, released, pos)
                released = pos
            if batch.magic >= 2 and batch.producer_id < 0 and batch.size >= RECORD_BATCH_OVERHEAD:
                break  # an anonymous one: the native skip goes on from the next
            yield batch
        else:
            return


class ProducerStateManager:
    """The producers of one partition at its log end, and where that state came from."""

    def __init__(self) -> None:
        self.producers: Dict[int, ProducerEntry] = {}
        #: The offset the state is known up to (exclusive): Kafka's mapEndOffset.
        self.end_offset = 0
        #: "snapshot <file>, then the log from <offset>" or "the log from <offset>".
        self.source = "empty"
        #: Snapshots that could not be read (Kafka deletes them and rebuilds from the log).
        self.corrupt_snapshots: List[str] = []

    @classmethod
    def load(cls, partition: Partition, *, log_start_offset: Optional[int] = None,
             log_end_offset: Optional[int] = None) -> "ProducerStateManager":
        """The state after the whole log: the newest readable snapshot (at or below `log_end_offset` when
        given: Kafka deletes later ones as it loads), then the batches with a producer id from there, or from
        `log_start_offset` when that is later. A damaged batch ends the replay there, where Kafka's recovery
        would cut the log; an unreadable snapshot is passed over (Kafka deletes it and rebuilds)."""
        state = cls()
        first = partition.segments[0].base_offset if partition.segments else 0
        start = first if log_start_offset is None else max(first, log_start_offset)
        for offset in sorted(partition.snapshots, reverse=True):
            if log_end_offset is not None and offset > log_end_offset:
                continue
            path = partition.snapshots[offset]
            try:
                snapshot = read_snapshot(path)
            except RemoteReadError:
                raise  # no damage: the object could not be read
            except KstoreError:
                state.corrupt_snapshots.append(path)
                continue
            state.producers = {e.producer_id: e for e in snapshot.producers}
            start = offset if log_start_offset is None else max(offset, log_start_offset)
            state.source = f"snapshot {os.path.basename(path)}, then the log from offset {start}"
            break
        else:
            state.source = f"the log from offset {start}"
        state.end_offset = start
        segments = partition.segments
        for i, segment in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                continue  # wholly below the snapshot
            try:
                for batch in producer_batches(segment.log):
                    if batch.last_offset >= start:
                        state.update(batch)
            except RemoteReadError:
                raise  # no damage: the object could not be read
            except KstoreError:
                break
        return state

    @classmethod
    def replay(cls, partition: Partition) -> "ProducerStateManager":
        """The state from the log alone (every batch from the log start, no snapshot): what a log
        kstore just wrote holds."""
        state = cls()
        state.source = "the log from its start"
        for segment in partition.segments:
            for batch in read_batches(segment.log):
                state.update(batch)
        return state

    def write_snapshot(self, partition_dir: str, end_offset: int) -> str:
        """ProducerStateManager.takeSnapshot: ``<end offset>.snapshot`` in the partition dir (atomic)."""
        path = os.path.join(partition_dir, names.filename_prefix(end_offset) + names.SNAPSHOT_SUFFIX)
        fileops.atomic_write(path, build_snapshot(sorted(self.producers.values(), key=lambda e: e.producer_id)))
        return path

    def update(self, batch) -> None:
        """Apply one batch (REPLICATION origin)."""
        if batch.magic >= 2 and batch.producer_id >= 0:
            pid = batch.producer_id
            entry = self.producers.get(pid)
            if batch.is_control:
                self._marker(pid, entry, batch)
            else:
                self._data(pid, entry, batch)
        self.end_offset = batch.last_offset + 1

    def _data(self, pid: int, entry: Optional[ProducerEntry], batch) -> None:
        if entry is None or batch.producer_epoch != entry.producer_epoch:
            # A new epoch drops the producer's batch metadata; an open transaction stays (a fenced
            # producer's transaction is aborted by the coordinator's marker, not here).
            txn = entry.current_txn_first_offset if entry is not None else -1
            coordinator_epoch = entry.coordinator_epoch if entry is not None else -1
            entry = ProducerEntry(pid, batch.producer_epoch, -1, -1, 0, -1, coordinator_epoch, txn)
            self.producers[pid] = entry
        entry.last_sequence = batch.last_sequence
        entry.last_offset = batch.last_offset
        entry.offset_delta = batch.last_offset - batch.base_offset
        entry.timestamp = batch.max_timestamp
        if batch.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = batch.base_offset

    def _marker(self, pid: int, entry: Optional[ProducerEntry], batch) -> None:
        records = batch.records()
        if not records:
            return
        _version, type_id = parse_control_key(records[0].key)
        if type_id not in (0, 1):
            return  # not a transaction marker (KRaft control records): no producer state
        coordinator_epoch = parse_end_txn_marker(records[0].value)
        if entry is None:
            entry = ProducerEntry(pid, batch.producer_epoch, -1, -1, 0, -1, -1, -1)
            self.producers[pid] = entry
        elif entry.producer_epoch != batch.producer_epoch:
            # maybeUpdateProducerEpoch: a marker of a newer epoch clears the producer's batch metadata
            entry.last_sequence, entry.last_offset, entry.offset_delta = -1, -1, 0
        entry.producer_epoch = batch.producer_epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.timestamp = batch.max_timestamp

    def remove_expired_producers(self, now: int, expiration_ms: int) -> None:
        """ProducerStateManager.removeExpiredProducers: producers with no open transaction whose last write is
        ``producer.id.expiration.ms`` or more before `now` (a broker's load and its periodic expiry)."""
        for pid in [pid for pid, e in self.producers.items()
                    if e.current_txn_first_offset < 0 and now - e.timestamp >= expiration_ms]:
            del self.producers[pid]

    def last_records(self) -> Dict[int, Tuple[Optional[int], int]]:
        """UnifiedLog.lastRecordsOfActiveProducers: producer id -> (last data offset or None, epoch)."""
        return {pid: (e.last_offset if e.last_offset >= 0 else None, e.producer_epoch)
                for pid, e in self.producers.items()}

    def first_open_transaction(self) -> Optional[Tuple[int, int]]:
        """(first offset, producer id) of the open transaction that starts first, or None."""
        opens = self.open_transactions()
        return (opens[0].current_txn_first_offset, opens[0].producer_id) if opens else None

    def open_transactions(self) -> List[ProducerEntry]:
        """Producers with an open transaction, by its first offset."""
        return sorted((e for e in self.producers.values() if e.current_txn_first_offset >= 0),
                      key=lambda e: e.current_txn_first_offset)

    def first_unstable_offset(self) -> Optional[int]:
        """ProducerStateManager.firstUnstableOffset: the first offset of the oldest open transaction."""
        open_txns = self.open_transactions()
        return open_txns[0].current_txn_first_offset if open_txns else None

    def last_stable_offset(self, high_watermark: int) -> Tuple[int, str]:
        """UnifiedLog.lastStableOffset and why: the first unstable offset when below the high watermark."""
        first = self.first_unstable_offset()
        if first is not None and first < high_watermark:
            return first, "first unstable offset"
        return high_watermark, "high watermark"


# --------------------------------------------------------------------------- transactions only (recovery)


class TxnState:
    """The part of ProducerStateManager that transactions need.

    ``current``: producer id -> first offset of its open transaction;
    ``ongoing``: first offset -> producer id, for the last stable offset
    (ProducerStateManager keeps it in a TreeMap, ordered by first offset).
    """

    __slots__ = ("current", "ongoing", "end_offset", "source")

    def __init__(self, source: str = "empty") -> None:
        self.current: Dict[int, int] = {}
        self.ongoing: Dict[int, int] = {}
        #: The offset the state is known up to (exclusive), Kafka's mapEndOffset.
        self.end_offset = -1
        #: Where the state came from: "empty", "snapshot <path>", "replay from <offset>".
        self.source = source

    def copy(self) -> "TxnState":
        out = TxnState(self.source)
        out.current = dict(self.current)
        out.ongoing = dict(self.ongoing)
        out.end_offset = self.end_offset
        return out

    @classmethod
    def from_snapshot(cls, path: str) -> "TxnState":
        """State loaded from a ``.snapshot`` (raises CorruptSnapshotError)."""
        snapshot = read_snapshot(path)
        state = cls(f"snapshot {os.path.basename(path)}")
        for entry in snapshot.producers:
            first = entry.open_transaction_first_offset
            if first is not None:
                state.current[entry.producer_id] = first
                state.ongoing[first] = entry.producer_id
        state.end_offset = names.base_offset_from_name(path)
        return state

    def open_transactions(self) -> List[Tuple[int, int]]:
        """(producer id, first offset) of open transactions, by first offset."""
        return [(self.ongoing[first], first) for first in sorted(self.ongoing)]

    def last_stable_offset(self, producer_id: int, marker_offset: int) -> int:
        """ProducerStateManager.lastStableOffset: the earliest open transaction of another producer."""
        for first in sorted(self.ongoing):
            if self.ongoing[first] != producer_id:
                return first
        return marker_offset + 1

    def update(self, batch) -> Optional[AbortedTxn]:
        """Apply one v2 batch with a producer id (REPLICATION origin, no validation).

        Returns the AbortedTxn to index when the batch is an ABORT marker that
        completes a non-empty transaction. Raises InvalidRecordError for a marker
        that does not parse.
        """
        pid = batch.producer_id
        aborted = None
        if batch.is_control:
            records = batch.records()
            if records:
                record = records[0]
                _version, type_id = parse_control_key(record.key)
                if type_id not in (0, 1):
                    raise InvalidRecordError(
                        f"Invalid record type for end transaction marker: control type {type_id}"
                    )
                parse_end_txn_marker(record.value)
                first = self.current.get(pid)
                if first is not None:
                    if type_id == 0:
                        aborted = AbortedTxn(0, pid, first, batch.base_offset,
                                             self.last_stable_offset(pid, batch.base_offset))
                    del self.current[pid]
                    self.ongoing.pop(first, None)
        elif batch.is_transactional and pid not in self.current:
            first = batch.base_offset
            self.current[pid] = first
            self.ongoing[first] = pid
        self.end_offset = batch.last_offset + 1
        return aborted


def replay_txn_state(partition: Partition, upto_base_offset: int) -> TxnState:
    """Producer (transaction) state at a segment's base offset, by replaying earlier segments.

    Starts from the snapshot at the first segment's base offset when there is one,
    then applies every v2 batch with a producer id up to `upto_base_offset`
    (headers and markers only; CRCs are not checked, a damaged segment ends the replay).
    """
    segments = [s for s in partition.segments if s.base_offset < upto_base_offset]
    state = TxnState()
    if segments:
        snap = partition.snapshot_at(segments[0].base_offset)
        if snap is not None:
            try:
                state = TxnState.from_snapshot(snap)
            except CorruptSnapshotError:
                state = TxnState()
    state.source = f"replay from offset {segments[0].base_offset}" if segments else "empty"
    for segment in segments:
        try:
            for batch in read_batches(segment.log):
                if batch.magic >= 2 and batch.producer_id >= 0 and (batch.is_transactional or batch.is_control):
                    state.update(batch)
        except KstoreError:
            break
    return state


def state_at_segment(partition: Partition, segment: Segment) -> TxnState:
    """The snapshot at the segment's base offset when it is readable, else a replay."""
    snap = partition.snapshot_at(segment.base_offset)
    if snap is not None:
        try:
            return TxnState.from_snapshot(snap)
        except CorruptSnapshotError:
            pass
    return replay_txn_state(partition, segment.base_offset)
