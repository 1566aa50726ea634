"""Kafka's startup recovery, offline: what ``LogLoader`` does to a partition after an unclean shutdown, done
ahead of time so that the broker's own startup has nothing left to recover.

Per partition, as ``LogLoader.load`` / ``recoverLog`` do it:

1. every segment is validated batch by batch (``LogSegment.recover``: CRCs, sizes, offsets) and its
   indexes are rebuilt exactly as Kafka's recovery writes them; at the first invalid batch the log is cut
   and every later segment dropped, as Kafka does, except that the cut bytes and dropped files go to a
   quarantine dir (``rebuild-index --truncate``'s machinery, crash-safe, undone by ``kstore restore``);
2. the leader-epoch checkpoint loses the epochs that start at or past the log end
   (``LeaderEpochFileCache.truncateFromEnd``), the data dir's checkpoints come down to it;
3. the producer state at the log end (``rebuildProducerState``) is written as ``<log end>.snapshot``;
4. a non-empty active segment is followed by a new empty one at the log end (``UnifiedLog.roll``), and
5. the recovery point checkpoint becomes the log end offset.

Index files without their ``.log`` are deleted first, as LogLoader.loadSegmentFiles does ("Found an
orphaned index file"); a partition left with no ``.log`` at all is not otherwise touched (Kafka would start
it empty, and whatever still names its data is doctor's finding). Afterwards :func:`check_what_is_left`
runs doctor's startup checks (:mod:`~kstore_cli.operations.startup`) on the recovered partitions: what would
still stop the broker, which recovery does not repair (Kafka's does not either), is named.

The broker's next startup, clean-shutdown marker or not, then loads the producer snapshot at the log end
and "recovers" only the empty active segment. The marker itself is never written: it is the broker's word
that every partition of the data dir was flushed, which a partial run cannot give (a broker starting on a
marker skips recovery of every partition, also those kstore did not recover).
"""

from __future__ import annotations

import copy
import functools
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from kstore_cli.errors import ExitStatus, FileUnreadableError, KstoreError
from kstore_cli.log import fileops, names
from kstore_cli.log.checkpoint import (
    RECOVERY_POINT_CHECKPOINT,
    format_offset_checkpoint,
    read_offset_checkpoint,
)
from kstore_cli.log.index import TIME_ENTRY, TimeIndex
from kstore_cli.log.log_segment import read_next_offset
from kstore_cli.log.logdir import Partition
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.recovery import apply_plan, checkpoint_changes, plan_partition, write_checkpoint_change
from kstore_cli.operations.retention import roll_empty_segment
from kstore_cli.operations.partition_findings import partition_issues
from kstore_cli.operations.runner import Outcome, PartitionRunner, select
from kstore_cli.operations.startup import ERROR, Issue, survey

#: doctor's checks of checkpoint entries against the log end: recovery lowers every one of these
#: (checkpoint_changes), so a dry run's findings of them are not left over.
_LOWERED_BY_RECOVERY = frozenset({"log-start-beyond-end", "recovery-point-beyond-end", "high-watermark-beyond-end",
                                  "cleaner-offset-out-of-range", "leader-epoch-beyond-end"})


@dataclass
class RecoverResult:
    """What recovering one partition found and did."""

    partition: str
    topic: str
    partition_id: int
    data_dir: str
    log_end_offset: int = 0
    segments: int = 0
    bytes_validated: int = 0
    indexes_written: List[str] = field(default_factory=list)
    cut_at: Optional[str] = None
    quarantine_dir: Optional[str] = None
    rolled: Optional[int] = None
    snapshot: Optional[str] = None
    checkpoints_lowered: List[str] = field(default_factory=list)
    #: Index files without their .log, deleted (or, in a dry run, to delete) as LogLoader does.
    orphans_deleted: List[str] = field(default_factory=list)
    problem: Optional[str] = None
    #: The typed error behind `problem` when a file could not be read or written (exit 3): it crosses
    #: the process pool pickled (type, message, file and byte kept) and the CLI reports it.
    error: Optional[KstoreError] = None
    #: doctor's findings that still stop the broker after recovery (check_what_is_left).
    left: List[Issue] = field(default_factory=list)
    dry_run: bool = False

    def to_dict(self) -> dict:
        return {"type": "partition", "partition": self.partition, "log_end_offset": self.log_end_offset,
                "segments": self.segments, "bytes_validated": self.bytes_validated,
                "indexes_written": [os.path.basename(p) for p in self.indexes_written], "cut_at": self.cut_at,
                "quarantine_dir": self.quarantine_dir, "rolled_segment": self.rolled,
                "snapshot": None if self.snapshot is None else os.path.basename(self.snapshot),
                "checkpoints_lowered": self.checkpoints_lowered,
                "orphan_indexes_deleted": [os.path.basename(p) for p in self.orphans_deleted],
                "problem": self.problem, "left": len(self.left), "dry_run": self.dry_run}


def _unflushed(partition: Partition, recovery_point: int) -> Partition:
    """LogLoader.recoverLog's ``segments.values(recoveryPoint, Long.MAX)``: the segment holding the recovery
    point and every later one (a view of the partition). Their producer state comes from the snapshot at
    the first one's base offset, as a broker's roll left it; without one, every segment is recovered (the
    state is then replayed from the log start)."""
    floor = [s for s in partition.segments if s.base_offset <= recovery_point]
    start = floor[-1].base_offset if floor else None
    if start is None or start == partition.segments[0].base_offset or partition.snapshot_at(start) is None:
        return partition
    view = copy.copy(partition)
    view.segments = [s for s in partition.segments if s.base_offset >= start]
    return view


def recovery_point_of(partition: Partition) -> int:
    """The partition's recovery-point-offset-checkpoint entry (0 without one, as LogManager takes it)."""
    path = os.path.join(partition.data_dir, RECOVERY_POINT_CHECKPOINT)
    if not os.path.exists(path):
        return 0
    return read_offset_checkpoint(path).get((partition.topic, partition.partition), 0)


def recover_partition(path: str, *, quarantine_root: Optional[str] = None, index_interval_bytes: int = 4096,
                      dry_run: bool = False) -> RecoverResult:
    """Recover one partition directory (the caller holds its data dir's lock). Picklable arguments and
    result: a process pool runs partitions in parallel."""
    try:
        partition = Partition(path)
    except KstoreError as exc:
        return _failed(RecoverResult(os.path.abspath(path), "", -1, os.path.dirname(os.path.abspath(path)),
                                     dry_run=dry_run), exc)
    result = RecoverResult(partition.path, partition.topic, partition.partition, partition.data_dir, dry_run=dry_run)
    try:
        result.orphans_deleted = list(partition.orphan_indexes)
        if not dry_run:
            for orphan in partition.orphan_indexes:
                fileops.unlink(orphan)  # LogLoader.loadSegmentFiles: "Found an orphaned index file"
        if not partition.segments:
            return result
        plan = plan_partition(_unflushed(partition, recovery_point_of(partition)),
                              index_interval_bytes=index_interval_bytes)
        result.segments = len(plan.segments)
        result.bytes_validated = sum(s.result.log_size for s in plan.segments if s.result is not None)
        unreadable = [s for s in plan.segments if s.error is not None]
        if unreadable:
            error = unreadable[0].error
            if error.exit_status == ExitStatus.UNREADABLE:
                return _failed(result, error)
            result.problem = f"segment {unreadable[0].segment.base_offset}: {error}"
            return result
        damaged = plan.damaged
        if damaged is not None:
            result.cut_at = (f"{os.path.basename(damaged.segment.log)} at byte {damaged.result.valid_bytes} "
                             f"({damaged.result.problem.kind})")
        result.indexes_written = [c.path for s in plan.segments for c in s.changed_files]
        if dry_run:
            result.log_end_offset = damaged.result.next_offset if damaged is not None else _log_end(partition)
            return result
        # rolls_after: the manifest names the segment _after_recovery rolls, which `kstore restore` removes
        report = apply_plan(plan, truncate=True, quarantine_root=quarantine_root, rolls_after=True)
        result.quarantine_dir = report.quarantine_dir
        _after_recovery(Partition(path), result)
    except KstoreError as exc:
        return _failed(result, exc)
    except OSError as exc:  # fileops and the readers raise KstoreErrors; anything else the OS refused is one too
        return _failed(result, FileUnreadableError(exc.strerror or str(exc), path=exc.filename or path))
    return result


def _failed(result: RecoverResult, exc: KstoreError) -> RecoverResult:
    """`result` as not recovered because of `exc`; a file that could not be read or written keeps the typed
    error (exit 3 and one line on stderr, as every command), data trouble only its message (exit 1)."""
    result.problem = str(exc)
    if exc.exit_status == ExitStatus.UNREADABLE:
        result.error = exc
    return result


def _log_end(partition: Partition) -> int:
    last = partition.segments[-1] if partition.segments else None
    return 0 if last is None else read_next_offset(last.log, last.base_offset)


def _after_recovery(partition: Partition, result: RecoverResult) -> None:
    """Epochs and checkpoints down to the log end, the producer snapshot at it, the roll."""
    leo = _log_end(partition)
    result.log_end_offset = leo
    for change in checkpoint_changes(partition, leo):
        write_checkpoint_change(change)
        result.checkpoints_lowered.append(os.path.basename(change["file"]))
    for offset, path in sorted(partition.snapshots.items()):
        if offset > leo:
            fileops.unlink(path)  # past the log end: LogLoader deletes these (their log was never flushed)
    result.snapshot = ProducerStateManager.load(partition).write_snapshot(partition.path, leo)
    last = partition.segments[-1] if partition.segments else None
    if last is not None and last.base_offset < leo:
        _final_time_entry(last)
        _roll(partition, leo)
        result.rolled = leo


def _roll(partition: Partition, offset: int) -> None:
    """roll_empty_segment, without leaving its index files behind when its .log cannot be written (a full
    disk): orphans a broker would delete (LogLoader) and the next run would find."""
    try:
        roll_empty_segment(partition, offset)
    except KstoreError:
        prefix = os.path.join(partition.path, names.filename_prefix(offset))
        if not os.path.lexists(prefix + names.LOG_SUFFIX):
            for suffix in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX):
                try:
                    fileops.unlink(prefix + suffix)
                except KstoreError:
                    pass  # the error being raised is the one to report; a rerun deletes the orphan
        raise


def _final_time_entry(segment) -> None:
    """LogSegment.onBecomeInactiveSegment, as UnifiedLog.roll calls it on the old active segment: the
    time index ends with (max timestamp so far, the last offset of the first batch holding it)."""
    largest, offset = -1, -1
    for batch in read_batches(segment.log):
        if batch.max_timestamp > largest:
            largest, offset = batch.max_timestamp, batch.last_offset
    if offset < 0 or segment.timeindex is None:
        return
    index = TimeIndex(segment.timeindex, segment.base_offset)
    entries = index.entries
    if entries and index.entry(entries - 1)[0] >= largest:
        return  # TimeIndex.maybeAppend: only a larger timestamp is appended
    with open(segment.timeindex, "rb") as f:
        data = f.read(entries * index.entry_size)
    fileops.atomic_write(segment.timeindex, data + TIME_ENTRY.pack(largest, offset - segment.base_offset))


def advance_recovery_points(data_dir: str, results: List[RecoverResult]) -> None:
    """The data dir's recovery-point-offset-checkpoint: each recovered partition at its log end (written
    last, once per data dir: the broker then starts recovery at the empty active segment)."""
    # A partition without segments is left alone (Kafka would start it empty at its log start offset).
    done = [r for r in results if r.problem is None and not r.dry_run and r.data_dir == data_dir and r.segments]
    if not done:
        return
    path = os.path.join(data_dir, RECOVERY_POINT_CHECKPOINT)
    entries: Dict = read_offset_checkpoint(path) if os.path.exists(path) else {}
    for r in done:
        entries[(r.topic, r.partition_id)] = r.log_end_offset
    fileops.atomic_write(path, format_offset_checkpoint(entries).encode())


def check_what_is_left(results: List[RecoverResult]) -> List[Issue]:
    """doctor's startup checks on the partitions recovered (or, in a dry run, that would be): each one's
    findings that would still stop the broker (severity error) go to its ``left``; the data dirs' own
    (a malformed offset checkpoint: Kafka's CheckpointFileWithFailureHandler.read takes the dir offline)
    are returned. Recovery repairs none of them, nor does Kafka's own at startup (LogLoader): e.g. a
    malformed leader-epoch-checkpoint makes LeaderEpochCheckpointFile's read throw KafkaStorageException
    (an IOException: the log dir goes offline) or NumberFormatException (the broker stops), the same
    after a rerun."""
    recovered = [r for r in results if r.problem is None]
    if not recovered:
        return []
    found = survey([r.partition for r in recovered])
    by_path = {p.path: p for p, _only in found.targets}
    for r in recovered:
        partition = by_path.get(r.partition)
        if partition is None:
            continue  # survey did not take it for a partition dir: none of doctor's partition checks apply
        if r.dry_run:
            partition.orphan_indexes = []  # the run deletes them
        r.left = [i for i in partition_issues(found, partition, None, log_end=r.log_end_offset)
                  if i.severity == ERROR and not (r.dry_run and i.check in _LOWERED_BY_RECOVERY)]
    return [i for info in found.data_dirs.values() for i in info.issues if i.severity == ERROR]


@dataclass
class RecoverRequest:
    """A recover run: the PATHS (partition or data dirs), topic globs, partitions recovered at once, the
    quarantine root, the rebuilt indexes' index.interval.bytes, and the run's mode."""

    paths: Sequence[str]
    topics: Optional[str] = None
    jobs: Optional[int] = None
    quarantine_dir: Optional[str] = None
    index_interval_bytes: int = 4096
    dry_run: bool = False
    force: bool = False


@dataclass
class RecoverRun(Outcome):
    """Every partition's recovery, in path order; the data dirs' findings left (after the partitions'),
    and the errors: a partition's file, or a data dir's recovery-point checkpoint, not written."""

    skipped: List[Tuple[str, str]] = field(default_factory=list)
    errors: List[KstoreError] = field(default_factory=list)
    results: List[RecoverResult] = field(default_factory=list)
    dir_left: List[Issue] = field(default_factory=list)
    jobs: int = 1
    dry_run: bool = False

    @property
    def left(self) -> int:
        """The findings left that stop the broker."""
        return sum(len(r.left) for r in self.results) + len(self.dir_left)

    def problems_status(self) -> int:
        # A cut made is recovery done (its bytes are quarantined), as rebuild-index --truncate; one still to make
        # (a dry run), a partition left unrecovered or something left that stops the broker is a problem.
        if self.left or any(r.problem or (self.dry_run and r.cut_at) for r in self.results):
            return int(ExitStatus.PROBLEMS)
        return 0

    def summary(self) -> dict:
        """The JSON line after the partitions'."""
        return {"type": "summary", "partitions": len(self.results), "skipped": len(self.skipped),
                "dry_run": self.dry_run, "jobs": self.jobs, "cut": sum(1 for r in self.results if r.cut_at),
                "problems": sum(1 for r in self.results if r.problem), "left": self.left,
                "bytes_validated": sum(r.bytes_validated for r in self.results)}


def recover(request: RecoverRequest) -> RecoverRun:
    """``kstore recover``: every partition under the data dirs' locks (in `jobs` processes), then each data
    dir's recovery-point checkpoint, then doctor's startup checks on what was recovered."""
    selection = select(request.paths, request.topics, "recover", whole_partitions=True,
                       quarantine_dir=request.quarantine_dir)
    groups = selection.groups
    partitions: List[str] = sorted({t.partition.path for t in selection.targets
                                    if t.partition.partition >= 0 and not t.partition.name.endswith(
                                        ("-delete", "-future", "-stray"))})
    run = RecoverRun(skipped=selection.skipped, jobs=request.jobs or os.cpu_count() or 1, dry_run=request.dry_run)
    runner = PartitionRunner.for_targets(groups, force=request.force, lock=not request.dry_run)
    work = functools.partial(recover_partition, quarantine_root=request.quarantine_dir,
                             index_interval_bytes=request.index_interval_bytes, dry_run=request.dry_run)
    with runner.locked():
        run.results = runner.map(work, partitions, jobs=run.jobs)
        for data_dir in sorted(groups):
            try:
                advance_recovery_points(data_dir, run.results)
            except KstoreError as exc:
                # Reported after the rows: what the partitions' recovery did (cut, quarantined, rolled) is done
                # and must be seen; the old checkpoint stays (atomic write), so the broker recovers from there.
                run.errors.append(exc)
    run.dir_left = check_what_is_left(run.results)
    run.errors[:0] = [r.error for r in run.results if r.error is not None]
    return run
