"""One partition built from several copies (kstore_cli.segment.replicas reconciles them).

The result is the leader's log (the surviving leader-epoch lineage), byte for byte, with the older batches
below the leader's first segment taken from the copy of the same lineage that still has them (one that
agrees with the leader at least up to there). Every offset appears once. What only a diverged copy holds
(the offsets a follower would truncate) is listed, and with `keep_diverged` written to a side partition
directory. The output gets indexes as Kafka's recovery writes them, the merged leader-epoch checkpoint,
a producer snapshot at the log end, ``partition.metadata`` and the data dir's offset checkpoints (log start
offset, high watermark, recovery point), so Kafka loads it as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from kstore_cli.errors import UsageError
from kstore_cli.segment import fileops, names, scope
from kstore_cli.segment.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
)
from kstore_cli.segment.logdir import Partition
from kstore_cli.segment.producer_state import ProducerStateManager
from kstore_cli.segment.reader import map_file
from kstore_cli.segment.recovery import apply_plan, plan_partition
from kstore_cli.segment.replicas import Copy, PartitionCopies, compare


@dataclass
class MergeResult:
    """What one merged partition holds, and where each range came from."""

    topic: str
    partition: int
    destination: str
    log_start_offset: int
    log_end_offset: int
    sources: List[Tuple[str, int, int]] = field(default_factory=list)  # (copy, first offset, last offset)
    diverged: List[Tuple[str, int, int]] = field(default_factory=list)  # (copy, first, last): left out
    side_dirs: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"type": "partition", "topic": self.topic, "partition": self.partition,
                "destination": self.destination, "logStartOffset": self.log_start_offset,
                "logEndOffset": self.log_end_offset,
                "sources": [{"copy": c, "firstOffset": a, "lastOffset": b} for c, a, b in self.sources],
                "diverged": [{"copy": c, "firstOffset": a, "lastOffset": b} for c, a, b in self.diverged],
                "sideDirs": self.side_dirs}


def _segments_of(copy: Copy) -> Dict[str, List[Tuple]]:
    """The copy's batches grouped by .log, in order."""
    out: Dict[str, List[Tuple]] = {}
    for b in copy.batches:
        out.setdefault(b[5], []).append(b)
    return out


def _write_batches(path: str, batches: List[Tuple]) -> None:
    def fill(out) -> None:
        for _base, _last, _crc, position, size, log in batches:
            out.write(map_file(log)[position:position + size])
    fileops.atomic_write(path, fill)


def _donor(pc: PartitionCopies, leader: Copy, limit: int) -> Optional[Copy]:
    """The copy of the leader's lineage with the most history below `limit` (the leader's first segment)."""
    best = None
    for c in pc.copies:
        if c is leader or c.truncate_to is None or c.truncate_to < limit or c.mismatches:
            continue
        below = [b for b in c.batches if b[1] < limit and b[1] >= c.log_start_offset]
        if below and (best is None or below[0][0] < best[1]):
            best = (c, below[0][0])
    return best[0] if best else None


def _finish(destination: str, end_offset: int) -> None:
    apply_plan(plan_partition(Partition(destination)))
    ProducerStateManager.replay(Partition(destination)).write_snapshot(destination, end_offset)


def _merge_one(pc: PartitionCopies, output_root: str, keep_diverged: Optional[str]) -> MergeResult:
    leader = pc.leader
    name = f"{pc.topic}-{pc.partition}"
    destination = os.path.join(output_root, name)
    fileops.make_dirs(destination)
    leader_part = Partition(leader.path)
    limit = leader_part.segments[0].base_offset if leader_part.segments else leader.log_end_offset
    donor = _donor(pc, leader, limit)
    result = MergeResult(pc.topic, pc.partition, destination, leader.log_start_offset, leader.log_end_offset)
    epochs = list(leader.epochs)
    if donor is not None:
        for log, batches in _segments_of(donor).items():
            kept = [b for b in batches if b[1] < limit and b[1] >= donor.log_start_offset]
            if kept:
                _write_batches(os.path.join(destination, os.path.basename(log)), kept)
        first = next(b[0] for b in donor.batches if b[1] >= donor.log_start_offset)
        result.sources.append((donor.path, first, limit - 1))
        result.log_start_offset = donor.log_start_offset
        older = [(e, s) for e, s in donor.epochs if s < limit and (not epochs or e < epochs[0][0])]
        epochs = older + epochs
    for segment in leader_part.segments:
        fileops.copy_file(segment.log, os.path.join(destination, os.path.basename(segment.log)))
    if leader.batches:
        result.sources.append((leader.path, max(limit, leader.batches[0][0]), leader.log_end_offset - 1))
    fileops.atomic_write(os.path.join(destination, LEADER_EPOCH_CHECKPOINT),
                         format_leader_epoch_checkpoint(epochs).encode())
    if os.path.isfile(os.path.join(leader.path, PARTITION_METADATA)):
        fileops.copy_file(os.path.join(leader.path, PARTITION_METADATA), os.path.join(destination, PARTITION_METADATA))
    _finish(destination, leader.log_end_offset)
    for n, c in enumerate(pc.copies):
        if c.diverged is None:
            continue
        result.diverged.append((c.path, *c.diverged))
        if keep_diverged is not None:
            side = os.path.join(keep_diverged, f"copy{n}", name)
            fileops.make_dirs(side)
            rest = [b for b in c.batches if b[0] >= c.truncate_to]
            if rest:
                _write_batches(os.path.join(side, names.filename_prefix(rest[0][0]) + names.LOG_SUFFIX), rest)
                apply_plan(plan_partition(Partition(side)))
            result.side_dirs.append(side)
    return result


def _write_checkpoints(output_root: str, results: List[MergeResult], copies: List[PartitionCopies]) -> None:
    hw = {(pc.topic, pc.partition): pc.leader.high_watermark for pc in copies}
    entries = {
        LOG_START_OFFSET_CHECKPOINT: {(r.topic, r.partition): r.log_start_offset for r in results},
        RECOVERY_POINT_CHECKPOINT: {(r.topic, r.partition): r.log_end_offset for r in results},
        REPLICATION_OFFSET_CHECKPOINT: {(r.topic, r.partition): min(hw[(r.topic, r.partition)], r.log_end_offset)
                                        for r in results},
    }
    for name, values in entries.items():
        fileops.atomic_write(os.path.join(output_root, name), format_offset_checkpoint(values).encode())


def merge(paths: List[str], output_root: str, *, leader_path: Optional[str] = None,
          keep_diverged: Optional[str] = None) -> Tuple[List[PartitionCopies], List[MergeResult]]:
    """Merge every partition that has two or more copies among `paths` into `output_root`."""
    output_root = os.path.abspath(output_root)
    # Never into an input nor any Kafka data dir: merge writes the output's own checkpoints.
    scope.check_output_dir(output_root, inputs=paths)
    if keep_diverged is not None:
        scope.check_output_dir(keep_diverged, option="--keep-diverged", inputs=paths)
    if os.path.exists(output_root) and os.listdir(output_root):
        raise UsageError("the output dir is not empty: merge writes new partition directories", path=output_root)
    copies = compare(paths, leader_path)
    if not copies:
        raise UsageError("no partition has two or more copies in " + ", ".join(paths))
    fileops.make_dirs(output_root)
    results = [_merge_one(pc, output_root, keep_diverged) for pc in copies]
    _write_checkpoints(output_root, results, copies)
    return copies, results
