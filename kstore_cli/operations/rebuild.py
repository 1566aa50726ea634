"""rebuild-index, offline: the index files verify-index calls wrong (and the missing ones) rewritten as Kafka's
recovery writes them, and, with ``truncate``, a damaged tail cut as recovery cuts it (into the quarantine dir).

:func:`repair_plan` says what to write, :func:`rebuild_partition` writes it and hands back one typed result per
partition (:class:`PartitionRebuild`: a :class:`SegmentRebuild` per segment, the files dropped after a cut, the
quarantine dir), each with the ``to_dict`` that ``rebuild-index --json`` prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kstore_cli.errors import ExitStatus
from kstore_cli.cluster.configs import resolver_from_files
from kstore_cli.log.config import ConfigResolver
from kstore_cli.log.index import DEFAULT_INDEX_INTERVAL_BYTES
from kstore_cli.log.logdir import Partition, Target
from kstore_cli.operations.quarantine import default_quarantine_root
from kstore_cli.operations.runner import Outcome, PartitionRunner, select
from kstore_cli.operations.repair_costs import RepairCost, repair_costs
from kstore_cli.operations.recovery import ZERO_TAIL, PartitionPlan, SegmentPlan, TailProblem, apply_plan, plan_partition
from kstore_cli.operations.verify import ERROR, verify_partition

DROPPED_MESSAGE = "files after the cut: Kafka's recovery deletes them; kstore moves them to the quarantine dir"
ZERO_TAIL_MESSAGE = ("zero-filled preallocated tail (not corruption); rerun with --truncate to trim it as Kafka's "
                     "recovery does")


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


@dataclass
class SegmentRebuild:
    """One segment: what recovery found in its .log and what happened (or would happen) to its index files."""

    partition: str
    segment: int
    log: str
    #: unchanged, rebuilt, would rebuild, kept, damaged, zero-tail, truncated, skipped or unreadable.
    status: str
    #: Index file suffix -> create, rewrite, unchanged or kept.
    files: Dict[str, str]
    #: Index file suffix -> why it is written (the verify-index finding, "missing", "--all", the cut).
    reasons: Dict[str, str] = field(default_factory=dict)
    message: Optional[str] = None
    #: What recovery found (None when the segment was skipped or unreadable).
    log_size: Optional[int] = None
    valid_bytes: Optional[int] = None
    next_offset: Optional[int] = None
    aborted_transactions: Optional[int] = None
    problem: Optional[TailProblem] = None
    truncated_bytes: Optional[int] = None

    @property
    def written(self) -> List[Tuple[str, str]]:
        """(suffix, action) of the files written or to be written."""
        return [(k, v) for k, v in self.files.items() if v not in ("unchanged", "kept")]

    def to_dict(self) -> dict:
        row = {"type": "segment", "partition": self.partition, "segment": self.segment, "log": self.log,
               "status": self.status, "files": self.files}
        if self.reasons:
            row["reasons"] = self.reasons
        if self.message is not None:
            row["message"] = self.message
        if self.log_size is not None:
            row.update(log_size=self.log_size, valid_bytes=self.valid_bytes, next_offset=self.next_offset,
                       aborted_transactions=self.aborted_transactions)
        if self.problem is not None:
            row["problem"] = self.problem.to_dict()
            row["truncated_bytes"] = self.truncated_bytes
        return row


@dataclass
class DroppedFiles:
    """The files after a cut (later segments, snapshots past the new end), which Kafka's recovery deletes."""

    partition: str
    files: List[str]
    status: str  # "quarantined" or "would be dropped"
    message: str = DROPPED_MESSAGE

    def to_dict(self) -> dict:
        return {"type": "dropped", "partition": self.partition, "files": self.files, "status": self.status,
                "message": self.message}


@dataclass
class CutFigures:
    """What the cut of a damaged segment keeps and cuts, in offsets and records: every batch before it kept,
    every intact batch after it (salvage's resync scan) and the damaged ranges cut."""

    partition: str
    #: "cut", "would cut" (--dry-run) or "not cut" (no --truncate)
    status: str
    cost: RepairCost

    def to_dict(self) -> dict:
        loses = self.cost.to_dict()["loses"]
        return {"type": "cut", "partition": self.partition, "status": self.status, "keeps": self.cost.keeps.to_dict(),
                "cuts": loses}

    def text(self) -> str:
        """The line rebuild-index prints for it."""
        label = "with --truncate it would cut" if self.status == "not cut" else self.status
        return f"{self.partition}: {label}: {self.cost.text('cuts')}"


@dataclass
class QuarantineMove:
    """Where a cut put what it removed: (source, destination) of each file and of the cut tail."""

    partition: str
    dir: str
    moved: List[Tuple[str, str]]

    def to_dict(self) -> dict:
        return {"type": "quarantine", "partition": self.partition, "dir": self.dir,
                "moved": [{"from": a, "to": b} for a, b in self.moved]}


@dataclass
class ConfigNote:
    """Why a partition's index.interval.bytes is not what the cluster metadata log says for its topic: the
    partition refused (`index_interval_bytes` None: nothing done), or another incarnation of its topic rebuilt
    with the value that does not come from the topic's overrides in the metadata log (`source` says where)."""

    partition: str
    message: str
    index_interval_bytes: Optional[int] = None
    source: Optional[str] = None

    @property
    def refused(self) -> bool:
        return self.index_interval_bytes is None

    def detail(self) -> str:
        """What it says, without the partition."""
        if self.refused:
            return self.message
        return (f"index.interval.bytes {self.index_interval_bytes} from {self.source}, not from the cluster "
                f"metadata: {self.message}")

    def text(self) -> str:
        """The line rebuild-index prints for it."""
        return f"{self.partition}: {'not handled: ' if self.refused else ''}{self.detail()}"

    def to_dict(self) -> dict:
        row = {"type": "config", "partition": self.partition, "status": "refused" if self.refused else "applied",
               "message": self.message}
        if not self.refused:
            row.update(index_interval_bytes=self.index_interval_bytes, source=self.source)
        return row


@dataclass
class PartitionRebuild:
    """What rebuild-index found and did in one partition."""

    partition: str
    segments: List[SegmentRebuild]
    dropped: Optional[DroppedFiles] = None
    quarantine: Optional[QuarantineMove] = None
    cut: Optional[CutFigures] = None
    #: Damage left in place (not cut, or not cuttable), or the partition refused: exit 1.
    problems: bool = False
    config: Optional[ConfigNote] = None

    @classmethod
    def refused(cls, partition: Partition, why: str) -> "PartitionRebuild":
        """A partition left alone because no config applies to it (exit 1)."""
        return cls(partition.path, [], problems=True, config=ConfigNote(partition.path, why))

    def results(self) -> List["ConfigNote | SegmentRebuild | CutFigures | DroppedFiles | QuarantineMove"]:
        """Everything to report, in order: the config note, the segments, what the cut keeps and cuts, the dropped
        files, the quarantine dir."""
        return [*(r for r in (self.config,) if r is not None), *self.segments,
                *(r for r in (self.cut, self.dropped, self.quarantine) if r is not None)]


def rebuild_partition(partition: Partition, *, only: Optional[int] = None,
                      index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, all_indexes: bool = False,
                      truncate: bool = False, dry_run: bool = False,
                      quarantine_dir: Optional[str] = None) -> PartitionRebuild:
    """Rebuild one partition's wrong and missing indexes (:func:`repair_plan`); a damaged tail is cut only with
    `truncate`, into `quarantine_dir` (default: beside the data dir). `dry_run` writes nothing. The caller
    holds the data dir's lock."""
    plan = repair_plan(partition, only=only, index_interval_bytes=index_interval_bytes, all_indexes=all_indexes)
    damaged = plan.damaged
    problems = any(s.error is not None or (s.result is not None and s.result.problem is not None
                                           and not s.result.problem.truncatable) for s in plan.segments)
    cut = None
    if damaged is not None and (truncate or damaged.result.problem.kind != ZERO_TAIL):
        costs = repair_costs(plan)  # before the cut: what lies past it is read from the files
        if costs is not None:
            cut = CutFigures(partition.path, ("would cut" if dry_run else "cut") if truncate else "not cut", costs[0])
    applied = None
    if damaged is not None and not truncate:
        problems = True
    elif not dry_run:
        root = default_quarantine_root(partition) if damaged is not None and quarantine_dir is None else quarantine_dir
        applied = apply_plan(plan, truncate=truncate, quarantine_root=root)
    elif damaged is not None:
        problems = True
    out = PartitionRebuild(partition.path, [_segment_rebuild(plan, s, truncate, dry_run) for s in plan.segments],
                           problems=problems, cut=cut)
    if damaged is not None and damaged.result.problem.kind == ZERO_TAIL and not truncate:
        for seg in out.segments:
            if seg.segment == damaged.segment.base_offset:
                seg.message = ZERO_TAIL_MESSAGE
    if plan.dropped_files:
        out.dropped = DroppedFiles(partition.path, plan.dropped_files,
                                   "quarantined" if (applied and applied.quarantined) else "would be dropped")
    if applied is not None and applied.quarantine_dir:
        out.quarantine = QuarantineMove(partition.path, applied.quarantine_dir, list(applied.quarantined))
    return out


def _suffix(path: str) -> str:
    return os.path.basename(path).split(".", 1)[1]


def _segment_rebuild(plan: PartitionPlan, splan: SegmentPlan, truncate: bool, dry_run: bool) -> SegmentRebuild:
    seg = splan.segment
    out = SegmentRebuild(plan.partition.path, seg.base_offset, seg.log, splan.status,
                         {_suffix(c.path): c.action for c in splan.changes},
                         {_suffix(c.path): c.reason for c in splan.changed_files if c.reason})
    if splan.error is not None:
        out.message = str(splan.error)
    if splan.skipped is not None:
        out.message = splan.skipped
    result = splan.result
    if result is not None:
        out.log_size, out.valid_bytes, out.next_offset = result.log_size, result.valid_bytes, result.next_offset
        out.aborted_transactions = len(result.aborted)
        if result.problem is not None:
            out.problem, out.truncated_bytes = result.problem, result.truncated_bytes
            if not result.problem.truncatable:
                out.message = "Kafka's recovery does not cut this (it raises); kstore leaves it alone"
            elif truncate and not dry_run and splan is plan.damaged:
                out.status = "truncated"
            elif dry_run and truncate:
                out.message = f"would cut {result.truncated_bytes} bytes at byte {result.valid_bytes}"
            else:
                out.message = (f"valid data ends at byte {result.valid_bytes}; rerun with --truncate to cut "
                               f"{result.truncated_bytes} bytes as Kafka's recovery would")
    if dry_run and out.status == "rebuilt":
        out.status = "would rebuild"
    return out


@dataclass
class RebuildRequest:
    """A rebuild-index run: the PATHS, topic globs, index.interval.bytes (the flag, else the config files, else
    the cluster metadata log), which indexes to rewrite, whether to cut a damaged tail and where to, and the mode."""

    paths: Sequence[str]
    topics: Optional[str] = None
    index_interval_bytes: Optional[int] = None
    config_file: Optional[str] = None
    topic_config: Optional[str] = None
    cluster_metadata: bool = True
    all_indexes: bool = False
    truncate: bool = False
    quarantine_dir: Optional[str] = None
    dry_run: bool = False
    force: bool = False
    #: partitions rebuilt at once, each in its own process
    jobs: int = 1


@dataclass
class RebuildRun(Outcome):
    """Every partition's rebuild, in order; damage left in place or a partition refused is exit 1."""

    skipped: List[Tuple[str, str]] = field(default_factory=list)
    results: List[PartitionRebuild] = field(default_factory=list)

    def problems_status(self) -> int:
        return int(ExitStatus.PROBLEMS) if any(r.problems for r in self.results) else 0


class IndexRebuild:
    """A rebuild-index run, its partitions selected (usage errors raised) before anything is locked."""

    def __init__(self, request: RebuildRequest) -> None:
        self.request = request
        self.selection = select(request.paths, request.topics, "rebuild-index", quarantine_dir=request.quarantine_dir)

    def run(self, on_result: Optional[Callable[[PartitionRebuild], None]] = None) -> RebuildRun:
        """Every partition under its data dir's lock (none for a dry run); `on_result` is told each one's result."""
        req = self.request
        groups = self.selection.groups
        flags = ({} if req.index_interval_bytes is None
                 else {"index.interval.bytes": (req.index_interval_bytes, "--index-interval-bytes")})
        resolver = resolver_from_files(req.config_file, req.topic_config, flags, data_dirs=list(groups),
                                       cluster_metadata=req.cluster_metadata)
        runner = PartitionRunner.for_targets(groups, force=req.force, lock=not req.dry_run)
        results = runner.each_target(groups, lambda target, data_dir: _rebuild_one(
            resolver, target, data_dir, all_indexes=req.all_indexes, truncate=req.truncate, dry_run=req.dry_run,
            quarantine_dir=req.quarantine_dir), on_result=on_result, jobs=req.jobs)
        return RebuildRun(skipped=self.selection.skipped, results=results)


def _rebuild_one(resolver: ConfigResolver, target: Target, data_dir: str, **kwargs: Any) -> PartitionRebuild:
    """One partition rebuilt with its index.interval.bytes, or refused where Kafka refuses its config. An older
    incarnation of a recreated topic (a stray replica) is rebuilt without the new topic's overrides from the
    metadata log, and says so: the interval changes only the index's density, and rebuild-index deletes nothing
    Kafka's recovery would keep."""
    config, problem = resolver.for_partition(target.partition, data_dir, other_incarnation=True)
    if config is None:
        return PartitionRebuild.refused(target.partition, problem or "")
    interval = config.get("index.interval.bytes")
    result = rebuild_partition(target.partition, only=target.only, index_interval_bytes=interval, **kwargs)
    if problem is not None:
        result.config = ConfigNote(target.partition.path, problem, interval, config.source("index.interval.bytes"))
    return result
