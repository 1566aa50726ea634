"""Kafka's segment recovery (``LogSegment.recover``), offline.

One pass over a segment's batches, as recovery walks them:

* every batch is checked with ``ensure_valid`` (size and CRC, nothing decompressed)
  and its last offset must fit the segment's int32 relative range;
* the offset and time indexes are rebuilt by recovery's per-batch rule (§6.1),
  with :class:`~kstore_cli.segment.index.SegmentIndexBuilder`;
* producer state is tracked (only what transactions need) so every ABORT marker
  adds an ``AbortedTxn`` with the last stable offset Kafka computes;
* the pass stops at the first batch that fails, and what lies from there to the
  end of the file is classified: a partial batch, a CRC mismatch, a size field
  below 14, an invalid control record, or a zero-filled (preallocated) tail,
  which is reported as such and not as corruption.

Nothing here writes: :func:`recover_segment` returns the bytes Kafka would
leave; :func:`plan_partition` runs it over a partition the way LogLoader's
recovery does (producer state carried from segment to segment, everything after
a truncated segment dropped), and :func:`apply_plan` performs a plan through
:mod:`~kstore_cli.segment.fileops`.
"""

from __future__ import annotations

import datetime
import json
import operator
import os
from array import array
from bisect import bisect_left
from itertools import islice
from typing import Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import (
    CorruptDataError,
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidRecordError,
    KstoreError,
    UsageError,
)
from kstore_cli.segment import fileops, names
from kstore_cli.segment.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAX_INT32,
    parse_control_key,
    parse_end_txn_marker,
)
from kstore_cli.segment.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
)
from kstore_cli.segment.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    AbortedTxn,
    IndexAppendError,
    SegmentIndexBuilder,
    pack_aborted_txns,
)
from kstore_cli.segment.logdir import Partition, Segment
from kstore_cli.segment.reader import RELEASE_EVERY, release_pages, map_file, read_batches
from kstore_cli.segment.snapshot import read_snapshot

# Kinds of trouble found where the valid data of a segment ends.
ZERO_TAIL = "zero-filled-tail"  # preallocated (or sparse) zeros: not corruption
PARTIAL_BATCH = "partial-batch"  # the last batch runs past the end of the file
SHORT_TAIL = "short-tail"  # fewer bytes than a batch header
BAD_SIZE = "bad-size"  # a size field below 14 (LegacyRecord.RECORD_OVERHEAD_V0)
CORRUPT_BATCH = "corrupt-batch"  # ensureValid failed: CRC mismatch or a too-small batch
INVALID_CONTROL = "invalid-control-record"  # a transaction marker that does not parse
# Not cut by Kafka's recovery (it raises instead), so never cut by kstore either.
OFFSET_OVERFLOW = "offset-overflow"  # LogSegmentOffsetOverflowException: Kafka splits the segment
OFFSETS_NOT_INCREASING = "offsets-not-increasing"  # InvalidOffsetException: Kafka empties the segment

#: Kinds Kafka's recovery fixes by truncating the .log.
TRUNCATABLE = frozenset({ZERO_TAIL, PARTIAL_BATCH, SHORT_TAIL, BAD_SIZE, CORRUPT_BATCH, INVALID_CONTROL})

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


# --------------------------------------------------------------------------- producer state


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


# --------------------------------------------------------------------------- one segment


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

    def to_dict(self) -> dict:
        return {"kind": self.kind, "position": self.position, "tailBytes": self.tail_bytes, "message": self.message}

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


def recover_segment(
    source,
    base_offset: int,
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    txn_state: Optional[Callable[[], TxnState]] = None,
    path: Optional[str] = None,
    on_batch: Optional[BatchSink] = None,
) -> Tuple[RecoveryResult, Optional[TxnState]]:
    """Run LogSegment.recover over one segment (a path or a buffer), in memory.

    `txn_state` is called (at most once, at the first transactional or control
    batch with a producer id) for the producer state at the segment's base
    offset; it may also be omitted when there are no transactions. `on_batch`
    sees every batch recovery accepts, in file order. Returns the result and
    the producer state at the end of the valid data (None when the segment
    never needed it).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = memoryview(source)
    else:
        path = os.fspath(source) if path is None else path
        buf = map_file(source)
    size = len(buf)
    result = RecoveryResult(base_offset, path, size)
    builder = SegmentIndexBuilder(base_offset, index_interval_bytes, path)
    state: Optional[TxnState] = None
    valid = 0
    exc: Optional[KstoreError] = None
    kind: Optional[str] = None
    magics = result.magics
    codecs = result.codecs
    pids = result.producer_ids
    recovered_batch = builder.recovered_batch
    first_offset = None
    last_offset = None
    min_ts = None
    n = 0
    records = 0
    try:
        for batch in read_batches(buf, path=path, check_crc=True):
            try:
                batch.ensure_valid()
            except CorruptRecordError as e:
                exc, kind = e, CORRUPT_BATCH
                break
            last = batch.last_offset
            if last - base_offset < 0 or last - base_offset > MAX_INT32:
                kind = OFFSET_OVERFLOW
                exc = CorruptDataError(
                    f"Detected offset overflow at offset {last} in segment with base offset {base_offset}: "
                    "Kafka splits such a segment (LogSegmentOffsetOverflowException); kstore does not",
                    path=path, position=batch.position,
                )
                break
            position = batch.position
            max_ts = batch.max_timestamp
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
                try:
                    first_offset = batch.base_offset  # a legacy wrapper decompresses here, once
                except KstoreError:
                    first_offset = last
            last_offset = last
            if max_ts >= 0 and (min_ts is None or max_ts < min_ts):
                min_ts = max_ts
            n += 1
            if on_batch is not None:
                on_batch(position, batch.base_offset if magic >= 2 else None, last, max_ts)
            if magic >= 2:
                records += batch.count
                pid = batch.producer_id
                if pid >= 0:
                    pids.add(pid)
                    if state is None and (batch.is_transactional or batch.is_control):
                        state = txn_state() if txn_state is not None else TxnState()
                    if state is not None:
                        try:
                            aborted = state.update(batch)
                        except (InvalidRecordError, CorruptDataError) as e:
                            # Kafka counted the batch as valid before updating producer state.
                            exc, kind = e, INVALID_CONTROL
                            break
                        if aborted is not None:
                            result.aborted.append(aborted)
    except CorruptRecordError as e:  # a size field below 14
        exc, kind = e, BAD_SIZE
    result.valid_bytes = valid
    result.batches = n
    result.records_known = records
    result.first_offset = first_offset
    result.last_offset = last_offset
    result.min_timestamp = min_ts
    if valid < size or kind in (OFFSET_OVERFLOW, OFFSETS_NOT_INCREASING):
        result.problem = _classify_tail(buf, valid, size, exc, kind)
    builder.finish()
    result.max_timestamp = builder.max_timestamp
    result.offset_of_max_timestamp = builder.offset_of_max_timestamp
    result.index_bytes = builder.offset_index_bytes()
    result.timeindex_bytes = builder.time_index_bytes()
    return result, state


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


# --------------------------------------------------------------------------- a partition


class FileChange:
    """One file a rebuild writes (or would write)."""

    __slots__ = ("path", "action", "data", "reason")

    def __init__(self, path: str, action: str, data: bytes) -> None:
        self.path = path
        #: "create", "rewrite", "unchanged", or "kept" (differs from what recovery writes, but Kafka
        #: reads it right: another writer's layout, left alone by a selective rebuild).
        self.action = action
        self.data = data
        #: Why the file is written (a selective rebuild names the finding).
        self.reason: Optional[str] = None


class SegmentPlan:
    """The outcome of recovering one segment, and the index files that differ."""

    def __init__(self, segment: Segment, result: Optional[RecoveryResult], is_last: bool) -> None:
        self.segment = segment
        self.result = result
        self.is_last = is_last
        self.changes: List[FileChange] = []
        #: Why nothing was done for this segment (e.g. it lies after a damaged one).
        self.skipped: Optional[str] = None
        self.error: Optional[KstoreError] = None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "unreadable"
        if self.skipped is not None:
            return "skipped"
        problem = self.result.problem
        if problem is not None:
            return "zero-tail" if problem.kind == ZERO_TAIL else "damaged"
        if self.changed_files:
            return "rebuilt"
        return "unchanged"

    @property
    def changed_files(self) -> List[FileChange]:
        return [c for c in self.changes if c.action not in ("unchanged", "kept")]


class PartitionPlan:
    """Recovery of a partition's segments (LogLoader.recoverLog with recovery point 0)."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.segments: List[SegmentPlan] = []
        #: The segment whose tail is cut (Kafka deletes every later segment).
        self.damaged: Optional[SegmentPlan] = None
        #: Files of later segments, and snapshots past the new log end, that Kafka would delete.
        self.dropped_files: List[str] = []
        #: Producer (transaction) state after the last recovered segment, when any was needed.
        self.final_state: Optional[TxnState] = None

    @property
    def has_problems(self) -> bool:
        return any(s.error is not None or (s.result is not None and s.result.problem is not None) for s in self.segments)


def _file_holds(path: Optional[str], data: bytes) -> Optional[bool]:
    """Whether the file holds exactly `data` (None when it cannot be read), read 1 MiB at a time: an index
    of the wrong size is never read (a sparse 10 GB .index is not loaded to be told apart)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != len(data):
                return False
            view = memoryview(data)
            pos = 0
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    return pos == len(data)
                if view[pos : pos + len(chunk)] != chunk:
                    return False
                pos += len(chunk)
    except OSError:
        return None


def _changes_for(segment: Segment, result: RecoveryResult) -> List[FileChange]:
    changes = []
    for suffix, data, current_path in (
        (names.INDEX_SUFFIX, result.index_bytes, segment.index),
        (names.TIME_INDEX_SUFFIX, result.timeindex_bytes, segment.timeindex),
        (names.TXN_INDEX_SUFFIX, result.txnindex_bytes, segment.txnindex),
    ):
        target = segment.path(suffix)
        current = _file_holds(current_path, data)
        if current is None:
            # recover() creates .index/.timeindex; a .txnindex only once an entry is written.
            if suffix == names.TXN_INDEX_SUFFIX and not data:
                continue
            changes.append(FileChange(target, "create", data))
        elif not current:
            changes.append(FileChange(target, "rewrite", data))
        else:
            changes.append(FileChange(target, "unchanged", data))
    return changes


def plan_partition(
    partition: Partition,
    *,
    only: Optional[int] = None,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    progress: Optional[Callable[[int], None]] = None,
    stop_at_damage: bool = True,
    batch_sink: Optional[Callable[[Segment], Optional[BatchSink]]] = None,
    on_segment: Optional[Callable[[SegmentPlan], None]] = None,
) -> PartitionPlan:
    """Recover (in memory) every segment of a partition, or only the one at base offset `only`.

    Producer state is carried from segment to segment; a segment processed on its
    own takes it from the snapshot at its base offset or from a replay of the
    earlier segments. After a segment whose tail Kafka would cut, later segments
    are not recovered: their files (and snapshots past the new log end) are listed
    in ``dropped_files``, as LogLoader deletes them.

    `batch_sink(segment)`, called before a segment is recovered, may give the
    ``on_batch`` of its recovery; `on_segment` gets each segment's plan as soon as
    it is complete (so a caller can check a segment and drop what it gathered).
    """
    plan = PartitionPlan(partition)
    segments = partition.segments
    carried: Optional[TxnState] = None
    carried_upto: Optional[int] = None  # base offset of the segment the carried state is valid for
    for i, segment in enumerate(segments):
        if only is not None and segment.base_offset != only:
            continue
        is_last = i == len(segments) - 1
        splan = SegmentPlan(segment, None, is_last)
        plan.segments.append(splan)
        if plan.damaged is not None and stop_at_damage:
            splan.skipped = f"after the damaged segment {plan.damaged.segment.base_offset}, which Kafka's recovery cuts"
            if on_segment is not None:
                on_segment(splan)
            continue
        if carried is not None and carried_upto == segment.base_offset:
            start_state = carried
            factory = lambda s=start_state: s  # noqa: E731
        else:
            factory = lambda seg=segment: state_at_segment(partition, seg)  # noqa: E731
        try:
            result, state = recover_segment(
                segment.log, segment.base_offset, index_interval_bytes=index_interval_bytes,
                txn_state=factory, on_batch=batch_sink(segment) if batch_sink is not None else None,
            )
        except KstoreError as exc:
            splan.error = exc
            carried = None
            if on_segment is not None:
                on_segment(splan)
            continue
        if progress is not None:
            progress(result.log_size)
        splan.result = result
        if state is None and carried is not None and carried_upto == segment.base_offset:
            state = carried  # unchanged: no transactional batch in this segment
        if state is not None:
            plan.final_state = state
        if state is not None and i + 1 < len(segments):
            carried, carried_upto = state, segments[i + 1].base_offset
        else:
            carried, carried_upto = None, None
        splan.changes = _changes_for(segment, result)
        if result.problem is not None and result.truncated_bytes > 0 and plan.damaged is None:
            plan.damaged = splan
        if on_segment is not None:
            on_segment(splan)
    if plan.damaged is not None:
        new_end = plan.damaged.result.next_offset
        later = [s for s in segments if s.base_offset > plan.damaged.segment.base_offset]
        for s in later:
            for p in (s.log, s.index, s.timeindex, s.txnindex):
                if p is not None:
                    plan.dropped_files.append(p)
        for offset, snap in sorted(partition.snapshots.items()):
            if offset > new_end:
                plan.dropped_files.append(snap)
    return plan


# --------------------------------------------------------------------------- applying a plan


def default_quarantine_root(partition: Partition) -> str:
    """``<data dir>/../kstore-quarantine``: beside the data dir, never inside it (the broker
    refuses a data dir holding a directory that is not a partition)."""
    return os.path.join(os.path.dirname(partition.data_dir), "kstore-quarantine")


def utc_stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


class ApplyReport:
    """What :func:`apply_plan` did."""

    def __init__(self) -> None:
        self.written: List[str] = []
        self.truncated: List[Tuple[str, int, int]] = []  # (path, old size, new size)
        self.quarantined: List[Tuple[str, str]] = []  # (source, destination)
        self.quarantine_dir: Optional[str] = None


def apply_plan(plan: PartitionPlan, *, truncate: bool = False, quarantine_root: Optional[str] = None) -> ApplyReport:
    """Write the index files that differ; with `truncate`, also cut a damaged tail the way
    Kafka's recovery does, moving the cut bytes (and any later segments and stale
    snapshots) into ``<quarantine root>/<partition>/<UTC time>/``.

    Order, so that a crash at any step leaves a state a broker loads and a rerun completes:
    the quarantine dir gets its manifest (what is about to be moved and cut, and the checkpoint
    values about to be lowered); leader epochs and the data dir's offset checkpoints are brought
    down to the new log end; later segments are moved out (newest first, each .log after its other
    files); the tail is copied out (to a temporary name, then renamed: a tail file is complete); the
    .log is truncated; the indexes are written. A rerun after a crash finds the cut still to do (or
    done) and finishes it in the same quarantine dir (whose manifest matches the cut and whose tail,
    if copied, has the same bytes), so every cut byte is quarantined exactly once; kstore's own
    half-written temporary files in the partition's quarantine dirs are removed.
    """
    report = ApplyReport()
    damaged = plan.damaged
    if damaged is not None and truncate:
        _cut_tail(plan, damaged, quarantine_root, report)
    for splan in plan.segments:
        if splan.result is None or splan.skipped is not None:
            continue
        if splan.result.problem is not None and splan.result.truncated_bytes > 0 and not (truncate and splan is damaged):
            continue  # a damaged segment's indexes are only rebuilt together with the cut
        if splan.result.problem is not None and not splan.result.problem.truncatable:
            continue
        for change in splan.changed_files:
            fileops.atomic_write(change.path, change.data)
            report.written.append(change.path)
    return report


MANIFEST = "kstore-quarantine.json"


def _cut_tail(plan: PartitionPlan, damaged: SegmentPlan, quarantine_root: Optional[str], report: ApplyReport) -> None:
    result = damaged.result
    problem = result.problem
    partition = plan.partition
    root = quarantine_root or default_quarantine_root(partition)
    partition_root = os.path.join(os.path.abspath(root), partition.name)
    tidy_quarantine(partition_root)
    log = damaged.segment.log
    # Every file to be written here is checked first: none may be a link (or a FIFO...).
    fileops.refuse_links(fileops.partition_files(partition.path, partition.data_dir))
    checkpoint_writes = checkpoint_changes(partition, result.next_offset)
    checkpoints = [{k: v for k, v in c.items() if k != "_data"} for c in checkpoint_writes]

    # Newest segment first, and each segment's .log after its indexes: a crash in between leaves
    # the .log with what remains of its files (which the rerun moves), never an orphan index.
    def move_order(path: str) -> Tuple[int, bool, str]:
        name = os.path.basename(path)
        return (-int(name.split(".", 1)[0]), name.endswith(names.LOG_SUFFIX), name)

    resumed = _resumable_quarantine(partition_root, partition, log, result)
    if resumed is not None:
        qdir, manifest = resumed
    else:
        qdir, manifest = os.path.join(partition_root, utc_stamp()), None
        fileops.make_dirs(qdir, like=partition.path)
    report.quarantine_dir = qdir
    moves = [(path, os.path.join(qdir, os.path.basename(path))) for path in sorted(plan.dropped_files, key=move_order)]
    tail = None
    if problem.kind != ZERO_TAIL:
        tail = os.path.join(qdir, os.path.basename(log) + ".tail")
    new_manifest = {
        "partition": partition.path,
        "segment": log,
        "validBytes": result.valid_bytes,
        "logSizeBefore": result.log_size,
        "nextOffset": result.next_offset,
        "problem": problem.to_dict(),
        "tailFile": tail,
        "movedFiles": [{"from": a, "to": b} for a, b in moves],
        # What the cut lowered (a resumed cut keeps what the killed run already lowered): what
        # `kstore restore` puts back.
        "checkpoints": checkpoints,
        # The damaged segment's indexes as they were (the cut rewrites them for the shorter .log):
        # restore puts them back with the tail, or a clean load would miss the tail's aborted
        # transactions and time index entries. "copy" null: the file did not exist.
        "originalIndexes": _original_indexes(damaged.segment, qdir),
    }
    if manifest is not None:
        if "originalIndexes" in manifest:
            new_manifest["originalIndexes"] = manifest["originalIndexes"]
        seen = {m["from"] for m in new_manifest["movedFiles"]}
        new_manifest["movedFiles"] = [m for m in manifest.get("movedFiles", []) if m["from"] not in seen] + \
            new_manifest["movedFiles"]
        done = {c["file"] for c in checkpoints}
        earlier = [c for c in manifest.get("checkpoints", []) if c["file"] not in done]
        new_manifest["checkpoints"] = earlier + checkpoints
    if new_manifest != manifest:
        # The manifest first: a quarantine dir left by a killed run still says what it was for.
        fileops.atomic_write(os.path.join(qdir, MANIFEST), (json.dumps(new_manifest, indent=2) + "\n").encode())
    for entry in new_manifest["originalIndexes"]:
        if entry["copy"] is not None and not os.path.lexists(entry["copy"]):
            fileops.copy_file(entry["file"], entry["copy"])
    # Nothing may point past the new log end (so no crash from here on leaves a checkpoint
    # ahead of the files, and a rerun that no longer sees the cut has nothing left to do).
    for change in checkpoint_writes:
        fileops.atomic_write(change["file"], change["_data"])
    for path, dst in moves:
        if os.path.lexists(dst) and same_bytes(path, dst):
            fileops.unlink(path)  # a move across file systems killed between its copy and its delete
        else:
            fileops.move_file(path, dst)
        report.quarantined.append((path, dst))
    if tail is not None:
        if not os.path.lexists(tail):
            fileops.copy_range(log, tail + fileops.TMP_SUFFIX, result.valid_bytes, result.log_size)
            fileops.rename(tail + fileops.TMP_SUFFIX, tail)
        report.quarantined.append((f"{log}[{result.valid_bytes}:{result.log_size}]", tail))
    fileops.fsync_dir(qdir)
    if plan.dropped_files:
        fileops.fsync_dir(partition.path)
    fileops.truncate(log, result.valid_bytes)
    report.truncated.append((log, result.log_size, result.valid_bytes))


def _original_indexes(segment: Segment, qdir: str) -> List[dict]:
    """Where the cut keeps a copy of each index file of the damaged segment (see the manifest)."""
    entries = []
    for suffix in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX):
        path = segment.path(suffix)
        copy = os.path.join(qdir, os.path.basename(path) + ".orig") if os.path.isfile(path) else None
        entries.append({"file": path, "copy": copy})
    return entries


def same_bytes(a: str, b: str, a_start: int = 0, a_end: Optional[int] = None) -> bool:
    """Whether file b holds exactly bytes [a_start, a_end) of file a (read in chunks)."""
    try:
        size_a = os.path.getsize(a) if a_end is None else a_end
        if os.path.getsize(b) != size_a - a_start:
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            fa.seek(a_start)
            remaining = size_a - a_start
            while remaining > 0:
                n = min(remaining, 1 << 20)
                if fa.read(n) != fb.read(n):
                    return False
                remaining -= n
        return True
    except OSError:
        return False


def read_manifest(qdir: str) -> Optional[dict]:
    """A quarantine dir's manifest, or None when it has none or it does not parse."""
    try:
        with open(os.path.join(qdir, MANIFEST), "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _resumable_quarantine(partition_root: str, partition: Partition, log: str,
                          result: RecoveryResult) -> Optional[Tuple[str, dict]]:
    """The quarantine dir of a killed run of this very cut (same partition, segment, sizes, and a
    tail, if it was copied, with the bytes still beyond the cut), to finish it there: the cut
    bytes must be quarantined once, not once per run."""
    if not os.path.isdir(partition_root):
        return None
    for stamp in sorted(os.listdir(partition_root), reverse=True):
        qdir = os.path.join(partition_root, stamp)
        manifest = read_manifest(qdir)
        if manifest is None or manifest.get("restored"):
            continue
        try:
            same = (os.path.realpath(manifest["partition"]) == os.path.realpath(partition.path)
                    and os.path.basename(manifest["segment"]) == os.path.basename(log)
                    and manifest["validBytes"] == result.valid_bytes
                    and manifest["logSizeBefore"] == result.log_size)
        except (KeyError, TypeError):
            continue
        if not same:
            continue
        tail = manifest.get("tailFile")
        if tail and os.path.lexists(tail) and not same_bytes(log, tail, result.valid_bytes, result.log_size):
            continue
        return qdir, manifest
    return None


def tidy_quarantine(partition_root: str) -> None:
    """Remove what a killed run left half-done in earlier quarantine dirs of a partition: kstore's
    own temporary files and empty dirs. Quarantined data is never touched."""
    if not os.path.isdir(partition_root):
        return
    for stamp in sorted(os.listdir(partition_root)):
        qdir = os.path.join(partition_root, stamp)
        if not os.path.isdir(qdir) or os.path.islink(qdir):
            continue
        for name in sorted(os.listdir(qdir)):
            if name.endswith(fileops.TMP_SUFFIX):
                fileops.unlink(os.path.join(qdir, name))
        if not os.listdir(qdir):
            fileops.remove_empty_dir(qdir)


def checkpoint_changes(partition: Partition, end_offset: int) -> List[dict]:
    """What the cut must lower so that nothing points past the new log end, as LogLoader does:
    leader epochs starting at or after it are dropped (LeaderEpochFileCache.truncateFromEnd); the
    recovery point, high watermark and log start offset come down to it; a cleaner offset past it is
    dropped (LogCleanerManager resets it to the log start offset, as for no entry). Each change is
    {file, before, after} (per topic-partition for the data dir's checkpoints; null: no entry), with
    the new file's bytes under "_data"."""
    changes: List[dict] = []
    path = os.path.join(partition.path, LEADER_EPOCH_CHECKPOINT)
    if os.path.exists(path):
        try:
            entries = read_leader_epoch_checkpoint(path)
        except KstoreError:
            entries = None
        if entries is not None:
            kept = [(epoch, start) for epoch, start in entries if start < end_offset]
            if kept != entries:
                changes.append({"file": path, "before": [list(e) for e in entries], "after": [list(e) for e in kept],
                                "_data": format_leader_epoch_checkpoint(kept).encode()})
    key = (partition.topic, partition.partition)
    for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                 CLEANER_OFFSET_CHECKPOINT):
        path = os.path.join(partition.data_dir, name)
        if not os.path.isfile(path):
            continue
        try:
            entries = read_offset_checkpoint(path)
        except KstoreError:
            continue  # a damaged checkpoint: the broker ignores it as well; not ours to rewrite
        before = entries.get(key)
        if before is None or before <= end_offset:
            continue
        change = {"file": path, "topic": key[0], "partition": key[1], "before": before}
        if name == CLEANER_OFFSET_CHECKPOINT:
            change["line"] = list(entries).index(key)  # where restore puts the entry back
            del entries[key]
        else:
            entries[key] = end_offset
        change.update(after=entries.get(key), _data=format_offset_checkpoint(entries).encode())
        changes.append(change)
    return changes


def check_interval(value: int) -> int:
    if value < 0:
        raise UsageError(f"index interval must be >= 0, got {value}")
    return value


# --------------------------------------------------------------------------- verification

ERROR = "error"
NOTE = "note"


class Finding:
    """One thing verify found: an error (the partition is not healthy) or a note."""

    __slots__ = ("partition", "segment", "file", "severity", "check", "message")

    def __init__(self, partition: str, segment: Optional[int], file: Optional[str], severity: str,
                 check: str, message: str) -> None:
        self.partition = partition
        self.segment = segment
        self.file = file
        self.severity = severity
        self.check = check
        self.message = message

    def to_dict(self) -> dict:
        return {
            "partition": self.partition,
            "segment": self.segment,
            "file": self.file,
            "severity": self.severity,
            "check": self.check,
            "message": self.message,
        }

    def __repr__(self) -> str:
        return f"Finding({self.severity}, {self.check}, {self.file}: {self.message})"


def looks_preallocated(index_length: Optional[int], timeindex_length: Optional[int]) -> bool:
    """Whether the two lengths come from one ``segment.index.bytes`` value M, as a new active
    segment's files do: ``.index`` = floor(M/8)*8 and ``.timeindex`` = floor(M/12)*12."""
    if index_length is None or timeindex_length is None:
        return True
    return any((m // 12) * 12 == timeindex_length for m in range(index_length, index_length + 8))


def _length(path: Optional[str]) -> Optional[int]:
    try:
        return os.path.getsize(path) if path is not None else None
    except OSError:
        return None


def repair_plan(partition: Partition, *, only: Optional[int] = None,
                index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, all_indexes: bool = False,
                progress: Optional[Callable[[int], None]] = None) -> PartitionPlan:
    """What ``rebuild-index`` writes: the index files :func:`verify_partition` calls wrong (each with
    its finding as the reason), the missing ones and a crash's preallocated active-segment indexes,
    rebuilt as Kafka's recovery writes them; an index
    laid out by another writer (a leader of any Kafka version, a follower, the cleaner, another
    index.interval.bytes) that Kafka reads right is "kept". With `all_indexes`, every index that
    differs from recovery's is rewritten. A damaged segment's indexes go with its cut (they describe
    bytes the cut removes); segments after it are left to the cut (Kafka's recovery deletes them)."""
    if all_indexes:
        plan = plan_partition(partition, only=only, index_interval_bytes=index_interval_bytes, progress=progress)
        for splan in plan.segments:
            for change in splan.changed_files:
                change.reason = "--all" if change.action == "rewrite" else "missing"
        return plan
    findings, plan = verify_partition(partition, only=only, progress=progress,
                                      index_interval_bytes=index_interval_bytes)
    wrong: Dict[str, str] = {}
    for finding in findings:
        if finding.file is None or finding.file in wrong:
            continue
        if finding.severity == ERROR:
            wrong[finding.file] = f"{finding.check}: {finding.message}"
        elif finding.check.endswith(("-preallocated", "-sanity")):
            # A crash left the active segment's preallocated index (Kafka's sanity check rejects the time
            # index's zero slots; its recovery rebuilds both at startup). A clean shutdown trims them.
            wrong[finding.file] = f"{finding.check}: preallocated active-segment index left by a crash"
    damaged = plan.damaged
    for splan in plan.segments:
        if damaged is not None and splan.segment.base_offset > damaged.segment.base_offset:
            splan.skipped = f"after the damaged segment {damaged.segment.base_offset}, which Kafka's recovery cuts"
            splan.changes = []
            continue
        for change in splan.changes:
            if change.action == "unchanged":
                continue
            if splan is damaged:
                change.reason = f"the .log is cut at byte {damaged.result.valid_bytes}"
            elif change.action == "create":
                change.reason = wrong.get(change.path, "missing")
            elif change.path in wrong:
                change.reason = wrong[change.path]
            else:
                change.action = "kept"
    return plan


def verify_partition(partition: Partition, *, only: Optional[int] = None,
                     progress: Optional[Callable[[int], None]] = None,
                     index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> Tuple[List[Finding], PartitionPlan]:
    """Check every index of a partition against its .log, changing nothing.

    Offset index: Kafka's sanity checks, entry size, offsets and positions strictly
    increasing, each entry (o, p) at a batch start p with every earlier batch below o
    and o not past the segment (an entry of a multi-batch append carries the last
    offset of the append, which is fine). Time index: sanity checks, timestamps
    strictly increasing, each entry (t, o) naming a batch whose max timestamp is t
    and is the running maximum, the final entry of a rolled segment equal to the
    segment's max timestamp. Transaction index: equal to what recovery rebuilds.
    Zero slots at the end of the active segment's preallocated indexes are notes.
    """
    from kstore_cli.segment.index import OffsetIndex, TimeIndex, TransactionIndex

    name = partition.name
    findings: List[Finding] = []

    def add(segment, file, severity, check, message):
        findings.append(Finding(name, segment, file, severity, check, message))

    if only is None:
        for orphan in partition.orphan_indexes:
            add(names.base_offset_from_name(orphan), orphan, ERROR, "orphan-index",
                "index file without a .log (Kafka deletes it at startup)")
        for leftover in partition.leftovers:
            add(None, leftover, NOTE, "leftover-file", "left by an interrupted delete, clean or swap")
    # Each segment is checked as soon as it is recovered, against what its scan gathered at the
    # indexes' entries (nothing per batch is kept: a 1 GiB segment can hold millions of batches).
    at_entries: Optional[_BatchesAtEntries] = None

    def sink(segment: Segment) -> BatchSink:
        nonlocal at_entries
        at_entries = _BatchesAtEntries.of_indexes(segment)
        return at_entries.sink

    def check(splan: SegmentPlan) -> None:
        nonlocal at_entries
        batches, at_entries = at_entries, None
        seg = splan.segment
        base = seg.base_offset
        if splan.error is not None:
            add(base, seg.log, ERROR, "log-unreadable", str(splan.error.message))
            return
        result = splan.result
        problem = result.problem
        if problem is not None:
            if problem.kind == ZERO_TAIL and splan.is_last:
                add(base, seg.log, NOTE, "log-zero-tail",
                    f"{problem.tail_bytes} zero bytes after byte {problem.position} (preallocated active segment; "
                    "a broker's recovery trims them)")
            else:
                add(base, seg.log, ERROR, "log-" + problem.kind,
                    f"valid data ends at byte {problem.position}: {problem.message}")
        prealloc = splan.is_last and looks_preallocated(_length(seg.index), _length(seg.timeindex))
        # ---- .index
        if seg.index is None:
            add(base, seg.path(names.INDEX_SUFFIX), ERROR, "missing-index",
                "no .index (Kafka recovers the segment at startup to rebuild it)")
        else:
            try:
                idx = OffsetIndex(seg.index, base)
                _verify_offset_index(idx, result, batches, prealloc, add)
            except KstoreError as exc:
                add(base, seg.index, ERROR, "index-unreadable", str(exc.message))
        # ---- .timeindex
        if seg.timeindex is None:
            add(base, seg.path(names.TIME_INDEX_SUFFIX), ERROR, "missing-timeindex",
                "no .timeindex (Kafka creates an empty one at startup and does not rebuild it)")
        else:
            try:
                tidx = TimeIndex(seg.timeindex, base)
                _verify_time_index(tidx, result, batches, prealloc, splan.is_last, add)
            except KstoreError as exc:
                add(base, seg.timeindex, ERROR, "timeindex-unreadable", str(exc.message))
        # ---- .txnindex
        expected = result.aborted
        if seg.txnindex is None:
            if expected:
                add(base, seg.path(names.TXN_INDEX_SUFFIX), ERROR, "missing-txnindex",
                    f"no .txnindex, but the segment holds {len(expected)} ABORT marker(s) of non-empty transactions")
        else:
            try:
                txn = TransactionIndex(seg.txnindex, base)
                if txn.length % 34:
                    add(base, seg.txnindex, ERROR, "txnindex-size",
                        f"{txn.length} bytes is not a multiple of 34 (a partial trailing entry is ignored)")
                try:
                    txn.sanity_check()
                except KstoreError as exc:
                    add(base, seg.txnindex, ERROR, "txnindex-sanity", str(exc.message))
                got = txn.entries()
                if got != expected:
                    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                    detail = (f"entry {first}: found {got[first] if first < len(got) else 'nothing'}, "
                              f"expected {expected[first] if first < len(expected) else 'nothing'}")
                    add(base, seg.txnindex, ERROR, "txnindex-entries",
                        f"{len(got)} entries, the ABORT markers give {len(expected)}; {detail}")
            except KstoreError as exc:
                add(base, seg.txnindex, ERROR, "txnindex-unreadable", str(exc.message))

    plan = plan_partition(partition, only=only, progress=progress, stop_at_damage=False, batch_sink=sink,
                          on_segment=check, index_interval_bytes=index_interval_bytes)
    return findings, plan


_NEVER = float("inf")  # above every position and offset


class _BatchesAtEntries:
    """What the checks of one segment's .index and .timeindex need of its batches, gathered during
    recovery's scan (:attr:`sink`) at the places their entries name: for each position in the .index,
    the batch starting there (its base offset, and the last offset of the batch before it); for each
    offset in the .timeindex, the batch Kafka's lookups land on for it -- the first batch whose last
    offset reaches it (``LogSegment.translateOffset``) -- with its max timestamp, its last offset and
    the running maximum timestamp of every batch before it. Memory follows the indexes' entries (at
    most segment.index.bytes of them), not the segment's batches. An index that cannot be read names
    nothing (its check reports why).
    """

    __slots__ = ("positions", "found", "lower", "base", "offsets", "ended", "max_ts", "before", "last", "sink",
                 "_next_p", "_next_o")

    def __init__(self, positions: "array[int]", offsets: "array[int]", base_offset: int) -> None:
        """`positions` and `offsets`: the places to watch, distinct and sorted."""
        self.positions = positions
        self.offsets = offsets
        n, m = len(positions), len(offsets)
        self.found = bytearray(n)  # 1: a v2 batch starts at positions[k], 2: a legacy entry
        self.lower = array("q", bytes(8 * n))
        self.base = array("q", bytes(8 * n))
        self.ended = bytearray(m)  # 1: a batch reaches offsets[k]
        self.max_ts = array("q", bytes(8 * m))
        self.before = array("q", bytes(8 * m))
        self.last = array("q", bytes(8 * m))
        self.sink = self._sink(base_offset)
        # The checks look entries up in file order, which for a healthy index is the keys' order: the slot
        # after the last one found is tried before a binary search.
        self._next_p = 0
        self._next_o = 0

    @classmethod
    def of_indexes(cls, segment: Segment) -> "_BatchesAtEntries":
        """Watching the positions of the segment's .index entries and the offsets of its .timeindex's."""
        from kstore_cli.segment.index import OffsetIndex, TimeIndex

        base_offset = segment.base_offset
        return cls(_entry_keys(OffsetIndex, segment.index, base_offset, 1),
                   _entry_keys(TimeIndex, segment.timeindex, base_offset, 1), base_offset)

    def _sink(self, base_offset: int) -> BatchSink:
        positions, found, lower, base = self.positions, self.found, self.lower, self.base
        offsets, ended, max_ts_at, before_at, last_at = self.offsets, self.ended, self.max_ts, self.before, self.last
        n, m = len(positions), len(offsets)
        i = 0  # positions[:i] lie before the batches still to come (positions only grow)
        next_position = positions[0] if n else _NEVER
        j = 0  # offsets[:j] have their batch (the first whose last offset reaches them)
        next_offset = offsets[0] if m else _NEVER
        prev_last = base_offset - 1
        running = -1

        def sink(position: int, batch_base: Optional[int], last: int, max_ts: int) -> None:
            nonlocal i, next_position, j, next_offset, prev_last, running
            if position >= next_position:
                while i < n and positions[i] < position:
                    i += 1
                if i < n and positions[i] == position:
                    found[i] = 2 if batch_base is None else 1
                    lower[i] = prev_last
                    if batch_base is not None:
                        base[i] = batch_base
                    i += 1
                next_position = positions[i] if i < n else _NEVER
            prev_last = last
            if last >= next_offset:
                while j < m and offsets[j] <= last:
                    ended[j] = 1
                    max_ts_at[j] = max_ts
                    before_at[j] = running
                    last_at[j] = last
                    j += 1
                next_offset = offsets[j] if j < m else _NEVER
            if max_ts > running:
                running = max_ts

        return sink

    def at_position(self, position: int) -> Optional[Tuple[int, Optional[int]]]:
        """(last offset of the batch before, base offset or None for legacy) of the batch starting at
        `position`, or None when no batch starts there."""
        positions = self.positions
        k = self._next_p
        if k >= len(positions) or positions[k] != position:
            k = bisect_left(positions, position)
            if k == len(positions) or positions[k] != position:
                return None
        self._next_p = k + 1
        if not self.found[k]:
            return None
        return self.lower[k], (self.base[k] if self.found[k] == 1 else None)

    def at_offset(self, offset: int) -> Optional[Tuple[int, int, int]]:
        """(max timestamp, last offset, running max timestamp of the batches before it) of the first
        batch whose last offset reaches `offset`, or None when no batch does."""
        offsets = self.offsets
        k = self._next_o
        if k >= len(offsets) or offsets[k] != offset:
            k = bisect_left(offsets, offset)
            if k == len(offsets) or offsets[k] != offset:
                return None
        self._next_o = k + 1
        if not self.ended[k]:
            return None
        return self.max_ts[k], self.last[k], self.before[k]


def _entry_keys(kind, path: Optional[str], base_offset: int, field: int) -> "array[int]":
    """The distinct values of one field of an index's entries (as ``entry(n)`` gives them), sorted."""
    if path is None:
        return array("q")
    try:
        index = kind(path, base_offset)
        # A zero tail adds one distinct value however long it is: one slot of it stands for all (a sparse
        # multi-GB index would otherwise be a list of a billion entries).
        keep = min(index.entries, index.zero_tail_start() + 1)
        values = [entry[field] for entry in islice(index, keep)]
    except KstoreError:
        return array("q")
    if any(map(operator.ge, values, islice(values, 1, None))):  # not strictly increasing (a damaged index)
        values = sorted(set(values))
    return array("q", values)


def _zero_tail(index, prealloc: bool, add, base: int, kind: str) -> int:
    """Entries to check: all of them, or those before a preallocated zero tail."""
    entries = index.entries
    start = index.zero_tail_start()
    if start == entries:
        return entries
    zeros = entries - start
    if prealloc:
        add(base, index.path, NOTE, f"{kind}-preallocated",
            f"{zeros} zero slot(s) after {start} entries: preallocated active-segment index (trimmed at roll/close)")
    else:
        add(base, index.path, ERROR, f"{kind}-zero-padding",
            f"{zeros} all-zero slot(s) after {start} entries, in a file that is not a preallocated active index")
    return start


def _check_sanity(index, kind: str, prealloc: bool, add) -> None:
    """Kafka's sanity check, size first; zero slots of a preallocated active index only make it a note."""
    problem = index.size_problem()
    if problem:
        add(index.base_offset, index.path, ERROR, f"{kind}-size", problem)
        return
    try:
        index.sanity_check()
    except KstoreError as exc:
        explained = prealloc and index.zero_tail_start() < index.entries
        add(index.base_offset, index.path, NOTE if explained else ERROR, f"{kind}-sanity",
            str(exc.message) + (" (because of the preallocated zero slots)" if explained else ""))


def _verify_offset_index(idx, result: RecoveryResult, batches: _BatchesAtEntries, prealloc: bool, add) -> None:
    base = idx.base_offset
    path = idx.path
    _check_sanity(idx, "index", prealloc, add)
    n = _zero_tail(idx, prealloc, add, base, "index")
    last_offset = result.last_offset
    prev = None
    past, first_past = 0, None  # entries past a damaged segment's valid data: one finding, not one each
    for i in range(n):
        offset, position = idx.entry(i)
        where = f"entry {i} (offset {offset}, position {position})"
        if result.problem is not None and position >= result.valid_bytes:
            past += 1
            first_past = where if first_past is None else first_past
            continue
        if prev is not None:
            if offset <= prev[0]:
                add(base, path, ERROR, "index-order", f"{where}: offset not above the previous entry's {prev[0]}")
            if position <= prev[1]:
                add(base, path, ERROR, "index-order", f"{where}: position not above the previous entry's {prev[1]}")
        prev = (offset, position)
        if position >= result.valid_bytes:
            add(base, path, ERROR, "index-position", f"{where}: position is past the valid data ({result.valid_bytes} bytes)")
            continue
        found = batches.at_position(position)
        if found is None:
            add(base, path, ERROR, "index-position", f"{where}: position is not the start of a batch")
            continue
        lower, batch_base = found
        if offset <= lower:
            add(base, path, ERROR, "index-offset",
                f"{where}: the batches before this position already reach offset {lower}")
        elif batch_base is not None and offset < batch_base:
            add(base, path, ERROR, "index-offset", f"{where}: the batch there starts at offset {batch_base}")
        elif last_offset is not None and offset > last_offset:
            add(base, path, ERROR, "index-offset", f"{where}: past the segment's last offset {last_offset}")
    if past:
        add(base, path, ERROR, "index-position",
            f"{past} entries, from {first_past}, point past the valid data ({result.valid_bytes} bytes)")


def _verify_time_index(tidx, result: RecoveryResult, batches: _BatchesAtEntries, prealloc: bool, is_last: bool,
                       add) -> None:
    """An entry (t, o) is wrong only where Kafka's lookups through it answer wrongly.

    LogSegment.findOffsetByTimestamp(ts) takes the last entry with timestamp <= ts, goes to the first
    batch whose last offset reaches o and scans on for the first batch with max timestamp >= ts: the
    answer is right for every ts the entry serves exactly when no batch before that one already holds
    a timestamp >= t. Which offset inside the batch the entry names is a matter of who wrote it (a
    Kafka <= 3.6 leader: the record holding the max timestamp; 3.7+, followers, recovery and the
    cleaner: the batch's last offset), never an error. The last entry also gives the segment's max
    timestamp (LogSegment.maxTimestampSoFar: retention) and the offset ListOffsets(MAX_TIMESTAMP)
    starts from: its timestamp must be the segment's max and its batch must hold it.
    """
    base = tidx.base_offset
    path = tidx.path
    _check_sanity(tidx, "timeindex", prealloc, add)
    n = _zero_tail(tidx, prealloc, add, base, "timeindex")
    prev = None
    last_found = None
    past, first_past = 0, None  # entries past a damaged segment's valid data: one finding, not one each
    valid_last = result.last_offset if result.last_offset is not None else base - 1
    for i in range(n):
        ts, offset = tidx.entry(i)
        where = f"entry {i} (timestamp {ts}, offset {offset})"
        if result.problem is not None and offset > valid_last:
            past += 1
            first_past = where if first_past is None else first_past
            last_found = None
            continue
        if prev is not None:
            if ts <= prev[0]:
                add(base, path, ERROR, "timeindex-order", f"{where}: timestamp not above the previous entry's {prev[0]}")
            if offset < prev[1]:
                add(base, path, ERROR, "timeindex-order", f"{where}: offset below the previous entry's {prev[1]}")
        prev = (ts, offset)
        found = batches.at_offset(offset) if offset >= base else None
        last_found = found
        if found is None:
            add(base, path, ERROR, "timeindex-offset",
                f"{where}: no batch of the segment holds or follows this offset (Kafka's lookups find nothing)")
        elif found[2] >= ts:
            add(base, path, ERROR, "timeindex-timestamp",
                f"{where}: an earlier batch already holds timestamp {found[2]}, so Kafka's lookups for "
                f"timestamps from {ts} skip it")
    if past:
        add(base, path, ERROR, "timeindex-offset",
            f"{past} entries, from {first_past}, name offsets past the valid data (last valid offset {valid_last})")
    if result.max_timestamp >= 0:
        want = (result.max_timestamp, result.offset_of_max_timestamp)
        last = tidx.entry(n - 1) if n else None
        right = (last is not None and last[0] == want[0] and last_found is not None
                 and last_found[0] == want[0])
        if not right:
            message = (f"last entry is {last if last else 'missing'}, expected timestamp {want[0]} at an offset of "
                       f"a batch that holds it (e.g. {want[1]}): the segment's max timestamp, which retention reads")
            if is_last and (last is None or last[0] < want[0]):
                add(base, path, NOTE, "timeindex-final-entry",
                    message + " (active segment: written at roll or close)")
            else:
                add(base, path, ERROR, "timeindex-final-entry", message)
