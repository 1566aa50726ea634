"""Kafka's ``LogCleaner`` offline: which of the given partitions its cleaner threads would clean, one
:mod:`cleaner` pass for each, then what the cleaner thread does after cleaning (``deleteOldSegments``:
every retention rule for ``compact,delete``, the log start offset rule for ``compact``). Typed results.

What the broker's cleaner never touches is skipped and said so: the KRaft metadata log (the controller
snapshots it), a directory that is no ``<topic>-<partition>``, and, in a data dir scan, topics whose
cleanup.policy has no compact. A partition named on the command line is compacted whatever its policy
only with the policy flag: compaction keeps only the latest record per key, irreversibly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import ExitStatus, KstoreError, UsageError
from kstore_cli.log import scope
from kstore_cli.cleaner.cleaner import PassResult, compact_partition
from kstore_cli.cluster.configs import PartitionsRequest
from kstore_cli.log.config import DEFAULT_SOURCE, CleanerSettings, TopicConfig
from kstore_cli.log.logdir import Partition, group_by_data_dir, partitions_of
from kstore_cli.operations.retention import DataDirState, apply_retention, now_ms, plan_partition
from kstore_cli.operations.runner import Outcome, PartitionRunner, select

#: The topic-level settings a pass depends on, reported with where each came from.
SETTINGS = ("cleanup.policy", "retention.ms", "retention.bytes", "delete.retention.ms", "min.compaction.lag.ms",
            "max.compaction.lag.ms", "min.cleanable.dirty.ratio", "segment.bytes", "segment.index.bytes")


def settings_of(config: TopicConfig, cleaner: CleanerSettings) -> Dict[str, dict]:
    """{setting: {"value", "source"}}: the topic's cleaning settings and the dedupe buffer."""
    out = {k: {"value": config.to_dict([k])[k], "source": config.describe_source(k)} for k in SETTINGS}
    out["log.cleaner.dedupe.buffer.size"] = {
        "value": cleaner.dedupe_buffer_bytes,
        "source": cleaner.sources.get("log.cleaner.dedupe.buffer.size", DEFAULT_SOURCE)}
    return out


@dataclass
class RetentionAfterCleaning:
    """The cleaner thread's deleteOldSegments after the pass."""

    segments_deleted: int
    log_start_offset: int

    def to_dict(self) -> dict:
        return {"segments_deleted": self.segments_deleted, "log_start_offset": self.log_start_offset}


@dataclass
class PartitionCompaction:
    """One partition of a compact run: the pass (or why there was none) and the retention after it."""

    partition: Partition
    policy: str
    dry_run: bool
    result: Optional[PassResult] = None
    #: Why the partition was left alone (the broker's cleaner would not clean it either).
    skipped: Optional[str] = None
    #: Why the partition could not be handled (damaged data, a directory no broker loads).
    problem: Optional[str] = None
    retention: Optional[RetentionAfterCleaning] = None
    settings: Optional[Dict[str, dict]] = None

    @property
    def cleaned(self) -> bool:
        return self.result is not None and self.result.cleaned

    def to_dict(self) -> dict:
        if self.result is None:
            return {"partition": self.partition.path, "topic": self.partition.topic,
                    "partition_id": self.partition.partition, "cleaned": False, "policy": self.policy,
                    "dry_run": self.dry_run, "notes": [],
                    **({"problem": self.problem} if self.problem is not None else {"skipped": self.skipped})}
        row = self.result.to_dict()
        row.update(policy=self.policy, dry_run=self.dry_run,
                   retention=self.retention.to_dict() if self.retention else None)
        if self.settings is not None:
            row["settings"] = self.settings
        return row


@dataclass
class CompactRun(Outcome):
    """Every partition of a compact run, in order, and the exit status its problems call for."""

    now: int
    dry_run: bool
    partitions: List[PartitionCompaction] = field(default_factory=list)
    #: The worst exit status of an error that stopped a partition (at least PROBLEMS when there is one).
    worst_status: int = ExitStatus.PROBLEMS

    @property
    def problems(self) -> List[PartitionCompaction]:
        return [p for p in self.partitions if p.problem is not None]

    def problem_lines(self) -> List[Tuple[str, str]]:
        return [(p.partition.path, p.problem) for p in self.problems]

    def problems_status(self) -> int:
        """The worst status of the partitions' problems (1, or 3 for a file not read or written)."""
        return int(self.worst_status) if self.problems else 0

    def summary(self) -> dict:
        cleaned = [p.result for p in self.partitions if p.cleaned]
        return {"type": "summary", "dry_run": self.dry_run, "now": self.now, "partitions": len(self.partitions),
                "partitions_cleaned": len(cleaned), "records_removed": sum(r.stats.records_removed for r in cleaned),
                "bytes_before": sum(r.bytes_before for r in cleaned), "bytes_after": sum(r.bytes_after for r in cleaned),
                "problems": len(self.problems)}


@dataclass
class CompactRequest(PartitionsRequest):
    """A compact run: the flags are ``config.compaction_flags`` (``cleanup.policy`` there is the policy
    override); the dedupe buffer, and whether to clean whatever the dirty ratio says."""

    dedupe_buffer_bytes: Optional[int] = None
    force_clean: bool = False


class LogCleaner:
    """A compact run, checked before anything is locked: usage errors (a file given, nothing found, a
    named partition whose policy keeps every record) are raised by the constructor."""

    def __init__(self, request: CompactRequest) -> None:
        self.request = request
        for raw in request.paths:
            if os.path.isfile(os.path.abspath(raw)):
                raise UsageError("compact works on whole partitions: give a partition or data directory, not a file",
                                 path=raw)
        # A log no command may change is refused when named; in a data dir's walk it is skipped (_one).
        self.targets = select(request.paths, request.topics, "compact", skip_left_alone=False).targets
        self.explicit = {os.path.abspath(raw) for raw in request.paths}
        self.settings = CleanerSettings.from_files(request.config_file, dedupe_buffer_bytes=request.dedupe_buffer_bytes)
        self.resolver = request.resolver(list(group_by_data_dir(self.targets)))
        for target in self.targets:
            self._refuse_keep_all_policy(target.partition)

    def _refuse_keep_all_policy(self, part: Partition) -> None:
        config, _problem = self.resolver.for_partition(part, part.data_dir)  # a problem is reported by run()
        if config is not None and part.path in self.explicit and not config.compact and part.partition >= 0:
            raise UsageError(
                f"cleanup.policy={','.join(config.cleanup_policy)} ({config.source('cleanup.policy')}): compacting "
                "would keep only the latest record per key of a topic that keeps every record; give --policy "
                "compact to compact it anyway, or set cleanup.policy in --topic-config or --config",
                path=part.path)

    def total_bytes(self) -> int:
        """The bytes of every segment of the targets (a progress bar's total)."""
        return sum(s.log_size for t in self.targets for s in t.partition.segments)

    def run(self, progress: Optional[Callable[[int], None]] = None) -> CompactRun:
        """Every data dir's lock taken first (none for a dry run), then each partition in turn."""
        req = self.request
        run = CompactRun(now_ms() if req.now is None else req.now, req.dry_run)
        groups = group_by_data_dir(self.targets)
        runner = PartitionRunner.for_targets(groups, force=req.force, lock=not req.dry_run)
        with runner.locked():
            for data_dir in sorted(groups):
                state = DataDirState(data_dir)
                in_use = runner.in_use(data_dir)
                for partition in partitions_of(groups[data_dir]):
                    run.partitions.append(self._one(partition, data_dir, state, run, in_use, progress))
        return run

    def _one(self, partition: Partition, data_dir: str, state: DataDirState, run: CompactRun, in_use: bool,
             progress: Optional[Callable[[int], None]]) -> PartitionCompaction:
        req = self.request
        left_alone = scope.left_alone_reason(partition)
        if left_alone is not None:  # before its configs: the metadata log has no topic incarnation to match
            out = PartitionCompaction(partition, "", req.dry_run)
            out.skipped = left_alone
            return out
        symlinked = scope.symlinked_reason(partition.path)
        if symlinked is not None:
            return PartitionCompaction(partition, "", req.dry_run, problem=symlinked)
        config, problem = self.resolver.for_partition(partition, data_dir)
        if config is None:
            return PartitionCompaction(partition, "", req.dry_run, problem=problem)
        out = PartitionCompaction(partition, ",".join(config.cleanup_policy), req.dry_run)
        if partition.partition < 0:
            out.problem = "not a <topic>-<partition> directory"
        elif not config.compact and partition.path not in self.explicit:
            out.skipped = f"cleanup.policy={out.policy} ({config.source('cleanup.policy')})"
        if out.skipped is not None or out.problem is not None:
            return out
        try:
            out.result = compact_partition(partition, config, state, now=run.now, settings=self.settings,
                                           force_clean=req.force_clean, dry_run=req.dry_run, progress=progress)
        except UsageError:
            raise
        except KstoreError as exc:
            out.problem = str(exc)
            run.worst_status = max(run.worst_status, exc.exit_status)
            return out
        if in_use:
            out.result.notes.append("the data dir is locked by a running process: a real run would refuse")
        if config.compact and not req.dry_run:
            out.retention = _delete_old_segments(partition, config, state, run.now)
        out.settings = settings_of(config, self.settings)
        return out


def _delete_old_segments(partition: Partition, config: TopicConfig, state: DataDirState,
                         now: int) -> Optional[RetentionAfterCleaning]:
    """The cleaner thread's deleteOldSegments after cleaning (compact,delete: every rule; compact: the log
    start offset rule only)."""
    plan = plan_partition(Partition(partition.path), config, state, now=now)
    if plan.active and (plan.deletions or plan.checkpoint_offset is not None):
        apply_retention(state, [plan])
        return RetentionAfterCleaning(len(plan.deletions), plan.new_log_start_offset)
    return None
