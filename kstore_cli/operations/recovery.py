"""Kafka's segment recovery (``LogSegment.recover``) and a partition's (``LogLoader.recoverLog``), offline.

One pass over a segment's batches, as recovery walks them (:meth:`LogSegment.recover
<kstore_cli.log.log_segment.LogSegment.recover>`):

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

from kstore_cli.errors import KstoreError
from kstore_cli.log import fileops, names
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
from kstore_cli.log.index import DEFAULT_INDEX_INTERVAL_BYTES
# The tail kinds and results of LogSegment.recover, as the commands and verify name them from here.
from kstore_cli.log.log_segment import (  # noqa: F401 - BAD_SIZE .. is_zero are named from here
    BAD_SIZE,
    CORRUPT_BATCH,
    INVALID_CONTROL,
    INVALID_OFFSETS,
    OFFSET_OVERFLOW,
    OFFSETS_NOT_INCREASING,
    PARTIAL_BATCH,
    SHORT_TAIL,
    TRUNCATABLE,
    ZERO_TAIL,
    BatchSink,
    RecoveryResult,
    TailProblem,
    is_zero,
    recover_log,
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

# --------------------------------------------------------------------------- one segment


def recover_segment(
    source,
    base_offset: int,
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    txn_state: Optional[Callable[[], TxnState]] = None,
    path: Optional[str] = None,
    on_batch: Optional[BatchSink] = None,
) -> Tuple[RecoveryResult, Optional[TxnState]]:
    """LogSegment.recover (:func:`~kstore_cli.log.log_segment.recover_log`) over a path or a buffer, the
    producer state taken from `txn_state` (none needed: a fresh TxnState)."""
    return recover_log(source, base_offset, txn_state or TxnState, index_interval_bytes=index_interval_bytes,
                       path=path, on_batch=on_batch)


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
        self._changes: Optional[List[FileChange]] = None
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
    def changes(self) -> List[FileChange]:
        """The segment's index files against what recovery writes; compared when first asked for (the
        read-only checks never ask: they do not read every index file a second time)."""
        if self._changes is None:
            self._changes = _changes_for(self.segment, self.result) if self.result is not None else []
        return self._changes

    @changes.setter
    def changes(self, changes: List[FileChange]) -> None:
        self._changes = changes

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
    compare_indexes: bool = True,
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
    `compare_indexes`: each segment's index files are compared with what recovery writes now (a
    segment's ``changes``); without it, when first asked for (a read-only check never asks).
    """
    plan = PartitionPlan(partition)
    segments = partition.segments
    carry = _CarriedState()
    for i, segment in enumerate(segments):
        if only is not None and segment.base_offset != only:
            continue
        splan = SegmentPlan(segment, None, i == len(segments) - 1)
        plan.segments.append(splan)
        if plan.damaged is not None and stop_at_damage:
            splan.skipped = f"after the damaged segment {plan.damaged.segment.base_offset}, which Kafka's recovery cuts"
        else:
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            _recover_into(plan, splan, carry, next_base, index_interval_bytes, progress, batch_sink)
            if compare_indexes and splan.result is not None:
                splan.changes = _changes_for(segment, splan.result)
        if on_segment is not None:
            on_segment(splan)
    if plan.damaged is not None:
        plan.dropped_files = _dropped_after(partition, plan.damaged)
    return plan


class _CarriedState:
    """The producer state carried from one segment to the next, and the base offset it is valid at."""

    __slots__ = ("state", "upto")

    def __init__(self) -> None:
        self.state: Optional[TxnState] = None
        self.upto: Optional[int] = None

    def at(self, base_offset: int) -> Optional[TxnState]:
        return self.state if self.state is not None and self.upto == base_offset else None


def _recover_into(plan: PartitionPlan, splan: SegmentPlan, carry: _CarriedState, next_base: Optional[int],
                  index_interval_bytes: int, progress: Optional[Callable[[int], None]],
                  batch_sink: Optional[Callable[[Segment], Optional[BatchSink]]]) -> None:
    """Recover one segment into `splan`, its producer state taken from `carry` (or the snapshot at its
    base offset, or a replay) and carried on to `next_base`."""
    segment = splan.segment
    carried = carry.at(segment.base_offset)
    if carried is not None:
        factory = lambda s=carried: s  # noqa: E731
    else:
        factory = lambda seg=segment: state_at_segment(plan.partition, seg)  # noqa: E731
    try:
        on_batch = batch_sink(segment) if batch_sink is not None else None
        result, state = segment.recover(factory, index_interval_bytes=index_interval_bytes, on_batch=on_batch)
    except KstoreError as exc:
        splan.error = exc
        carry.state = None
        return
    if progress is not None:
        progress(result.log_size)
    splan.result = result
    if state is None and carried is not None:
        state = carried  # unchanged: no transactional batch in this segment
    if state is not None:
        plan.final_state = state
    if state is not None and next_base is not None:
        carry.state, carry.upto = state, next_base
    else:
        carry.state, carry.upto = None, None
    if result.problem is not None and result.truncated_bytes > 0 and plan.damaged is None:
        plan.damaged = splan


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
