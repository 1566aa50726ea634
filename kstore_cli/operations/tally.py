"""What a repair of a damaged partition keeps, cuts or loses, in offsets and records (rebuild-index --truncate,
salvage, doctor's advice): a count of batches, and a repair's keeps and losses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass
class Tally:
    """Batches counted: how many, their records, their first and last offset."""

    batches: int = 0
    records: int = 0
    first_offset: Optional[int] = None
    last_offset: Optional[int] = None
    #: Batches whose records could not be counted (a legacy wrapper whose inner messages do not decompress).
    uncounted: int = 0

    def add(self, base_offset: int, last_offset: int, records: Optional[int], batches: int = 1) -> None:
        """Count `batches` batch(es) from `base_offset` to `last_offset` holding `records` (None: not known)."""
        if not batches:
            return
        self.batches += batches
        if records is None:
            self.uncounted += batches
        else:
            self.records += records
        if self.first_offset is None or base_offset < self.first_offset:
            self.first_offset = base_offset
        if self.last_offset is None or last_offset > self.last_offset:
            self.last_offset = last_offset

    def merge(self, other: "Tally") -> "Tally":
        """A new tally of both."""
        out = Tally(self.batches, self.records, self.first_offset, self.last_offset, self.uncounted)
        if other.batches:
            out.add(other.first_offset, other.last_offset, other.records, other.batches - other.uncounted)
            if other.uncounted:
                out.add(other.first_offset, other.last_offset, None, other.uncounted)
        return out

    def to_dict(self) -> dict:
        """The JSON object: batches, records, first_offset, last_offset (null: no batch), and uncounted_batches
        where a batch's records could not be counted."""
        out = {"batches": self.batches, "records": self.records, "first_offset": self.first_offset,
               "last_offset": self.last_offset}
        if self.uncounted:
            out["uncounted_batches"] = self.uncounted
        return out

    def text(self) -> str:
        """E.g. "offsets 0-353: 354 records in 83 batches", or "no batch"."""
        if not self.batches:
            return "no batch"
        more = f" (and {self.uncounted} batch(es) whose records cannot be counted)" if self.uncounted else ""
        return (f"offsets {offset_range(self.first_offset, self.last_offset)}: {self.records} record(s) in "
                f"{self.batches} batch(es){more}")


def offset_range(first: int, last: Optional[int]) -> str:
    """"5", "5-9", or "5-" where the last offset is not known."""
    if last is None:
        return f"{first}-"
    return str(first) if first == last else f"{first}-{last}"


@dataclass
class RepairCost:
    """What one repair keeps and loses: the intact batches kept, the intact batches lost, and the damaged
    ranges lost with them (their records cannot be read: a range holds at most one record per offset)."""

    command: str
    keeps: Tally
    loses: Tally
    #: (first offset, next offset) of each damaged range: the offsets it can have held (next None: up to the log
    #: end, which the damage hides)
    damaged: List[Tuple[int, Optional[int]]] = field(default_factory=list)

    def damaged_spans(self) -> List[List[Optional[int]]]:
        """[first, last] offset of each damaged range (last None: up to the log end)."""
        return [[first, None if after is None else after - 1] for first, after in self.damaged]

    @property
    def damaged_records_at_most(self) -> Optional[int]:
        """The most records the damaged ranges can have held (None: a range runs to the log end)."""
        if any(after is None for _first, after in self.damaged):
            return None
        return sum(after - first for first, after in self.damaged)

    def lost_offsets(self) -> List[List[Optional[int]]]:
        """[first, last] of each run of offsets lost (last None: up to an end the damage hides)."""
        spans = self.damaged_spans()
        if self.loses.batches:
            spans.append([self.loses.first_offset, self.loses.last_offset])
        merged: List[List[Optional[int]]] = []
        for first, last in sorted(spans, key=lambda span: span[0]):
            if last is not None and last < first:
                continue  # an empty range (two batches with no offset between them)
            prev = merged[-1] if merged else None
            if prev is not None and (prev[1] is None or first <= prev[1] + 1):
                prev[1] = None if prev[1] is None or last is None else max(prev[1], last)
            else:
                merged.append([first, last])
        return merged

    def to_dict(self) -> dict:
        """doctor's `repairs` entry: command; keeps (batches, records, first and last offset); loses (the runs of
        offsets lost, the records and batches of the intact batches among them, the damaged ranges' offsets and
        the most records they can have held)."""
        loses = {"offsets": self.lost_offsets(), "records": self.loses.records, "batches": self.loses.batches,
                 "damaged": {"offsets": self.damaged_spans(), "records_at_most": self.damaged_records_at_most}}
        if self.loses.uncounted:
            loses["uncounted_batches"] = self.loses.uncounted
        return {"command": self.command, "keeps": self.keeps.to_dict(), "loses": loses}

    def text(self, loses: str = "loses") -> str:
        """One line: what the command keeps and loses (`loses`: the verb, e.g. "cuts")."""
        keeps = f"keeps {self.keeps.text()}" if self.keeps.batches else "keeps no batch"
        at_most = self.damaged_records_at_most
        damaged = ("the damaged batch(es) at offsets " + ", ".join(offset_range(a, b) for a, b in self.damaged_spans())
                   + (f" (at most {at_most} record(s), unreadable)" if at_most is not None else " (unreadable)"))
        if not self.loses.batches:
            return f"{keeps}; {loses} only {damaged}" if self.damaged else f"{keeps}; {loses} no batch"
        lost = ", ".join(offset_range(a, b) for a, b in self.lost_offsets())
        return (f"{keeps}; {loses} offsets {lost}: {self.loses.records} record(s) in {self.loses.batches} intact "
                f"batch(es)" + (f" and {damaged}" if self.damaged else ""))
