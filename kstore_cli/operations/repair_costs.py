"""What each repair of a damaged partition keeps and loses, in offsets and records.

Kafka's recovery (``LogSegment.recover``, ``LogLoader.recoverLog``) cuts the damaged segment at its first
invalid batch and deletes every later segment: ``rebuild-index --truncate`` does the same. ``salvage``
keeps every intact batch past the damage and loses only the damaged ones. The part before the cut is
what recovery's scan (the plan verify-index and rebuild-index already made) found; the part past it
comes from salvage's resync scan (:func:`~kstore_cli.operations.salvage.salvage_past`), run from the cut
to the end of the damaged segment and over each later segment the plan did not find whole (verify-index's plan
recovers every segment), so no batch the plan validated is read twice.
"""

from __future__ import annotations

from typing import Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.operations.recovery import PartitionPlan, SegmentPlan
from kstore_cli.log.logdir import Segment
from kstore_cli.operations.salvage import DAMAGE, Known, salvage_past
from kstore_cli.operations.tally import RepairCost, Tally
from kstore_cli.record.reader import read_batches

TRUNCATE = "rebuild-index --truncate"
SALVAGE = "salvage"


def segment_records(splan: SegmentPlan) -> Optional[int]:
    """The records of a recovered segment's valid batches: recovery's own count for v2 batches; a segment
    holding legacy entries is read again to count them (a wrapper's inner messages), None if that fails."""
    result = splan.result
    if not result.magics or result.magics == {2}:
        return result.records_known
    try:
        return sum(batch.record_count() for batch in read_batches(splan.segment.log)
                   if batch.position < result.valid_bytes)
    except KstoreError:
        return None


def kept_by_recovery(plan: PartitionPlan) -> Tally:
    """The batches Kafka's recovery keeps: every valid batch up to the damaged segment's cut."""
    tally = Tally()
    for splan in plan.segments:
        result = splan.result
        if result is None or splan.skipped is not None:
            continue
        if result.batches:
            tally.add(result.first_offset, result.last_offset, segment_records(splan), result.batches)
        if splan is plan.damaged:
            break
    return tally


def _counted_by(plan: PartitionPlan) -> Known:
    """A later segment's batches as the plan's recovery counted them (verify-index's plan recovers every segment),
    where salvage would keep each of them: every batch valid, their offsets continuing the log."""
    by_base = {s.segment.base_offset: s for s in plan.segments}

    def known(segment: Segment, after: int, below: Optional[int]) -> Optional[Tally]:
        splan = by_base.get(segment.base_offset)
        result = splan.result if splan is not None else None  # rebuild-index marks it skipped, still recovered
        if result is None or result.problem is not None or not result.batches:
            return None
        if result.first_offset <= after or result.first_offset < segment.base_offset:
            return None
        if below is not None and result.last_offset >= below:
            return None
        tally = Tally()
        tally.add(result.first_offset, result.last_offset, segment_records(splan), result.batches)
        return tally

    return known


def repair_costs(plan: PartitionPlan, truncate_command: str = TRUNCATE,
                 salvage_command: str = SALVAGE) -> Optional[Tuple[RepairCost, RepairCost]]:
    """(rebuild-index --truncate's, salvage's) cost for a partition whose recovery `plan` cuts a damaged
    segment, or None: nothing is cut, or the plan does not cover the whole partition. Truncate keeps what
    recovery keeps and loses every intact batch past the cut; salvage keeps those too; both lose the
    damaged ranges."""
    damaged = plan.damaged
    if damaged is None or len(plan.segments) != len(plan.partition.segments):
        return None
    kept = kept_by_recovery(plan)
    # The last offset kept before the damage, as a salvage from the start carries it from segment to segment.
    after = kept.last_offset if kept.batches else plan.partition.segments[0].base_offset - 1
    past = salvage_past(plan.partition, damaged.segment.base_offset, damaged.result.valid_bytes, after,
                        known=_counted_by(plan))
    beyond = past.kept_tally()
    # a zero-filled tail holds nothing
    lost = [(d.first_offset, d.next_offset) for s in past.segments for d in s.damaged if d.kind == DAMAGE]
    return (RepairCost(truncate_command, kept, beyond, lost),
            RepairCost(salvage_command, kept.merge(beyond), Tally(), lost))
