"""What each repair of a damaged partition keeps and loses, in offsets and records.

Kafka's recovery (``LogSegment.recover``, ``LogLoader.recoverLog``) cuts the damaged segment at its first
invalid batch and deletes every later segment: ``rebuild-index --truncate`` does the same. ``salvage``
keeps every intact batch past the damage and loses only the damaged ones. The part before the cut is
what recovery's scan (the plan verify-index and rebuild-index already made) found; the part past it
comes from salvage's resync scan (:func:`~kstore_cli.operations.salvage.salvage_past`), run from the cut
on, so no byte before the damage is read twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.operations.recovery import PartitionPlan, SegmentPlan
from kstore_cli.operations.salvage import DAMAGE, DamagedRange, salvage_past
from kstore_cli.operations.tally import Tally, offset_range
from kstore_cli.record.reader import read_batches

TRUNCATE = "rebuild-index --truncate"
SALVAGE = "salvage"


@dataclass
class RepairCost:
    """What one repair keeps and loses: the intact batches kept, the intact batches lost, and the damaged
    ranges lost with them (their records cannot be read: a range holds at most one record per offset)."""

    command: str
    keeps: Tally
    loses: Tally
    damaged: List[DamagedRange] = field(default_factory=list)

    @property
    def damaged_records_at_most(self) -> Optional[int]:
        """The most records the damaged ranges can have held (None: a range runs to the log end)."""
        if any(d.next_offset is None for d in self.damaged):
            return None
        return sum(d.next_offset - d.first_offset for d in self.damaged)

    def lost_offsets(self) -> List[List[Optional[int]]]:
        """[first, last] of each run of offsets lost (last null: up to an end the damage hides)."""
        spans = [[d.first_offset, None if d.next_offset is None else d.next_offset - 1] for d in self.damaged]
        if self.loses.batches:
            spans.append([self.loses.first_offset, self.loses.last_offset])
        spans = [s for s in sorted(spans, key=lambda s: s[0]) if s[1] is None or s[1] >= s[0]]
        merged: List[List[Optional[int]]] = []
        for span in spans:
            last = merged[-1] if merged else None
            if last is not None and (last[1] is None or span[0] <= last[1] + 1):
                last[1] = None if last[1] is None or span[1] is None else max(last[1], span[1])
            else:
                merged.append(list(span))
        return merged

    def to_dict(self) -> dict:
        """doctor's `repairs` entry: command; keeps (batches, records, first and last offset); loses (the runs of
        offsets lost, the records and batches of the intact batches among them, the damaged ranges' offsets and
        the most records they can have held)."""
        loses = {"offsets": self.lost_offsets(), "records": self.loses.records, "batches": self.loses.batches,
                 "damaged": {"offsets": [[d.first_offset, None if d.next_offset is None else d.next_offset - 1]
                                         for d in self.damaged],
                             "records_at_most": self.damaged_records_at_most}}
        if self.loses.uncounted:
            loses["uncounted_batches"] = self.loses.uncounted
        return {"command": self.command, "keeps": self.keeps.to_dict(), "loses": loses}

    def text(self) -> str:
        """One line: what the command keeps and loses."""
        keeps = f"keeps {self.keeps.text()}" if self.keeps.batches else "keeps no batch"
        at_most = self.damaged_records_at_most
        damaged = ("the damaged batch(es) at offsets " + ", ".join(
            offset_range(d.first_offset, None if d.next_offset is None else d.next_offset - 1) for d in self.damaged)
            + (f" (at most {at_most} record(s), unreadable)" if at_most is not None else " (unreadable)"))
        if not self.loses.batches:
            return f"{keeps}; loses only {damaged}" if self.damaged else keeps
        lost = ", ".join(offset_range(a, b) for a, b in self.lost_offsets())
        return (f"{keeps}; loses offsets {lost}: {self.loses.records} record(s) in {self.loses.batches} intact "
                f"batch(es)" + (f" and {damaged}" if self.damaged else ""))


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
    past = salvage_past(plan.partition, damaged.segment.base_offset, damaged.result.valid_bytes, after)
    beyond = past.kept_tally()
    lost = [d for s in past.segments for d in s.damaged if d.kind == DAMAGE]  # a zero-filled tail holds nothing
    return (RepairCost(truncate_command, kept, beyond, lost),
            RepairCost(salvage_command, kept.merge(beyond), Tally(), lost))
