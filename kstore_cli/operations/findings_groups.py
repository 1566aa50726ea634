"""doctor's findings grouped for reading: the findings of one check on many partitions of one topic (a
partial data dir's 115 ``assigned-partition-missing``) as one group with partition ranges and a count,
so that the few real problems are not lost among them. The findings themselves are unchanged (``--verbose``
and ``--json`` list each). Nothing here writes.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from kstore_cli.errors import UsageError
from kstore_cli.log import names
from kstore_cli.operations.startup import ERROR, NOTE, WARNING, Issue, run_lines

_SEVERITY_ORDER = {ERROR: 0, WARNING: 1, NOTE: 2}
#: Stands for a finding's own partition dir in its advice, so that the same advice on many partitions compares equal.
_HERE = "\0"
#: How many offset ranges a group line names before "…" (--verbose names every finding).
_MAX_OFFSET_RANGES = 8


def severity_rank(severity: str) -> int:
    """Errors before warnings before notes."""
    return _SEVERITY_ORDER[severity]


def int_ranges(values: Iterable[int]) -> List[Tuple[int, int]]:
    """Sorted distinct integers as runs of consecutive ones: [0, 1, 2, 5] -> [(0, 2), (5, 5)]."""
    runs: List[Tuple[int, int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def format_ranges(values: Iterable[int], limit: Optional[int] = None) -> str:
    """``0-27,30-49``; past `limit` runs, ``…`` ends the list."""
    runs = int_ranges(values)
    shown = runs if limit is None else runs[:limit]
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in shown)
    return text + (",…" if len(shown) < len(runs) else "")


def _brace(values: Sequence[int]) -> str:
    """The partitions as a bash brace expansion (``{0..27}``, ``{{0..27},{30..49}}``, ``{1,4}``): a run: line
    naming a group's partition dirs stays one command to paste."""
    runs = int_ranges(values)
    items = [str(a) if a == b else f"{{{a}..{b}}}" for a, b in runs]
    if len(items) == 1:
        return items[0]
    return "{" + ",".join(items) + "}"


def _offset_of(issue: Issue) -> Optional[int]:
    """The offset a finding is at: its own, else the base offset of the segment file it names."""
    if issue.offset is not None:
        return issue.offset
    if issue.file and issue.partition and os.path.dirname(issue.file) == issue.partition:
        try:
            return names.base_offset_from_name(issue.file)
        except UsageError:
            return None
    return None


class IssueGroup:
    """Findings of one check, one severity and the same advice on partitions of one topic in one data dir
    (or a single finding that is about no topic partition)."""

    __slots__ = ("members", "_kafka", "_repair", "_parent")

    def __init__(self, members: List[Issue], kafka: str, repair: str, parent: Optional[str]) -> None:
        self.members = members
        self._kafka = kafka
        self._repair = repair
        #: The dir holding the members' partition dirs (where their advice names them), if it does.
        self._parent = parent

    @property
    def first(self) -> Issue:
        return self.members[0]

    @property
    def severity(self) -> str:
        return self.first.severity

    @property
    def check(self) -> str:
        return self.first.check

    @property
    def data_dir(self) -> Optional[str]:
        return self.first.data_dir

    @property
    def topic(self) -> Optional[str]:
        return self.first.topic_partition[0] if self.first.topic_partition else None

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def partition_ids(self) -> List[int]:
        return sorted({i.topic_partition[1] for i in self.members if i.topic_partition})

    @property
    def offsets(self) -> List[int]:
        """The offsets (or segments' base offsets) the findings are at, where there are more findings than
        partitions (several per partition); else none: each partition's own is in --verbose."""
        if self.count <= len(self.partition_ids):
            return []
        return sorted({o for o in (_offset_of(i) for i in self.members) if o is not None})

    @property
    def where(self) -> str:
        """``<data dir>: orders 0-27,30-49 (48 partitions)``; a lone finding's own place."""
        if self.count == 1:
            return self.first.where
        return f"{self.data_dir or ''}: {self.subject}"

    @property
    def subject(self) -> str:
        """What the group is about within its data dir: ``orders 0-27,30-49 (48 partitions)``, with the
        offsets where there are several findings a partition."""
        ids = self.partition_ids
        what = f"{len(ids)} partition{'s' if len(ids) != 1 else ''}"
        if self.count != len(ids):
            what += f", {self.count} findings"
        offsets = self.offsets
        unit = "offsets" if any(i.offset is not None for i in self.members) else "segments"
        at = f" at {unit} {format_ranges(offsets, _MAX_OFFSET_RANGES)}" if offsets else ""
        return f"{self.topic} {format_ranges(ids)}{at} ({what})"

    @property
    def message(self) -> str:
        """What all members say: their common message, or the check's gist of them, or the first one's."""
        texts = {i.message for i in self.members}
        if len(texts) == 1:
            return self.first.message
        if self.first.gist is not None and len({i.gist for i in self.members}) == 1:
            return self.first.gist
        return f"{self.first.message} (first of {self.count}; --verbose lists each)"

    def _advice(self, text: str) -> str:
        if _HERE not in text:
            return text
        if self.count == 1:
            return text.replace(_HERE, self.first.partition or "")
        return text.replace(_HERE, os.path.join(self._parent or "", f"{self.topic}-{_brace(self.partition_ids)}"))

    @property
    def kafka(self) -> str:
        return self._advice(self._kafka)

    @property
    def repair(self) -> str:
        return self._advice(self._repair)

    def text_lines(self) -> List[str]:
        """One line for the group, then what Kafka does and what to run, once (a lone finding: its own lines)."""
        if self.count == 1:
            return self.first.text_lines()
        return [f"{self.where}: {self.severity}: {self.check}: {self.message}", f"    kafka: {self.kafka}",
                *("    " + line for line in run_lines(self.repair))]

    def to_dict(self) -> dict:
        return {
            "severity": self.severity, "check": self.check, "data_dir": self.data_dir, "topic": self.topic,
            "partition_ids": self.partition_ids, "partition_ranges": format_ranges(self.partition_ids),
            "offsets": self.offsets, "findings": self.count, "where": self.where, "message": self.message,
            "kafka": self.kafka, "repair": self.repair,
        }

    def __repr__(self) -> str:
        return f"IssueGroup({self.severity}, {self.check}, {self.where}, {self.count})"


def _key(issue: Issue, index: int) -> Tuple:
    """Findings alike: same data dir, severity, check, topic and advice (their partition dir aside);
    a finding about no topic partition is alike with none other."""
    parent = os.path.dirname(issue.partition) if issue.partition else None
    kafka, repair = issue.kafka, issue.repair
    if issue.partition:
        kafka, repair = kafka.replace(issue.partition, _HERE), repair.replace(issue.partition, _HERE)
    if issue.topic_partition is None:
        return (index,)
    return (issue.data_dir, issue.severity, issue.check, issue.topic_partition[0], parent, kafka, repair)


def group_issues(issues: Iterable[Issue]) -> List[IssueGroup]:
    """The findings grouped (one group per data dir, severity, check, topic and advice), real problems
    first: errors, then warnings, then notes; within a severity the groups with fewest findings first
    (a damaged segment or checkpoint is its own problem; a mass finding usually has one cause, a missing
    disk or a partial copy, and its one line says so), then by data dir, check and topic."""
    grouped: Dict[Tuple, List[Issue]] = {}
    for index, issue in enumerate(issues):
        grouped.setdefault(_key(issue, index), []).append(issue)
    groups = []
    for key, members in grouped.items():
        members.sort(key=lambda i: (i.topic_partition or ("", 0), _offset_of(i) or 0))
        first = members[0]
        parent = os.path.dirname(first.partition) if first.partition else None
        kafka, repair = (key[5], key[6]) if len(key) > 1 else (first.kafka, first.repair)
        groups.append(IssueGroup(members, kafka, repair, parent))
    groups.sort(key=lambda g: (severity_rank(g.severity), g.count, g.data_dir or "", g.check, g.topic or "",
                               g.first.where))
    return groups


__all__ = ["IssueGroup", "group_issues", "format_ranges", "int_ranges", "severity_rank"]
