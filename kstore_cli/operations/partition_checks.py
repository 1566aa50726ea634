"""doctor's checks of each partition a survey found, partition by partition (in ``--jobs`` processes),
streamed back data dir by data dir in the survey's order: the full check (verify-index's CRC scan and
index checks, then the partition's startup findings) or the quick one (:func:`startup_findings`: only what
Kafka's loader checks after a clean shutdown). Nothing here writes.
"""

from __future__ import annotations

from itertools import islice
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.log import names
from kstore_cli.log.index import TransactionIndex
from kstore_cli.log.log_segment import read_next_offset
from kstore_cli.log.logdir import Chain, Partition
from kstore_cli.operations.partition_findings import partition_issues
from kstore_cli.operations.runner import stream
from kstore_cli.operations.segment_findings import segment_issue
from kstore_cli.operations.startup import DataDirInfo, Issue, PartitionDir, Survey, loaded
from kstore_cli.operations.verify import ERROR, Finding, missing_index, partition_findings_sink, verify_partition
from kstore_cli.record.reader import map_file

Target = Tuple["Partition | PartitionDir", Optional[int]]


class PartitionCheck:
    """One partition's (or one named segment's) outcome: segments checked, findings, .log bytes covered."""

    __slots__ = ("partition", "only", "segments", "issues", "log_bytes")

    def __init__(self, partition: Partition, only: Optional[int], segments: int, issues: List[Issue],
                 log_bytes: int) -> None:
        self.partition = partition
        self.only = only
        self.segments = segments
        self.issues = issues
        self.log_bytes = log_bytes


def startup_findings(partition: Partition, *, only: Optional[int] = None,
                     progress: Optional[Callable[[int], None]] = None) -> Tuple[List[Finding], Optional[int]]:
    """What Kafka's LogLoader (4.0) checks of the segments when the data dir has the clean shutdown marker,
    and the log end offset; no batch is read but the last segment's (no CRC scan):

    * loadSegmentFiles: an index file without its .log is deleted ("orphaned index file"); each .log is
      opened (an unreadable one: IOException); LogSegment.sanityCheck: a missing .index throws
      NoSuchFileException (the segment is recovered), a missing .timeindex is created empty, and the
      .txnindex's TransactionIndex.sanityCheck throws CorruptIndexException (the segment is recovered). The
      offset and time indexes are not checked there (recoverLog is skipped after a clean shutdown);
    * recoverLog: the log end offset is the last segment's LogSegment.readNextOffset (its batch headers);
      the checkpoints, leader epochs and producer snapshots are then judged against it by
      :func:`~kstore_cli.operations.partition_findings.partition_issues`, as for the full check.

    Returns verify-index's findings for these checks and the log end offset (None without segments, or
    for one named segment)."""
    findings, add = partition_findings_sink(partition, only)
    log_end = None
    segments = partition.segments
    for i, seg in enumerate(segments):
        if only is not None and seg.base_offset != only:
            continue
        try:
            buf = map_file(seg.log)
        except KstoreError as exc:
            add(seg.base_offset, seg.log, ERROR, "log-unreadable", str(exc.message))
            continue
        if progress is not None:
            progress(len(buf))
        if missing_index(seg, names.INDEX_SUFFIX, add):
            missing_index(seg, names.TIME_INDEX_SUFFIX, add)
        if seg.txnindex is not None:
            _txn_sanity(seg, add)
        if i == len(segments) - 1 and only is None:
            log_end = read_next_offset(buf, seg.base_offset)
    return findings, log_end


def _txn_sanity(seg, add: Callable[..., None]) -> None:
    """TransactionIndex.sanityCheck, with verify-index's check names."""
    try:
        txn = TransactionIndex(seg.txnindex, seg.base_offset)
    except KstoreError as exc:
        add(seg.base_offset, seg.txnindex, ERROR, "txnindex-unreadable", str(exc.message))
        return
    try:
        txn.sanity_check()
    except KstoreError as exc:
        add(seg.base_offset, seg.txnindex, ERROR, "txnindex-sanity", str(exc.message))


def check_partition(found: Survey, partition: "Partition | PartitionDir", only: Optional[int], *, quick: bool = False,
                    progress: Optional[Callable[[int], None]] = None) -> Tuple[int, List[Issue], int]:
    """One target's (segments checked, doctor's findings, .log bytes covered); the data dir's findings
    about the partition (its layout issues) are not among them. A lazy survey's target is listed here."""
    data_dir = found.data_dir_of(partition).path
    partition = loaded(partition)
    size = 0

    def covered(n: int) -> None:
        nonlocal size
        size += n
        if progress is not None:
            progress(n)

    if quick:
        findings, log_end = startup_findings(partition, only=only, progress=covered)
        segments = len(partition.segments) if only is None else 1
        issues = [i for i in (segment_issue(partition, data_dir, f, None) for f in findings) if i]
        issues += partition_issues(found, partition, None, whole_partition=only is None, log_end=log_end)
    else:
        findings, plan = verify_partition(partition, only=only, progress=covered, compare_indexes=False)
        segments = len(plan.segments)
        issues = [i for i in (segment_issue(partition, data_dir, f, plan) for f in findings) if i]
        issues += partition_issues(found, partition, plan, whole_partition=only is None)
    return segments, issues, size


def check_partitions(found: Survey, *, jobs: int = 1, quick: bool = False,
                     progress: Optional[Callable[[int], None]] = None
                     ) -> Iterator[Tuple[DataDirInfo, Iterator[PartitionCheck]]]:
    """Each data dir of the survey with an iterator of its targets' checks, in the survey's order; the
    checks run in `jobs` forked processes, started now (the caller may work out the data dirs' own findings
    meanwhile), and stream back in that order (each iterator must be consumed before the next data dir is
    asked for). `progress` is told the .log bytes covered."""
    by_dir: Dict[str, List[Sequence[Target]]] = {path: [] for path in found.data_dirs}
    for info, pairs in found.target_pieces:  # the survey's own (partition, only) pairs: none made again
        by_dir[info.path].append(pairs)
    ordered = Chain(pairs for pieces in by_dir.values() for pairs in pieces)
    for info in found.data_dirs.values():
        found.judge(info)  # judged once here, before the workers fork, not once in each
    inline = jobs <= 1 or len(ordered) <= 1

    def work(target: Target) -> Tuple[int, List[Issue], int]:
        return check_partition(found, *target, quick=quick, progress=progress if inline else None)

    results = zip(ordered, stream(work, ordered, jobs=jobs))

    def checks(n: int) -> Iterator[PartitionCheck]:
        for (partition, only), (segments, issues, size) in islice(results, n):
            if not inline and progress is not None:
                progress(size)
            yield PartitionCheck(partition, only, segments, issues, size)

    return ((info, checks(sum(map(len, by_dir[info.path])))) for info in found.data_dirs.values())
