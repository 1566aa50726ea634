"""One partition built from several copies (kstore_cli.cluster.replicas reconciles them).

The result is the leader's log (the surviving leader-epoch lineage), byte for byte, with the older batches
below the leader's first segment taken from the copy of the same lineage that still has them (one that
agrees with the leader at least up to there): :func:`kstore_cli.cluster.replicas.merge_plan`. Every offset
appears once. Every offset of a copy that is not in the result byte for byte (diverged after the truncation
point, or other bytes below it: :attr:`Copy.left_out`) is listed, and with `keep_diverged` written to side
partition directories, whole batches (a batch straddling the truncation point included: Kafka's truncation
removes it whole). Copies with different topic ids are different topics: merge refuses them. The output gets
indexes as Kafka's recovery writes them, the merged leader-epoch checkpoint, a producer snapshot at the log
end, ``partition.metadata`` and the data dir's offset checkpoints (log start offset, high watermark, recovery
point), so Kafka loads it as it is.

All or nothing: the output (and the side dir) is built in ``<dir>.kstore-tmp`` beside it and renamed into
place. Each carries a record of the merge (:data:`RECORD`: its inputs, leader, dirs, and whether it is
finished); the side dir's is removed once both are in place, then the output's says "done" (Kafka and doctor
ignore a file at a data dir's top). A rerun after a kill removes a leftover temp dir (and a side dir its
record shows to be this merge's) and builds again; once the output is in place, it finishes (or, finished,
finds nothing to do) and reports as the first run would have.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.log import fileops, locks, names, scope
from kstore_cli.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
)
from kstore_cli.log.logdir import Partition
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.record.reader import map_file
from kstore_cli.operations.recovery import apply_plan, plan_partition
from kstore_cli.cluster.replicas import PartitionCopies, compare

#: The record of the merge in its output dir (and in the side dir until both are in place).
RECORD = "kstore-merge.json"


@dataclass
class MergeResult:
    """What one merged partition holds, and where each range came from."""

    topic: str
    partition: int
    destination: str
    log_start_offset: int
    log_end_offset: int
    sources: List[Tuple[str, int, int]] = field(default_factory=list)  # (copy, first offset, last offset)
    #: (copy, first, last, reason) of every offset range of a copy that is not in the result (replicas.REASONS)
    diverged: List[Tuple[str, int, int, str]] = field(default_factory=list)
    side_dirs: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"type": "partition", "topic": self.topic, "partition": self.partition,
                "destination": self.destination, "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset,
                "sources": [{"copy": c, "first_offset": a, "last_offset": b} for c, a, b in self.sources],
                "diverged": [{"copy": c, "first_offset": a, "last_offset": b, "reason": r}
                             for c, a, b, r in self.diverged],
                "side_dirs": self.side_dirs}


def _write_batches(directory: str, batches: List[Tuple]) -> None:
    """The batches (in offset order) as segments in `directory`: one .log per source .log, named by its first
    batch's offset."""
    groups: List[List[Tuple]] = []
    for b in batches:
        if not groups or groups[-1][-1][5] != b[5]:
            groups.append([])
        groups[-1].append(b)
    for group in groups:
        def fill(out, group=group) -> None:
            for _base, _last, _crc, position, size, log in group:
                out.write(map_file(log)[position:position + size])
        fileops.atomic_write(os.path.join(directory, names.filename_prefix(group[0][0]) + names.LOG_SUFFIX), fill)


def _finish(destination: str, end_offset: int) -> None:
    apply_plan(plan_partition(Partition(destination)))
    ProducerStateManager.replay(Partition(destination)).write_snapshot(destination, end_offset)


def _result(pc: PartitionCopies, output_root: str, keep_diverged: Optional[str]) -> MergeResult:
    """What merging `pc` gives (nothing written)."""
    leader = pc.leader
    name = f"{pc.topic}-{pc.partition}"
    result = MergeResult(pc.topic, pc.partition, os.path.join(output_root, name), leader.log_start_offset,
                         leader.log_end_offset)
    limit = pc.limit
    if pc.donor is not None:
        first = next(b[0] for c, b in pc.plan if c is pc.donor)
        result.sources.append((pc.donor.path, first, limit - 1))
        result.log_start_offset = pc.donor.log_start_offset
    if leader.batches:
        result.sources.append((leader.path, max(limit, leader.batches[0][0]), leader.log_end_offset - 1))
    for n, c in enumerate(pc.copies):
        result.diverged.extend((c.path, a, b, r) for a, b, r in c.left_out)
        if keep_diverged is not None and c.left_out_batches:
            result.side_dirs.append(os.path.join(keep_diverged, _side_dir(pc, n)))
    return result


def _side_dir(pc: PartitionCopies, n: int) -> str:
    """Where the n-th copy's offsets not taken go, under the --keep-diverged dir."""
    return os.path.join(f"copy{n}", f"{pc.topic}-{pc.partition}")


def _build_partition(pc: PartitionCopies, destination: str) -> None:
    """Write the merged partition `pc` into `destination` (a new dir)."""
    leader = pc.leader
    fileops.make_dirs(destination)
    epochs = list(leader.epochs)
    donor = pc.donor
    if donor is not None:
        _write_batches(destination, [b for c, b in pc.plan if c is donor])
        older = [(e, s) for e, s in donor.epochs if s < pc.limit and (not epochs or e < epochs[0][0])]
        epochs = older + epochs
    for segment in Partition(leader.path).segments:
        fileops.copy_file(segment.log, os.path.join(destination, os.path.basename(segment.log)))
    fileops.atomic_write(os.path.join(destination, LEADER_EPOCH_CHECKPOINT),
                         format_leader_epoch_checkpoint(epochs).encode())
    # The leader's partition.metadata, else another copy's (one without it takes the id it is given).
    for c in [leader] + pc.copies:
        if os.path.isfile(os.path.join(c.path, PARTITION_METADATA)):
            fileops.copy_file(os.path.join(c.path, PARTITION_METADATA), os.path.join(destination, PARTITION_METADATA))
            break
    _finish(destination, leader.log_end_offset)


def _build_side(pc: PartitionCopies, side_root: str) -> None:
    """Every batch of every copy not taken, as one side partition per copy under `side_root`."""
    for n, c in enumerate(pc.copies):
        if not c.left_out_batches:
            continue
        side = os.path.join(side_root, _side_dir(pc, n))
        fileops.make_dirs(side)
        _write_batches(side, c.left_out_batches)
        apply_plan(plan_partition(Partition(side)))


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


def _record(directory: Optional[str]) -> Optional[dict]:
    """The merge record in `directory`, or None."""
    if directory is None:
        return None
    try:
        with open(os.path.join(directory, RECORD), "rb") as f:
            record = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("command") == "merge" else None


def _is_empty(directory: str) -> bool:
    return not os.path.lexists(directory) or (os.path.isdir(directory) and not os.listdir(directory))


def _same_merge(found: Optional[dict], record: dict) -> bool:
    """`found` is the record of this same merge (its state aside)."""
    return found is not None and {**found, "state": None} == {**record, "state": None}


def _check_paths(paths: List[str], output_root: str, keep_diverged: Optional[str], record: dict) -> None:
    """Never into an input nor any Kafka data dir: merge writes the output's own checkpoints. A rerun finds
    this merge's own output in place, checkpoints and all: that one is judged by the dir it lies in."""
    for out, option in ((output_root, "--output-dir"), (keep_diverged, "--keep-diverged")):
        if out is None:
            continue
        own = _same_merge(_record(out), record) and not os.path.lexists(os.path.join(out, "meta.properties"))
        scope.check_output_dir(os.path.dirname(out) if own else out, option=option, inputs=paths)
    if keep_diverged is not None and (keep_diverged == output_root or
                                      keep_diverged.startswith(output_root + os.sep) or
                                      output_root.startswith(keep_diverged + os.sep)):
        raise UsageError("--keep-diverged and --output-dir must be apart (neither inside the other)",
                         path=keep_diverged)


def _refuse_topic_ids(copies: List[PartitionCopies]) -> None:
    """Copies with different topic ids are different topics (Partition.checkOrSetTopicId): never merged."""
    for pc in copies:
        if pc.other_topic_ids:
            ids = {pc.topic_id or "none": [c.path for c in pc.copies], **pc.other_topic_ids}
            listed = "; ".join(f"{tid}: {', '.join(sorted(p))}" for tid, p in sorted(ids.items()))
            raise KstoreError(f"{pc.topic}-{pc.partition}: the copies have different topic ids ({listed}); they "
                              "are different topics, not copies of one partition: merge only the copies of one "
                              "topic id (give their partition dirs)")


def _relative(path: str, output_root: str) -> str:
    return os.path.relpath(os.path.realpath(path), os.path.realpath(output_root))


def _complete(output_root: str, record: dict) -> None:
    """Both dirs are in place: remove the side dir's record, then mark the output's done (the last step)."""
    keep = record.get("keepDiverged")
    if keep is not None:
        keep = os.path.normpath(os.path.join(os.path.realpath(output_root), keep))
    if keep is not None and os.path.isdir(keep):
        fileops.unlink(os.path.join(keep, RECORD))
        fileops.fsync_dir(keep)
    fileops.atomic_write(os.path.join(output_root, RECORD), _dump({**record, "state": "done"}))


def _dump(record: dict) -> bytes:
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()


def _build(copies: List[PartitionCopies], results: List[MergeResult], output_root: str,
           keep_diverged: Optional[str], record: dict) -> None:
    """Build the output (and the side dir) in temp dirs beside them, then rename them into place."""
    tmp_out = output_root + fileops.TMP_SUFFIX
    tmp_side = None if keep_diverged is None else keep_diverged + fileops.TMP_SUFFIX
    for leftover in filter(None, (tmp_out, tmp_side)):
        if os.path.lexists(leftover):
            fileops.remove_tree(leftover)
    if keep_diverged is not None and not _is_empty(keep_diverged):
        fileops.remove_tree(keep_diverged)  # this merge's (its record says so), from a run killed before the output
    fileops.make_dirs(tmp_out, like=output_root if os.path.isdir(output_root) else None)
    fileops.atomic_write(os.path.join(tmp_out, RECORD), _dump(record))
    for pc, r in zip(copies, results):
        _build_partition(pc, os.path.join(tmp_out, os.path.basename(r.destination)))
    _write_checkpoints(tmp_out, results, copies)
    if tmp_side is not None and keep_diverged is not None:
        fileops.make_dirs(tmp_side, like=keep_diverged if os.path.isdir(keep_diverged) else None)
        fileops.atomic_write(os.path.join(tmp_side, RECORD), _dump(record))
        for pc in copies:
            _build_side(pc, tmp_side)
        fileops.rename(tmp_side, keep_diverged)
        fileops.fsync_dir(os.path.dirname(keep_diverged))
    fileops.rename(tmp_out, output_root)
    fileops.fsync_dir(os.path.dirname(output_root))
    _complete(output_root, record)


def merge(paths: List[str], output_root: str, *, leader_path: Optional[str] = None,
          keep_diverged: Optional[str] = None
          ) -> Tuple[List[PartitionCopies], List[MergeResult], List[Tuple[str, str]]]:
    """Merge every partition that has two or more copies among `paths` into `output_root`, all or nothing;
    also the (partition path, reason) of each log the walk left out (:func:`replicas.find_copies`)."""
    output_root = os.path.abspath(output_root)
    keep_diverged = None if keep_diverged is None else os.path.abspath(keep_diverged)
    # The dirs the outputs are built beside: one merge at a time there (a second would clear the first's
    # temp dir as a killed run's leftover).
    with locks.lock_dirs([os.path.dirname(d) for d in (output_root, keep_diverged) if d is not None],
                           "a merge's output"):
        return _merge(paths, output_root, leader_path, keep_diverged)


def _merge(paths: List[str], output_root: str, leader_path: Optional[str],
           keep_diverged: Optional[str]) -> Tuple[List[PartitionCopies], List[MergeResult]]:
    # Paths relative to the output dir: the record is the same for the same command wherever the dirs are.
    record = {"command": "merge", "inputs": sorted(_relative(p, output_root) for p in paths),
              "leader": None if leader_path is None else _relative(leader_path, output_root),
              "keepDiverged": None if keep_diverged is None else _relative(keep_diverged, output_root),
              "state": "building"}
    previous = _record(output_root)
    if not _same_merge(previous, record):
        previous = None  # another merge's output
    _check_paths(paths, output_root, keep_diverged, record)
    if previous is None:
        if not _is_empty(output_root):
            raise UsageError("the output dir is not empty: merge writes new partition directories", path=output_root)
        if keep_diverged is not None and not _is_empty(keep_diverged) and _record(keep_diverged) != record:
            raise UsageError("the --keep-diverged dir is not empty: merge writes new partition directories",
                             path=keep_diverged)
    copies, skipped = compare(paths, leader_path)
    _refuse_topic_ids(copies)
    results = [_result(pc, output_root, keep_diverged) for pc in copies]
    if previous is None:
        _build(copies, results, output_root, keep_diverged, record)
    elif previous.get("state") != "done":  # killed after the output was in place: finish
        _complete(output_root, record)
    return copies, results, skipped
