"""One partition summarised as ``kstore inspect`` reports it: segments, offsets, formats, producers,
transactions and index health (what verify-index finds), from one read of its segments."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

from kstore_cli.codecs import CODEC_NAMES
from kstore_cli.log.logdir import NESTED_DATA_DIR, Partition, PartitionDir, loaded, nested_data_dir
from kstore_cli.operations.runner import stream
from kstore_cli.operations.verify import NOTE, verify_partition
from kstore_cli.log.unified_log import DataDirStates, log_offsets


@dataclass
class PartitionSummary:
    """What inspect reports about one partition (``to_dict`` is its JSON line)."""

    partition: str
    topic: str
    partition_id: int
    base_offsets: List[int]
    log_start_offset: Optional[int]
    log_start_offset_source: str
    last_offset: Optional[int]
    log_end_offset: Optional[int]
    size_bytes: int
    min_timestamp: Optional[int]
    max_timestamp: Optional[int]
    batches: int
    magics: List[int]
    codecs: List[str]
    producer_ids: List[int]
    open_transactions: List[Tuple[int, int]]
    aborted_transactions: int
    snapshots: List[str]
    problems: List[dict]
    notes: int
    leftover_files: List[str] = field(default_factory=list)
    orphan_indexes: List[str] = field(default_factory=list)

    @property
    def segments(self) -> int:
        return len(self.base_offsets)

    @property
    def index_health(self) -> str:
        return "ok" if not self.problems else f"{len(self.problems)} problem(s)"

    def to_dict(self) -> dict:
        return {
            "type": "partition", "partition": self.partition, "topic": self.topic, "partition_id": self.partition_id,
            "segments": self.segments, "base_offsets": self.base_offsets,
            "log_start_offset": self.log_start_offset, "log_start_offset_source": self.log_start_offset_source,
            "last_offset": self.last_offset, "log_end_offset": self.log_end_offset, "size_bytes": self.size_bytes,
            "min_timestamp": self.min_timestamp, "max_timestamp": self.max_timestamp, "batches": self.batches,
            "magics": self.magics, "codecs": self.codecs, "producer_ids": self.producer_ids,
            "open_transactions": [{"producer_id": p, "first_offset": f} for p, f in self.open_transactions],
            "aborted_transactions": self.aborted_transactions, "snapshots": self.snapshots,
            "index_health": self.index_health, "problems": self.problems, "notes": self.notes,
            "leftover_files": self.leftover_files, "orphan_indexes": self.orphan_indexes,
        }


def summarize_partitions(partitions: Sequence["Partition | PartitionDir"], *, jobs: int = 1,
                         progress: Optional[Callable[[int], None]] = None,
                         skipped: Optional[List[Tuple[str, str]]] = None) -> Iterator[PartitionSummary]:
    """Each partition's summary, in order, read in `jobs` forked processes (runner.stream); `progress` is
    told the .log bytes read. A lazy walk's child that turns out to be a data dir of its own is no partition:
    its (path, why) goes to `skipped`."""
    states = DataDirStates()
    for partition in partitions:
        states[partition.data_dir]  # each data dir's checkpoints read once here, before the workers fork
    inline = jobs <= 1 or len(partitions) <= 1
    for row in stream(lambda p: summarize_partition(p, states, progress=progress if inline else None),
                      partitions, jobs=jobs):
        if isinstance(row, tuple):
            if skipped is not None:
                skipped.append(row)
            continue
        if not inline and progress is not None:
            progress(row.size_bytes)
        yield row


def summarize_partition(partition: "Partition | PartitionDir", states: DataDirStates,
                        progress: Optional[Callable[[int], None]] = None
                        ) -> Union[PartitionSummary, Tuple[str, str]]:
    """Read the partition once (as verify-index does) and summarise it (a lazy resolve's is listed here:
    one that holds a data dir's own files is (path, why) instead, as the data dir's walk skips it)."""
    ref, partition = partition, loaded(partition)
    if nested_data_dir(ref, partition):
        return (partition.path, NESTED_DATA_DIR)
    findings, plan = verify_partition(partition, progress=progress, compare_indexes=False)
    results = [s.result for s in plan.segments if s.result is not None]
    first_base = partition.segments[0].base_offset if partition.segments else None
    offsets = log_offsets(partition, states[partition.data_dir],
                          log_end_offset=results[-1].next_offset if results else None)
    last_offsets = [r.last_offset for r in results if r.last_offset is not None]
    timestamps = [r.min_timestamp for r in results if r.min_timestamp is not None]
    max_ts = [r.max_timestamp for r in results if r.max_timestamp >= 0]
    errors = [f for f in findings if f.severity != NOTE]  # errors and warnings
    return PartitionSummary(
        partition=partition.path, topic=partition.topic, partition_id=partition.partition,
        base_offsets=[s.base_offset for s in partition.segments],
        log_start_offset=offsets.log_start_offset if partition.segments else None,
        log_start_offset_source=offsets.log_start_offset_source,
        last_offset=max(last_offsets) if last_offsets else None,
        log_end_offset=results[-1].next_offset if results else first_base,
        size_bytes=sum(r.log_size for r in results),
        min_timestamp=min(timestamps) if timestamps else None, max_timestamp=max(max_ts) if max_ts else None,
        batches=sum(r.batches for r in results),
        magics=sorted(set().union(*[r.magics for r in results])) if results else [],
        codecs=[CODEC_NAMES.get(c, f"unknown({c})") for c in sorted(set().union(*[r.codecs for r in results]))]
        if results else [],
        producer_ids=sorted(set().union(*[r.producer_ids for r in results])) if results else [],
        open_transactions=plan.final_state.open_transactions() if plan.final_state is not None else [],
        aborted_transactions=sum(len(r.aborted) for r in results),
        snapshots=sorted(partition.snapshots),
        problems=[f.to_dict() for f in errors], notes=len(findings) - len(errors),
        leftover_files=[os.path.basename(p) for p in partition.leftovers],
        orphan_indexes=[os.path.basename(p) for p in partition.orphan_indexes],
    )
