"""Retention offline: Kafka's ``UnifiedLog.deleteOldSegments`` over partition directories.

Planning (read-only) reproduces the broker's decision on the segments as the broker would
load them (spec §7)::

    deleteOldSegments():
        if cleanup.policy has "delete": startOffsetBreach + sizeBreach + timeBreach   (in order)
        else:                           startOffsetBreach

Each rule walks the segments from the oldest and stops at the first one that is not
deletable; a segment is deletable iff ``highWatermark >= upperBound`` (the next segment's
base offset, or the log end offset for the last one), the rule's predicate holds, and it is
not an empty last segment. Predicates: the next segment starts at or below the log start
offset; the segment fits in what the log exceeds ``retention.bytes`` by (``diff - size >= 0``,
so the log never drops below ``retention.bytes``); ``now - largestTimestamp > retention.ms``.
When a rule selects every segment, a new empty segment is rolled at the log end offset
first. The log start offset becomes the base offset of the segment after the last deleted.

Applying keeps an order in which a SIGKILL at any file operation leaves a directory that a
broker loads and a rerun finishes, with the log-start-offset checkpoint never ahead of the
files::

    1. finish interrupted deletions: for each <X>.log.deleted whose <X>.log is gone, rename the
       segment's remaining files (.index, .timeindex, .txnindex, <X>.snapshot) to .deleted
    2. roll, when every segment goes: <LEO>.index, <LEO>.timeindex, then <LEO>.log (all empty)
    3. per deleted segment, oldest first: <X>.log -> .deleted first (the commit point: from then
       on the segment is gone for a broker and for a rerun), then its indexes and <X>.snapshot;
       then fsync the partition directory
    4. log-start-offset-checkpoint, once per data dir (atomic)
    5. leader-epoch-checkpoint truncated from the start to the new log start offset (atomic)
    6. remove .deleted files (now, or once older than the delete delay); by then every live file
       of a deleted segment has been renamed, so removal order does not matter (a segment's
       other files go before its .log.deleted, the reverse of the renames)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import UsageError
from kstore_cli.log import fileops, names, scope
from kstore_cli.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    read_leader_epoch_checkpoint,
)
from kstore_cli.cluster.configs import PartitionsRequest
from kstore_cli.log.config import ConfigResolver, TopicConfig
from kstore_cli.log.log_segment import TS_NEW_SEGMENT, largest_timestamp
from kstore_cli.log.logdir import Partition, Segment, Target, partitions_of
from kstore_cli.log.unified_log import DataDirState, log_offsets  # noqa: F401 - DataDirState: the commands' handle
from kstore_cli.operations.runner import Outcome, PartitionRunner, select

RULE_LOG_START_OFFSET = "log-start-offset"
RULE_RETENTION_BYTES = "retention.bytes"
RULE_RETENTION_MS = "retention.ms"

#: Partitions retention never touches, and why.

_SEGMENT_SUFFIXES = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)
_DELETED_LOG = names.LOG_SUFFIX + names.DELETED_SUFFIX


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def truncate_epochs_from_start(entries: List[Tuple[int, int]], start_offset: int) -> List[Tuple[int, int]]:
    """LeaderEpochFileCache.truncateFromStart: drop entries starting at or below start_offset,
    keeping the last of them re-based to start_offset."""
    i = 0
    while i < len(entries) and entries[i][1] <= start_offset:
        i += 1
    if i == 0:
        return list(entries)
    return [(entries[i - 1][0], start_offset)] + list(entries[i:])


class SegmentState:
    """One segment as the rules see it: base offset, .log size, largest timestamp (lazy)."""

    __slots__ = ("segment", "base_offset", "size", "rolled", "_largest")

    def __init__(self, segment: Optional[Segment], base_offset: int, size: int, rolled: bool = False,
                 largest: Optional[Tuple[int, str]] = None) -> None:
        self.segment = segment
        self.base_offset = base_offset
        self.size = size
        self.rolled = rolled
        self._largest = largest

    @property
    def largest(self) -> Tuple[int, str]:
        if self._largest is None:
            # Only a rolled state has no files, and it is created with its timestamp.
            self._largest = largest_timestamp(self.segment) if self.segment is not None else (-1, TS_NEW_SEGMENT)
        return self._largest


# --------------------------------------------------------------------------- plans


class Deletion:
    """A segment to delete: which rule selected it and why, and its files."""

    __slots__ = ("base_offset", "rule", "reason", "log_size", "files", "bytes")

    def __init__(self, base_offset: int, rule: str, reason: str, log_size: int, files: List[str]) -> None:
        self.base_offset = base_offset
        self.rule = rule
        self.reason = reason
        self.log_size = log_size
        #: Existing files, in rename order: the .log first, then indexes, then the snapshot.
        self.files = files
        #: Their total size when planned.
        self.bytes = sum(_size(f) for f in files)

    def to_dict(self) -> dict:
        return {"segment": self.base_offset, "rule": self.rule, "reason": self.reason,
                "log_bytes": self.log_size, "bytes": self.bytes, "files": self.files}


class RetentionPlan:
    """What retention does to one partition."""

    def __init__(self, partition: Partition, config: Optional[TopicConfig]) -> None:
        self.partition = partition
        self.config = config
        #: Why the partition is left alone by design (exit 0).
        self.skipped: Optional[str] = None
        #: Why the partition could not be handled (exit 1).
        self.problem: Optional[str] = None
        self.log_start_offset = 0
        self.new_log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.high_watermark_source = ""
        self.log_bytes = 0
        self.deletions: List[Deletion] = []
        #: Base offset of the empty segment rolled first (every segment is deleted), or None.
        self.roll_offset: Optional[int] = None
        #: New log-start-offset-checkpoint entry, or None to leave the file alone.
        self.checkpoint_offset: Optional[int] = None
        self.epochs_before: Optional[List[Tuple[int, int]]] = None
        self.epochs_after: Optional[List[Tuple[int, int]]] = None
        #: Live files of an interrupted deletion (their .log is already .deleted).
        self.pending: List[str] = []
        #: .deleted files old enough to remove now, and those kept for the delete delay.
        self.leftovers: List[str] = []
        self.leftovers_kept: List[str] = []
        #: Sizes of pending and leftover files when planned.
        self.pending_bytes = 0
        self.leftover_bytes = 0
        self.notes: List[str] = []

    @property
    def key(self) -> Tuple[str, int]:
        return (self.partition.topic, self.partition.partition)

    @property
    def active(self) -> bool:
        return self.skipped is None and self.problem is None

    @property
    def bytes_deleted(self) -> int:
        """Bytes of the files of deleted segments (and of interrupted deletions)."""
        return sum(d.bytes for d in self.deletions) + self.pending_bytes

    def renamed_files(self) -> List[str]:
        return list(self.pending) + [f for d in self.deletions for f in d.files]

    def settings(self) -> dict:
        """{setting: {"value", "source"}} of the retention settings (the topic's config must be known)."""
        return {k: {"value": self.config.to_dict([k])[k], "source": self.config.describe_source(k)}
                for k in ("cleanup.policy", "retention.ms", "retention.bytes")}

    def to_dict(self) -> dict:
        out = {
            "partition": self.partition.path,
            "topic": self.partition.topic,
            "partition_id": self.partition.partition,
            "skipped": self.skipped,
            "problem": self.problem,
            "notes": self.notes,
        }
        if self.config is not None:
            out["config"] = self.settings()
        if self.active:
            out.update({
                "log_start_offset": self.log_start_offset,
                "new_log_start_offset": self.new_log_start_offset,
                "log_end_offset": self.log_end_offset,
                "high_watermark": self.high_watermark,
                "high_watermark_source": self.high_watermark_source,
                "log_bytes": self.log_bytes,
                "segments_deleted": len(self.deletions),
                "deleted": [d.to_dict() for d in self.deletions],
                "rolled_segment": self.roll_offset,
                "interrupted_deletion_files": self.pending,
                "leftovers_removed": self.leftovers,
                "leftovers_kept": self.leftovers_kept,
                "log_start_offset_checkpoint": self.checkpoint_offset,
                "leader_epochs": None if self.epochs_after == self.epochs_before else self.epochs_after,
            })
        return out


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _ctime_ms(path: str) -> int:
    """When a file was last renamed (or changed): its ctime, in milliseconds."""
    return os.stat(path).st_ctime_ns // 1_000_000


def _segment_files(segment: Segment, partition: Partition) -> List[str]:
    files = [segment.log]
    files += [p for p in (segment.index, segment.timeindex, segment.txnindex) if p is not None]
    snapshot = partition.snapshot_at(segment.base_offset)
    if snapshot is not None:
        files.append(snapshot)
    return files


def _scan_leftovers(plan: RetentionPlan, delete_delay_ms: int, wall_ms: int) -> None:
    """Interrupted deletions to finish, and .deleted files to remove (broker's rule: every
    ``*.deleted`` except KRaft's ``.checkpoint.deleted``), satellites before markers."""
    partition = plan.partition
    live = {s.base_offset for s in partition.segments}
    deleted = [f for f in partition.leftovers
               if f.endswith(names.DELETED_SUFFIX) and not f.endswith(".checkpoint.deleted")]
    markers = {o for o in (_marker_offset(f) for f in deleted) if o is not None}
    for base in sorted(markers - live):
        for path in partition.orphan_indexes:
            if names.base_offset_from_name(path) == base:
                plan.pending.append(path)
        snapshot = partition.snapshot_at(base)
        if snapshot is not None:
            plan.pending.append(snapshot)
    plan.pending.sort()
    plan.pending_bytes = sum(_size(f) for f in plan.pending)
    for path in sorted(deleted, key=lambda f: (f.endswith(_DELETED_LOG), f)):
        if delete_delay_ms <= 0 or wall_ms - _ctime_ms(path) >= delete_delay_ms:
            plan.leftovers.append(path)
        else:
            plan.leftovers_kept.append(path)
    plan.leftover_bytes = sum(_size(f) for f in plan.leftovers)


def _marker_offset(path: str) -> Optional[int]:
    """The base offset of a ``<offset>.log.deleted`` file, else None."""
    name = os.path.basename(path)
    head = name.split(".", 1)[0]
    if name.endswith(_DELETED_LOG) and len(head) >= 20 and head.isdigit():
        return int(head)
    return None


def _not_retainable(partition: Partition, config: TopicConfig) -> Tuple[Optional[str], Optional[str]]:
    """(skipped, problem): why retention leaves this directory alone, if it does."""
    left_alone = scope.left_alone_reason(partition)
    if left_alone is not None:
        return left_alone, None
    symlinked = scope.symlinked_reason(partition.path)
    if symlinked is not None:
        return None, symlinked
    if partition.name.endswith(("-delete", "-future", "-stray")):
        return "not a live replica (a -delete, -future or -stray directory)", None
    if partition.partition < 0:
        return None, "not a <topic>-<partition> directory"
    if config.remote_storage_enable:
        return ("remote.storage.enable=true: local retention depends on what was uploaded to remote storage, "
                "which kstore cannot see"), None
    swaps = [f for f in partition.leftovers if f.endswith(names.SWAP_SUFFIX)]
    if swaps:
        return None, (f"{len(swaps)} .swap file(s) from an interrupted compaction or split: the broker completes "
                      "that swap when it loads the partition; start it (or finish the swap) before retain")
    if not partition.segments:
        return "no segments", None
    return None, None


class _SegmentWalk:
    """UnifiedLog.deleteOldSegments(predicate, reason): from the oldest segment, while the high
    watermark is at or past its upper bound and the predicate holds; an empty last segment is never
    deleted; when every segment goes, a new empty one is rolled at the log end offset first."""

    def __init__(self, plan: RetentionPlan, live: List[SegmentState], lso: int, now: int) -> None:
        self.plan = plan
        self.live = live
        self.lso = lso
        self.now = now
        self.deleted: List[Tuple[SegmentState, str, str]] = []

    def walk(self, rule: str, predicate: Callable[[SegmentState, Optional[SegmentState]], Optional[str]]) -> None:
        leo, hw, live = self.plan.log_end_offset, self.plan.high_watermark, self.live
        reasons: List[str] = []
        for i, seg in enumerate(live):
            nxt = live[i + 1] if i + 1 < len(live) else None
            if not hw >= (nxt.base_offset if nxt is not None else leo):
                break
            reason = predicate(seg, nxt)
            if reason is None:
                break
            if nxt is None and (seg.size == 0 or seg.base_offset == leo):
                break  # an empty last segment is never deleted (nor one Kafka could not roll past)
            reasons.append(reason)
        if not reasons:
            return
        if len(reasons) == len(live):
            self.plan.roll_offset = leo
            live.append(SegmentState(None, leo, 0, rolled=True, largest=(self.now, TS_NEW_SEGMENT)))
        self.deleted.extend((seg, rule, reason) for seg, reason in zip(live, reasons))
        self.live = live[len(reasons):]
        self.lso = max(self.lso, self.live[0].base_offset)

    def log_start_offset_rule(self) -> None:
        self.walk(RULE_LOG_START_OFFSET, lambda seg, nxt: (
            f"entirely below the log start offset {self.lso} (the next segment starts at {nxt.base_offset})"
            if nxt is not None and nxt.base_offset <= self.lso else None))

    def size_rule(self, retention_bytes: int) -> None:
        total = sum(s.size for s in self.live)
        if retention_bytes < 0 or total < retention_bytes:
            return
        excess = [total - retention_bytes]

        def predicate(seg: SegmentState, nxt: Optional[SegmentState]) -> Optional[str]:
            if excess[0] - seg.size < 0:
                return None
            excess[0] -= seg.size
            return (f"the log is {total} bytes, {total - retention_bytes} over retention.bytes "
                    f"{retention_bytes}; this segment's {seg.size} bytes fit in the excess")

        self.walk(RULE_RETENTION_BYTES, predicate)

    def time_rule(self, retention_ms: int) -> None:
        if retention_ms < 0:
            return
        now = self.now

        def predicate(seg: SegmentState, nxt: Optional[SegmentState]) -> Optional[str]:
            ts, source = seg.largest
            if now - ts > retention_ms:
                return (f"largest timestamp {ts} (from the {source}) is {now - ts} ms before now {now}, "
                        f"over retention.ms {retention_ms}")
            return None

        self.walk(RULE_RETENTION_MS, predicate)


def plan_partition(
    partition: Partition,
    config: TopicConfig,
    state: DataDirState,
    *,
    now: int,
    log_start_offset: Optional[int] = None,
    delete_delay_ms: int = 0,
    wall_clock_ms: Optional[int] = None,
) -> RetentionPlan:
    """Decide what Kafka's retention deletes from one partition at time `now` (ms), touching nothing.

    `log_start_offset` moves the log start offset up first (as DeleteRecords does; it may not
    pass the high watermark). Raises UsageError for such a request and KstoreError for
    unreadable checkpoints.
    """
    plan = RetentionPlan(partition, config)
    plan.skipped, plan.problem = _not_retainable(partition, config)
    if plan.skipped is not None or plan.problem is not None:
        return plan
    _scan_leftovers(plan, delete_delay_ms, now_ms() if wall_clock_ms is None else wall_clock_ms)
    offsets = log_offsets(partition, state)
    lso, leo, hw = offsets.log_start_offset, offsets.log_end_offset, offsets.high_watermark
    plan.log_start_offset, plan.log_end_offset, plan.high_watermark = lso, leo, hw
    plan.high_watermark_source = offsets.high_watermark_source
    if log_start_offset is not None and log_start_offset > lso:
        if log_start_offset > hw:
            raise UsageError(
                f"cannot move the log start offset of {partition.name} to {log_start_offset}: above its high "
                f"watermark {hw} ({plan.high_watermark_source}); Kafka refuses that too", path=partition.path)
        lso = log_start_offset

    live = [SegmentState(s, s.base_offset, os.path.getsize(s.log)) for s in partition.segments]
    plan.log_bytes = sum(s.size for s in live)
    if live[-1].size > 0 and leo == live[-1].base_offset:
        plan.notes.append("the last segment holds no complete batch; it is kept")
    walk = _SegmentWalk(plan, live, lso, now)
    walk.log_start_offset_rule()  # every cleanup policy
    if config.delete:
        walk.size_rule(_enforced(plan, config, "retention.bytes"))
        walk.time_rule(_enforced(plan, config, "retention.ms"))
    else:
        plan.notes.append(f"cleanup.policy={','.join(config.cleanup_policy) or '(none)'}: only the log start "
                          "offset rule applies")
    for seg, rule, reason in walk.deleted:
        if not seg.rolled and seg.segment is not None:
            plan.deletions.append(Deletion(seg.base_offset, rule, reason, seg.size,
                                           _segment_files(seg.segment, partition)))
    _plan_checkpoints(plan, state, walk.lso)
    return plan


def _enforced(plan: RetentionPlan, config: TopicConfig, key: str) -> int:
    """The retention setting the rules apply: -1 (no limit) for a value that is only Kafka's built-in default
    (without --kafka-defaults), noted when that default would have deleted something."""
    value = config.get(key)
    if config.enforced(key):
        return value
    if value >= 0:
        plan.notes.append(f"{key}={value} is only Kafka's default: not applied (give --kafka-defaults, a "
                          f"--{key.replace('.', '-')} flag, or set it in --config or --topic-config)")
    return -1


def _plan_checkpoints(plan: RetentionPlan, state: DataDirState, lso: int) -> None:
    """The log-start-offset checkpoint entry and the trimmed leader-epoch checkpoint the plan writes."""
    plan.new_log_start_offset = lso
    # The checkpoint names the new log start offset when it moved, when its entry is stale, or when
    # an interrupted run (its .log.deleted markers below the first segment remain) did not get to write it.
    checkpointed = state.log_start_offsets.get(plan.key)
    first_base = plan.partition.segments[0].base_offset
    interrupted = any(o is not None and o < first_base
                      for o in map(_marker_offset, plan.leftovers + plan.leftovers_kept))
    if lso > plan.log_start_offset or (checkpointed is not None and checkpointed != lso) or (
            checkpointed is None and interrupted):
        plan.checkpoint_offset = lso
    epoch_path = os.path.join(plan.partition.path, LEADER_EPOCH_CHECKPOINT)
    if os.path.exists(epoch_path):
        plan.epochs_before = read_leader_epoch_checkpoint(epoch_path)
        plan.epochs_after = truncate_epochs_from_start(plan.epochs_before, lso)


# --------------------------------------------------------------------------- applying


def roll_empty_segment(partition: Partition, base_offset: int) -> None:
    """LocalLog.roll for an empty new segment: files with the new base name are replaced; the
    indexes are written before the .log, so a crash leaves at most orphan indexes (which the
    broker deletes and a rerun rewrites)."""
    prefix = os.path.join(partition.path, names.filename_prefix(base_offset))
    if os.path.exists(prefix + names.TXN_INDEX_SUFFIX):
        fileops.unlink(prefix + names.TXN_INDEX_SUFFIX)
    fileops.atomic_write(prefix + names.INDEX_SUFFIX, b"")
    fileops.atomic_write(prefix + names.TIME_INDEX_SUFFIX, b"")
    fileops.atomic_write(prefix + names.LOG_SUFFIX, b"")


def apply_retention(state: DataDirState, plans: List[RetentionPlan], *, delete_delay_ms: int = 0) -> None:
    """Carry out the plans of one data dir's partitions (the caller holds the data dir lock).

    See the module docstring for the order and why a crash anywhere is safe.
    """
    active = [p for p in plans if p.active]
    for plan in active:  # 1. interrupted deletions
        if plan.pending:
            for path in plan.pending:
                fileops.rename(path, path + names.DELETED_SUFFIX)
            fileops.fsync_dir(plan.partition.path)
    for plan in active:  # 2 and 3. roll, then rename (the .log first)
        if plan.roll_offset is not None:
            roll_empty_segment(plan.partition, plan.roll_offset)
        for deletion in plan.deletions:
            for path in deletion.files:
                fileops.rename(path, path + names.DELETED_SUFFIX)
        if plan.deletions:
            fileops.fsync_dir(plan.partition.path)
    updates = {p.key: p.checkpoint_offset for p in active if p.checkpoint_offset is not None}
    if updates:  # 4. only once the renames are durable
        entries = dict(state.log_start_offsets)
        entries.update(updates)
        fileops.atomic_write(os.path.join(state.path, LOG_START_OFFSET_CHECKPOINT),
                             format_offset_checkpoint(entries).encode())
        state.log_start_offsets = entries
    for plan in active:  # 5. leader epochs
        if plan.epochs_after is not None and plan.epochs_after != plan.epochs_before:
            fileops.atomic_write(os.path.join(plan.partition.path, LEADER_EPOCH_CHECKPOINT),
                                 format_leader_epoch_checkpoint(plan.epochs_after).encode())
    for plan in active:  # 6. physical deletion
        doomed = list(plan.leftovers)
        if delete_delay_ms <= 0:
            doomed += [f + names.DELETED_SUFFIX for f in plan.renamed_files()]
        else:
            plan.leftovers_kept += [f + names.DELETED_SUFFIX for f in plan.renamed_files()]
        doomed.sort(key=lambda f: (f.endswith(_DELETED_LOG), f))
        for path in doomed:
            fileops.unlink(path)
        if doomed:
            fileops.fsync_dir(plan.partition.path)


def bytes_freed(plan: RetentionPlan, delete_delay_ms: int) -> int:
    """Bytes removed from the disk by this run (deleted files kept for the delay do not count)."""
    freed = plan.leftover_bytes
    if delete_delay_ms <= 0:
        freed += plan.bytes_deleted
    return freed


# --------------------------------------------------------------------------- LogManager.cleanupLogs


@dataclass
class PartitionRetention:
    """One partition's retention pass: its plan, and the bytes freed by this run and kept for the delete delay."""

    plan: RetentionPlan
    bytes_freed: int
    bytes_deferred: int
    dry_run: bool

    def to_dict(self) -> dict:
        row = self.plan.to_dict()
        row["bytes_freed"] = self.bytes_freed
        # Renamed .deleted now, removed by a later run once the delete delay has passed.
        row["bytes_deferred"] = self.bytes_deferred
        row["dry_run"] = self.dry_run
        return row


def _plan_one(partition: Partition, data_dir: str, resolver: ConfigResolver, state: DataDirState, *, now: int,
              log_start_offset: Optional[int], delete_delay_ms: int) -> RetentionPlan:
    """The partition's plan, or a plan that only says why no config applies to it (a problem: exit 1)."""
    config, problem = resolver.for_partition(partition, data_dir)
    if config is None:
        plan = RetentionPlan(partition, None)
        plan.problem = problem
        return plan
    return plan_partition(partition, config, state, now=now, log_start_offset=log_start_offset,
                          delete_delay_ms=delete_delay_ms)


def cleanup_logs(groups: Dict[str, List[Target]], resolver: ConfigResolver, *, now: int,
                 log_start_offset: Optional[int] = None, delete_delay_ms: int = 0, dry_run: bool = False,
                 force: bool = False) -> List[PartitionRetention]:
    """LogManager.cleanupLogs over the partitions of `groups` (data dir -> targets), offline: every data dir's
    lock taken first (none for a dry run), every partition planned before anything changes, then each data
    dir's plans applied. A dry run notes data dirs a running process holds (a real run would refuse)."""
    results: List[PartitionRetention] = []
    runner = PartitionRunner.for_targets(groups, force=force, lock=not dry_run)
    with runner.locked():
        planned: Dict[str, Tuple[DataDirState, List[RetentionPlan]]] = {}
        for data_dir in sorted(groups):
            state = DataDirState(data_dir)
            in_use = runner.in_use(data_dir)
            plans = [_plan_one(p, data_dir, resolver, state, now=now, log_start_offset=log_start_offset,
                                delete_delay_ms=delete_delay_ms) for p in partitions_of(groups[data_dir])]
            if in_use:
                for plan in plans:
                    plan.notes.append("the data dir is locked by a running process: a real run would refuse")
            planned[data_dir] = (state, plans)
        for state, plans in planned.values():
            if not dry_run:
                apply_retention(state, plans, delete_delay_ms=delete_delay_ms)
            results.extend(PartitionRetention(
                p, bytes_freed(p, delete_delay_ms) if p.active else 0,
                p.bytes_deleted if p.active and delete_delay_ms > 0 else 0, dry_run) for p in plans)
    return results


@dataclass
class RetainRequest(PartitionsRequest):
    """A retain run: the flags are ``config.retention_flags``; the log start offset to move to first (like
    DeleteRecords) and how long the renamed ``.deleted`` files stay."""

    log_start_offset: Optional[int] = None
    delete_delay_ms: int = 0


@dataclass
class RetainRun(Outcome):
    """Every partition's retention pass, in order, and the run's summary."""

    now: int
    dry_run: bool
    partitions: List[PartitionRetention]

    @property
    def problems(self) -> List[PartitionRetention]:
        return [r for r in self.partitions if r.plan.problem]

    def problem_lines(self) -> List[Tuple[str, str]]:
        return [(r.plan.partition.path, r.plan.problem) for r in self.problems]

    def summary(self) -> dict:
        active = [r for r in self.partitions if not r.plan.problem and not r.plan.skipped]
        return {"type": "summary", "dry_run": self.dry_run, "now": self.now, "partitions": len(self.partitions),
                "segments_deleted": sum(len(r.plan.deletions) for r in active),
                "bytes_freed": sum(r.bytes_freed for r in active),
                "bytes_deferred": sum(r.bytes_deferred for r in active), "problems": len(self.problems)}


def retain(request: RetainRequest) -> RetainRun:
    """``kstore retain``: the partitions resolved, a retention policy required (Kafka's 7-day default is a
    broker's, not a standby copy's: a cron line that lost its options must not delete a week-old copy),
    then :func:`cleanup_logs`."""
    # A log no command may change is refused when named; in a data dir's walk it is skipped (_not_retainable).
    groups = select(request.paths, request.topics, "retain", whole_partitions=True, skip_left_alone=False).groups
    resolver = request.resolver(list(groups))
    if (not request.flags and request.config_file is None and request.topic_config is None and not resolver.cluster
            and not request.kafka_defaults):
        raise UsageError("no retention policy given: give --retention-ms (or --retention-minutes/--retention-hours), "
                         "--retention-bytes, --config server.properties or --topic-config FILE (or data dirs holding "
                         "the cluster metadata log); Kafka's default (retention.ms 7 days) is not applied without one "
                         "(--kafka-defaults applies it)")
    now = now_ms() if request.now is None else request.now
    results = cleanup_logs(groups, resolver, now=now, log_start_offset=request.log_start_offset,
                           delete_delay_ms=request.delete_delay_ms, dry_run=request.dry_run, force=request.force)
    return RetainRun(now, request.dry_run, results)
