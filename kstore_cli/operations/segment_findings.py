"""What a broker makes of each of verify-index's findings about a partition's segments, as doctor's
findings: what Kafka does with it (LogLoader, LogSegment.recover, the index sanity checks) and the kstore
command that repairs it. Nothing here writes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Optional, Tuple

from kstore_cli.log import names
from kstore_cli.log.logdir import Partition
from kstore_cli.operations import recovery
from kstore_cli.operations.repair_costs import repair_costs
from kstore_cli.operations.startup import WARNING, Issue, clean_shutdown_marker

if TYPE_CHECKING:
    from kstore_cli.operations.recovery import PartitionPlan, SegmentPlan
    from kstore_cli.operations.verify import Finding

# LogSegment.sanityCheck (4.0) checks only that the .index exists and the .txnindex's sanity:
# offset and time indexes are loaded as they are and rebuilt only by an unclean shutdown's recovery.
_INDEX_LOADED_AS_IS = ("ignore: loaded as it is (LogSegment.sanityCheck does not check offset or time indexes); "
                       "rebuilt only if an unclean shutdown's recovery reaches this segment; until then lookups "
                       "through it go wrong")
#: What Kafka does with verify-index's findings about a segment's indexes (the others: _INDEX_LOADED_AS_IS).
_INDEX_KAFKA = {
    "orphan-index": "delete: removes the index file without a .log at startup (LogLoader)",
    "missing-index": ("rebuild: 'Could not find offset index file', LogLoader recovers the segment and writes a new "
                      "index (LogSegment.sanityCheck throws NoSuchFileException)"),
    # LogLoader.loadSegmentFiles: with the .index there, LogSegment.sanityCheck(timeIndexFileNewlyCreated) resizes
    # the new .timeindex to 0 and nothing fills it; without the .index it throws NoSuchFileException and the
    # loader recovers the segment (LogSegment.recover), which rebuilds both indexes.
    "missing-timeindex": ("ignore: the .index is there, so LogSegment.sanityCheck creates an empty .timeindex "
                          "(LogLoader) and nothing fills it: time lookups in this segment find nothing, until an "
                          "unclean shutdown's recovery reaches the segment"),
    "txnindex-sanity": ("rebuild: 'Found a corrupted index file corresponding to log file ...', LogLoader recovers "
                        "the segment and rebuilds its indexes (TransactionIndex.sanityCheck, CorruptIndexException)"),
}
#: missing-timeindex where the .index is missing too
_NO_INDEXES_KAFKA = ("rebuild: the .index is missing too: 'Could not find offset index file' (LogSegment.sanityCheck "
                     "throws NoSuchFileException), LogLoader recovers the segment and writes both indexes, the "
                     ".timeindex filled")
_TXNINDEX_KAFKA = ("ignore: loaded as it is; read_committed consumers get the wrong aborted transactions until an "
                   "unclean shutdown's recovery rebuilds it")


def segment_issue(partition: Partition, data_dir: str, finding: "Finding",
                  plan: "Optional[PartitionPlan]") -> Optional[Issue]:
    """A verify_partition finding as a doctor Issue: what Kafka does with it, what to run (None for what
    doctor reports otherwise: leftovers, and orphan indexes of a partition without logs). `plan` is None
    for doctor --quick's findings (no .log was scanned)."""
    check = finding.check
    if check == "leftover-file":
        return None  # doctor reports leftovers itself, with what Kafka does to each kind
    if check == "orphan-index" and not partition.segments:
        return None  # named in the partition-without-logs finding
    severity = finding.severity  # verify's severities are doctor's: one per finding
    position = None
    repair = f"kstore rebuild-index {partition.path}"
    repairs = None
    if check.startswith("log-"):
        splan = None if plan is None else next(
            (s for s in plan.segments if s.segment.base_offset == finding.segment), None)
        problem = splan.result.problem if splan is not None and splan.result is not None else None
        position = problem.position if problem is not None else None
        severity, kafka, repair = _log_advice(partition, data_dir, finding, plan, splan, severity)
        if repair is None:
            repair, repairs = _cut_repairs(partition, plan)
    elif check.startswith(("txnindex", "missing-txnindex")) and check not in _INDEX_KAFKA:
        kafka = _TXNINDEX_KAFKA
    elif check == "missing-timeindex" and _index_missing(partition, finding.segment):
        kafka = _NO_INDEXES_KAFKA
    else:
        kafka = _INDEX_KAFKA.get(check, _INDEX_LOADED_AS_IS)
        if check == "orphan-index":
            repair = "none needed"
    return Issue(severity, check, finding.message, kafka=kafka, repair=repair, data_dir=data_dir,
                 partition=partition.path, file=finding.file, position=position, repairs=repairs)


def _index_missing(partition: Partition, base_offset: Optional[int]) -> bool:
    """Whether the segment at `base_offset` has no .index."""
    return any(s.base_offset == base_offset and s.index is None for s in partition.segments)


def _log_advice(partition: Partition, data_dir: str, finding: "Finding", plan: "PartitionPlan",
                splan: "Optional[SegmentPlan]", severity: str) -> Tuple[str, str, Optional[str]]:
    """(severity, what Kafka does, what to run) for a finding about a segment's .log; what to run is None
    where the damage is cut as Kafka's recovery cuts it (:func:`_cut_repairs` names the repairs)."""
    part = partition.path
    check = finding.check
    problem = splan.result.problem if splan is not None and splan.result is not None else None
    if check == "log-unreadable":
        return (severity, "fail: 'Could not read file' (IOException): the data dir goes offline",
                "fix the file's permissions or the disk, then rerun doctor")
    if check == "log-zero-tail":
        return severity, "truncate: recovery trims the zero bytes (only after an unclean shutdown)", "none needed"
    if problem is not None and problem.kind == recovery.OFFSET_OVERFLOW:
        return severity, "rebuild: LogSegmentOffsetOverflowException, the loader splits the segment", "none needed"
    if problem is not None and problem.kind == recovery.OFFSETS_NOT_INCREASING:
        return (severity, "truncate: after an unclean shutdown recovery fails with InvalidOffsetException ('offsets "
                "out of order') and empties the segment; after a clean shutdown fetches of it fail",
                f"no kstore command empties a segment as Kafka's recovery would: inspect it with "
                f"`kstore dump-segment --deep-iteration {finding.file}` and restore it from a replica")
    if partition.name == names.METADATA_PARTITION_DIR and severity == WARNING:
        # verify_partition's torn tail of the metadata log.
        # KafkaMetadataLog opens the log with recovery point 0 and lastShutdownClean=false: every start
        # recovers every segment, so a crash's torn tail is cut before the raft client reads it.
        return (WARNING, "truncate: KafkaMetadataLog recovers the whole metadata log at every start (recovery point "
                "0, as after an unclean shutdown): this torn tail, the state a crash leaves, is cut and the rest "
                "loads (kstore metadata shows that image)",
                f"none needed; kstore rebuild-index --truncate {part} cuts it now (the cut bytes are quarantined)")
    first = plan.damaged
    if first is not None and splan is not None and splan.segment.base_offset > first.segment.base_offset:
        return (severity, f"delete: after an unclean shutdown recovery cuts the earlier damaged segment "
                f"{os.path.basename(first.segment.log)} and deletes this one with it; after a clean shutdown fetches "
                "of it fail with CorruptRecordException",
                f"the repairs named for {first.segment.log} (each covers the whole partition)")
    dropped = sum(1 for s in plan.segments if s.segment.base_offset > (finding.segment or 0))
    kafka = ("truncate: after an unclean shutdown recovery cuts the .log at this byte"
             + (f" and deletes the {dropped} later segment(s)" if dropped else "")
             + "; after a clean shutdown the damage is not seen at startup and fetches of it fail with "
               "CorruptRecordException")
    if clean_shutdown_marker(data_dir):
        kafka += (" (this data dir has the clean shutdown marker: the broker starts without looking, unless "
                  "it crashes before the next clean shutdown)")
    return severity, kafka, None


def _cut_repairs(partition: Partition, plan: "PartitionPlan") -> Tuple[str, Optional[List[dict]]]:
    """What to run for damage Kafka's recovery cuts, one line per repair, and each repair's keeps and loses:
    rebuild-index --truncate (the cut Kafka's recovery makes) and, where it keeps more, salvage first (every
    intact batch past the damage kept). Where salvage keeps nothing more (no intact batch past the damage),
    the cut alone: it can be undone (`kstore restore`), a salvage cannot."""
    part = partition.path
    truncate = f"kstore rebuild-index --truncate {part}"
    costs = repair_costs(plan, truncate, f"kstore salvage --in-place {part}")
    if costs is None:
        return f"{truncate}  (cuts where Kafka would; the cut bytes are quarantined)", None
    cut, salvage = costs
    cut_line = (f"{truncate}  (Kafka's own recovery, cuts at the first invalid batch: {cut.text()}; the cut "
                "bytes are quarantined, kstore restore undoes it)")
    if salvage.keeps.batches <= cut.keeps.batches:
        return cut_line, [cut.to_dict()]
    salvage_line = (f"{salvage.command}  (every intact batch, past the damage too: {salvage.text()}; the damaged "
                    "bytes are quarantined)")
    return f"{salvage_line}\n{cut_line}", [salvage.to_dict(), cut.to_dict()]

