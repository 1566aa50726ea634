"""Kafka's segment recovery (``LogSegment.recover``) and a partition's (``LogLoader.recoverLog``), offline.

One pass over a segment's batches, as recovery walks them:

* every batch is checked with ``ensure_valid`` (size and CRC, nothing decompressed) and
  ``ensure_valid_offsets`` (no negative offset, no last offset past Long.MAX_VALUE), and its
  last offset must fit the segment's int32 relative range;
* the offset and time indexes are rebuilt by recovery's per-batch rule (§6.1),
  with :class:`~kstore_cli.log.index.SegmentIndexBuilder`;
* producer state is tracked (only what transactions need,
  :class:`~kstore_cli.log.producer_state.TxnState`) so every ABORT marker
  adds an ``AbortedTxn`` with the last stable offset Kafka computes;
* the pass stops at the first batch that fails, and what lies from there to the
  end of the file is classified: a partial batch, a CRC mismatch, a size field
  below 14, an invalid control record, offsets Kafka rejects, or a zero-filled (preallocated) tail,
  which is reported as such and not as corruption.

Nothing here writes: :func:`recover_segment` returns the bytes Kafka would
leave; :func:`plan_partition` runs it over a partition the way LogLoader's
recovery does (producer state carried from segment to segment, everything after
a truncated segment dropped), and :func:`apply_plan` performs a plan through
:mod:`~kstore_cli.log.fileops`, quarantining what a cut removes
(:mod:`~kstore_cli.operations.quarantine`). verify-index's checks of existing indexes
against a recovery are :mod:`~kstore_cli.operations.verify`'s.
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional, Tuple

from kstore_cli.errors import (
    CorruptDataError,
    CorruptRecordError,
    InvalidRecordError,
    KstoreError,
)
from kstore_cli.log import fileops, names
from kstore_cli.record.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAX_INT32,
)
from kstore_cli.log.checkpoint import (
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
from kstore_cli.log.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    AbortedTxn,
    IndexAppendError,
    SegmentIndexBuilder,
    pack_aborted_txns,
)
from kstore_cli.log.logdir import Partition, Segment
from kstore_cli.log.producer_state import TxnState, state_at_segment
from kstore_cli.operations.quarantine import (
    MANIFEST,
    MANIFEST_VERSION,
    default_quarantine_root,
    file_record,
    load_manifest,
    same_bytes,
    new_quarantine_dir,
    quarantine_dirs_of,
    tidy_quarantine,
    write_manifest,
)
from kstore_cli.record.reader import RELEASE_EVERY, release_pages, map_file, read_batches

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
    state, exc, kind = _recover_batches(buf, result, builder, txn_state, on_batch)
    if result.valid_bytes < size or kind in (OFFSET_OVERFLOW, OFFSETS_NOT_INCREASING):
        result.problem = _classify_tail(buf, result.valid_bytes, size, exc, kind)
    builder.finish()
    result.max_timestamp = builder.max_timestamp
    result.offset_of_max_timestamp = builder.offset_of_max_timestamp
    result.index_bytes = builder.offset_index_bytes()
    result.timeindex_bytes = builder.time_index_bytes()
    return result, state


def _offset_overflow(batch, base_offset: int, path: Optional[str]) -> CorruptDataError:
    return CorruptDataError(
        f"Detected offset overflow at offset {batch.last_offset} in segment with base offset {base_offset}: "
        "Kafka splits such a segment (LogSegmentOffsetOverflowException); kstore does not",
        path=path, position=batch.position,
    )


def _recover_batches(
    buf: memoryview,
    result: RecoveryResult,
    builder: SegmentIndexBuilder,
    txn_state: Optional[Callable[[], TxnState]],
    on_batch: Optional[BatchSink],
) -> Tuple[Optional[TxnState], Optional[KstoreError], Optional[str]]:
    """LogSegment.recover's loop: each batch validated, indexed and applied to the producer state, up to
    the first that fails. Fills `result`'s scan fields; returns the producer state (None when never
    needed) and the error that ended the walk with its kind (None, None at the end of the file)."""
    base_offset = result.base_offset
    path = result.path
    state: Optional[TxnState] = None
    exc: Optional[KstoreError] = None
    kind: Optional[str] = None
    magics, codecs, pids = result.magics, result.codecs, result.producer_ids
    recovered_batch = builder.recovered_batch
    valid = n = records = 0
    first_offset = last_offset = min_ts = None
    try:
        for batch in read_batches(buf, path=path, check_crc=True):
            try:
                batch.ensure_valid()
                batch.ensure_valid_offsets()
            except CorruptRecordError as e:
                exc, kind = e, CORRUPT_BATCH
                break
            except InvalidRecordError as e:
                # LogSegment.recover truncates at an InvalidRecordException as at a CRC failure.
                exc, kind = e, INVALID_OFFSETS
                break
            last = batch.last_offset
            if last - base_offset < 0 or last - base_offset > MAX_INT32:
                exc, kind = _offset_overflow(batch, base_offset, path), OFFSET_OVERFLOW
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
    result.valid_bytes, result.batches, result.records_known = valid, n, records
    result.first_offset, result.last_offset, result.min_timestamp = first_offset, last_offset, min_ts
    return state, exc, kind


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
        plan.dropped_files = _dropped_after(partition, plan.damaged)
    return plan


def _dropped_after(partition: Partition, damaged: SegmentPlan) -> List[str]:
    """What LogLoader deletes after cutting `damaged`: every later segment's files, then the producer
    snapshots past the new log end."""
    new_end = damaged.result.next_offset
    dropped = []
    for s in partition.segments:
        if s.base_offset > damaged.segment.base_offset:
            dropped.extend(p for p in (s.log, s.index, s.timeindex, s.txnindex) if p is not None)
    for offset, snap in sorted(partition.snapshots.items()):
        if offset > new_end:
            dropped.append(snap)
    return dropped


# --------------------------------------------------------------------------- applying a plan


class ApplyReport:
    """What :func:`apply_plan` did."""

    def __init__(self) -> None:
        self.written: List[str] = []
        self.truncated: List[Tuple[str, int, int]] = []  # (path, old size, new size)
        self.quarantined: List[Tuple[str, str]] = []  # (source, destination)
        self.quarantine_dir: Optional[str] = None


def apply_plan(plan: PartitionPlan, *, truncate: bool = False, quarantine_root: Optional[str] = None,
               rolls_after: bool = False) -> ApplyReport:
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
    half-written temporary files in the partition's quarantine dirs are removed. `rolls_after`: the
    caller (recover) rolls an empty segment at the new log end after the cut; the manifest names it, so
    that `kstore restore` removes it.
    """
    report = ApplyReport()
    damaged = plan.damaged
    if damaged is not None and truncate:
        _cut_tail(plan, damaged, quarantine_root, report, rolls_after)
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


def _cut_tail(plan: PartitionPlan, damaged: SegmentPlan, quarantine_root: Optional[str], report: ApplyReport,
              rolls_after: bool = False) -> None:
    result = damaged.result
    partition = plan.partition
    root = quarantine_root or default_quarantine_root(partition)
    partition_root = os.path.join(os.path.abspath(root), partition.name)
    tidy_quarantine(partition_root, partition)
    log = damaged.segment.log
    # Every file to be written here is checked first: none may be a link (or a FIFO...).
    fileops.refuse_links(fileops.partition_files(partition.path, partition.data_dir))
    checkpoint_writes = checkpoint_changes(partition, result.next_offset)
    resumed = _resumable_quarantine(partition_root, partition, log, result)
    if resumed is not None:
        qdir, manifest = resumed
    else:
        qdir, manifest = new_quarantine_dir(partition_root, partition), None
        fileops.make_dirs(qdir, like=partition.path)
    report.quarantine_dir = qdir
    moves = [(path, os.path.join(qdir, os.path.basename(path))) for path in sorted(plan.dropped_files, key=_move_order)]
    tail = None
    if result.problem.kind != ZERO_TAIL:
        tail = os.path.join(qdir, os.path.basename(log) + ".tail")
    new_manifest = _cut_manifest(plan, damaged, moves, tail, checkpoint_writes, manifest, rolls_after)
    if new_manifest != manifest:
        # The manifest first: a quarantine dir left by a killed run still says what it was for.
        write_manifest(qdir, new_manifest)
    for entry in new_manifest["originalIndexes"]:
        copy = None if entry["copy"] is None else os.path.join(qdir, entry["copy"])
        if copy is not None and not os.path.lexists(copy):
            fileops.copy_file(os.path.join(partition.path, entry["file"]), copy)
    # Nothing may point past the new log end (so no crash from here on leaves a checkpoint
    # ahead of the files, and a rerun that no longer sees the cut has nothing left to do).
    for change in checkpoint_writes:
        write_checkpoint_change(change)
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


def _move_order(path: str) -> Tuple[int, bool, str]:
    """Newest segment first, and each segment's .log after its indexes: a crash in between leaves
    the .log with what remains of its files (which the rerun moves), never an orphan index."""
    name = os.path.basename(path)
    return (-int(name.split(".", 1)[0]), name.endswith(names.LOG_SUFFIX), name)


def _cut_manifest(plan: PartitionPlan, damaged: SegmentPlan, moves: List[Tuple[str, str]], tail: Optional[str],
                  checkpoint_writes: List[dict], manifest: Optional[dict], rolls_after: bool = False) -> dict:
    """The quarantine manifest of a cut: what `kstore restore` puts back, every file by its bare name, each
    quarantined file with the size and sha256 it has (from its source: the manifest is written first). A
    resumed cut keeps what the killed run's `manifest` (as load_manifest checked it) already recorded (the
    original indexes, earlier moves, lowered checkpoints)."""
    result = damaged.result
    log = damaged.segment.log
    checkpoints = [{k: (os.path.basename(v) if k == "file" else v) for k, v in c.items() if k != "_data"}
                   for c in checkpoint_writes]
    new_manifest = {
        "version": MANIFEST_VERSION,
        "partition": plan.partition.path,
        "segment": os.path.basename(log),
        "validBytes": result.valid_bytes,
        "logSizeBefore": result.log_size,
        "nextOffset": result.next_offset,
        "problem": result.problem.to_dict(manifest=True),
        "tailFile": None if tail is None else os.path.basename(tail),
        "movedFiles": [{"from": os.path.basename(a), "to": os.path.basename(b), **file_record(a)} for a, b in moves],
        # What the cut lowered (a resumed cut keeps what the killed run already lowered): what
        # `kstore restore` puts back.
        "checkpoints": checkpoints,
        # The damaged segment's indexes as they were (the cut rewrites them for the shorter .log):
        # restore puts them back with the tail, or a clean load would miss the tail's aborted
        # transactions and time index entries. "copy" null: the file did not exist.
        "originalIndexes": _original_indexes(damaged.segment),
    }
    if tail is not None:
        new_manifest["tailSha256"] = file_record(log, result.valid_bytes, result.log_size)["sha256"]
    if rolls_after and result.next_offset > damaged.segment.base_offset:
        # recover rolls an empty segment at the new log end (UnifiedLog.roll) right after the cut
        new_manifest["rolledSegment"] = names.filename_prefix(result.next_offset) + names.LOG_SUFFIX
    if manifest is not None:
        if "version" not in manifest:
            del new_manifest["version"]  # a killed older run's entries have no hashes: it stays a version-1 manifest
        if "originalIndexes" in manifest:
            new_manifest["originalIndexes"] = manifest["originalIndexes"]
        seen = {m["from"] for m in new_manifest["movedFiles"]}
        new_manifest["movedFiles"] = [m for m in manifest.get("movedFiles", []) if m["from"] not in seen] + \
            new_manifest["movedFiles"]
        done = {c["file"] for c in checkpoints}
        earlier = [c for c in manifest.get("checkpoints", []) if c["file"] not in done]
        new_manifest["checkpoints"] = earlier + checkpoints
    return new_manifest


def _original_indexes(segment: Segment) -> List[dict]:
    """The name under which the cut keeps a copy of each index file of the damaged segment in the quarantine
    dir, with its size and sha256 (see the manifest)."""
    entries = []
    for suffix in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX):
        path = segment.path(suffix)
        name = os.path.basename(path)
        if os.path.isfile(path):
            entries.append({"file": name, "copy": name + ".orig", **file_record(path)})
        else:
            entries.append({"file": name, "copy": None})
    return entries


def _resumable_quarantine(partition_root: str, partition: Partition, log: str,
                          result: RecoveryResult) -> Optional[Tuple[str, dict]]:
    """The quarantine dir of a killed run of this very cut (same partition, segment, sizes, and a
    tail, if it was copied, with the bytes still beyond the cut), to finish it there: the cut
    bytes must be quarantined once, not once per run."""
    for qdir in reversed(quarantine_dirs_of(partition_root, partition)):
        if not os.path.lexists(os.path.join(qdir, MANIFEST)):
            continue
        checked = load_manifest(qdir, partition=partition.path)  # a manifest naming anything else: refused
        manifest = checked.data
        if checked.kind != "cut" or manifest.get("restored"):
            continue
        same = (manifest["segment"] == os.path.basename(log)
                and manifest["validBytes"] == result.valid_bytes
                and manifest["logSizeBefore"] == result.log_size)
        if not same:
            continue
        tail = manifest.get("tailFile")
        if tail and os.path.lexists(os.path.join(qdir, tail)) and not same_bytes(
                log, os.path.join(qdir, tail), result.valid_bytes, result.log_size):
            continue
        return qdir, manifest
    return None


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


def write_checkpoint_change(change: dict) -> None:
    """Write one of :func:`checkpoint_changes`. A data dir's checkpoint holds every partition's entry and
    ``recover --jobs`` workers lower theirs at the same time: its entry is applied to the file as it is
    now, one worker at a time (:func:`fileops.shared_update`), so that no worker's entry is lost. Alone,
    the bytes are the change's own."""
    if "topic" not in change:  # the partition's own leader-epoch-checkpoint
        fileops.atomic_write(change["file"], change["_data"])
        return
    with fileops.shared_update():
        entries = read_offset_checkpoint(change["file"])
        key = (change["topic"], change["partition"])
        if change["after"] is None:
            entries.pop(key, None)
        else:
            entries[key] = change["after"]
        fileops.atomic_write(change["file"], format_offset_checkpoint(entries).encode())
