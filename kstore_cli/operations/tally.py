"""A count of batches in offsets and records: what a repair keeps, cuts or loses (rebuild-index --truncate,
salvage, doctor's advice)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
