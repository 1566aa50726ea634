"""verify-index, offline: every index of a partition checked against its .log, changing nothing.

The .log is walked once by Kafka's recovery (:func:`~kstore_cli.operations.recovery.plan_partition`); each
segment's .index, .timeindex and .txnindex are then judged by what Kafka's lookups through them would
answer (``OffsetIndex``/``TimeIndex`` sanity checks, ``LogSegment.translateOffset``,
``findOffsetByTimestamp``, ``maxTimestampSoFar``) and by what recovery would write for the .txnindex.
:func:`~kstore_cli.operations.rebuild.repair_plan` turns the findings into what ``rebuild-index`` writes.
"""

from __future__ import annotations

import operator
import os
from array import array
from bisect import bisect_left
from itertools import islice
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from kstore_cli.cluster.metadata_image import is_torn_tail
from kstore_cli.errors import KstoreError
from kstore_cli.log import names
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.index import DEFAULT_INDEX_INTERVAL_BYTES, AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from kstore_cli.log.logdir import Partition, Segment, nothing_found
from kstore_cli.operations import partition_findings, startup
from kstore_cli.operations.findings_groups import IssueGroup, group_issues
from kstore_cli.operations.layout_findings import layout_issues
from kstore_cli.operations.runner import stream
from kstore_cli.operations.recovery import (
    BAD_SIZE,
    CORRUPT_BATCH,
    PARTIAL_BATCH,
    SHORT_TAIL,
    ZERO_TAIL,
    BatchSink,
    PartitionPlan,
    RecoveryResult,
    SegmentPlan,
    plan_partition,
)

# The severities are doctor's (operations.startup), one per finding in both commands.
ERROR = startup.ERROR
WARNING = startup.WARNING
NOTE = startup.NOTE
#: What a crash leaves at the end of the metadata log (KafkaMetadataLog cuts it at every start).
_TORN_KINDS = (PARTIAL_BATCH, SHORT_TAIL, BAD_SIZE, CORRUPT_BATCH)


class Finding:
    """One thing verify found: an error or a warning (the partition is not healthy), or a note."""

    __slots__ = ("partition", "segment", "file", "severity", "check", "message")

    def __init__(self, partition: str, segment: Optional[int], file: Optional[str], severity: str,
                 check: str, message: str) -> None:
        self.partition = partition
        self.segment = segment
        self.file = file
        self.severity = severity
        self.check = check
        self.message = message

    def to_dict(self) -> dict:
        return {
            "partition": self.partition,
            "segment": self.segment,
            "file": self.file,
            "severity": self.severity,
            "check": self.check,
            "message": self.message,
        }

    def __repr__(self) -> str:
        return f"Finding({self.severity}, {self.check}, {self.file}: {self.message})"


class PartitionVerdict:
    """verify-index's answer for one partition: its findings and how many segments were checked."""

    __slots__ = ("partition", "segments", "findings")

    def __init__(self, partition: str, segments: int, findings: List[Finding]) -> None:
        self.partition = partition
        self.segments = segments
        self.findings = findings

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == WARNING)

    @property
    def notes(self) -> int:
        return len(self.findings) - self.errors - self.warnings

    @property
    def healthy(self) -> bool:
        return self.errors == 0 and self.warnings == 0

    def to_dict(self) -> dict:
        return {"type": "partition", "partition": self.partition, "segments": self.segments,
                "errors": self.errors, "warnings": self.warnings, "notes": self.notes, "healthy": self.healthy}

    def grouped_findings(self) -> List[Finding]:
        """The findings, one check on several segments as one (findings_groups.group_issues), errors first."""
        issues = {}
        for f in self.findings:
            issue = startup.Issue(f.severity, f.check, f.message, kafka="", repair="", partition=self.partition,
                                  data_dir=os.path.dirname(self.partition), file=f.file)
            issues[id(issue)] = (issue, f)
        return [issues[id(g.first)][1] if g.count == 1 else FindingGroup(g, g.severity)
                for g in group_issues(i for i, _f in issues.values())]


class FindingGroup(Finding):
    """Findings alike as one line (findings_groups): `file` says where they are (a data dir, the topic's
    partitions and segments), `subject` the same within the data dir."""

    __slots__ = ("subject", "count")

    def __init__(self, group: IssueGroup, severity: str) -> None:
        super().__init__(group.data_dir or "", None, group.where, severity, group.check, group.message)
        self.subject = group.subject
        self.count = group.count




class VerifyRun:
    """verify-index over paths: the data dirs' own findings first, then one verdict per partition, lazily
    (each partition is checked when its verdict is asked for, so output streams)."""

    def __init__(self, paths: Sequence[str], topics: Optional[str] = None, *,
                 kafka_version: Optional[KafkaVersion] = None, jobs: int = 1) -> None:
        self._startup = startup
        self._partition_issues = partition_findings.partition_issues
        self._found = startup.survey(paths, topics=topics, kafka_version=kafka_version, lazy=True, jobs=jobs)
        for info in self._found.data_dirs.values():
            self._found.judge(info)  # once here, before the workers fork
        # The partitions' checks start (in `jobs` processes) while the data dirs' own are worked out.
        self._verdicts = stream(self._verdict, self._found.targets, jobs=jobs)
        # doctor's data-dir checks (meta.properties, checkpoints, stray dirs, topic IDs) except the lock:
        # a live broker holding it is what a monitoring run expects.
        self._layout_issues = layout_issues(self._found, check_lock=False)
        self.layout: List[Finding] = [self._finding(i) for i in self._layout_issues]
        if not self._found.targets and not self.layout:
            raise nothing_found(paths, topics)

    def _finding(self, issue) -> Finding:
        """A data-dir issue in verify-index's terms, with doctor's severity."""
        where = issue.partition or issue.data_dir or ""
        return Finding(os.path.basename(where), None, issue.file or where, issue.severity, issue.check,
                       issue.message + (f" (at byte {issue.position})" if issue.position is not None else ""))

    def layout_groups(self) -> List[Finding]:
        """The data dirs' findings with those alike (one check on many partitions of a topic) as one, errors first."""
        found = [self._finding(g.first) if g.count == 1 else FindingGroup(g, self._finding(g.first).severity)
                 for g in group_issues(self._layout_issues)]
        return sorted(found, key=lambda f: f.severity != ERROR)

    def partitions(self) -> Iterator[PartitionVerdict]:
        """Each target's verdict, in order (checked in the run's `jobs` forked processes: runner.stream)."""
        return self._verdicts

    def _verdict(self, target: Tuple["Partition | startup.PartitionDir", Optional[int]]) -> PartitionVerdict:
        partition, only = startup.loaded(target[0]), target[1]  # a lazy survey's partition is listed here
        findings, plan = verify_partition(partition, only=only, compare_indexes=False)
        issues = self._partition_issues(self._found, partition, plan, whole_partition=only is None)
        # verify_partition lists leftovers itself
        findings += [self._finding(i) for i in issues if not i.check.startswith("leftover-")]
        return PartitionVerdict(partition.path, len(plan.segments), findings)


def looks_preallocated(index_length: Optional[int], timeindex_length: Optional[int]) -> bool:
    """Whether the two lengths come from one ``segment.index.bytes`` value M, as a new active
    segment's files do: ``.index`` = floor(M/8)*8 and ``.timeindex`` = floor(M/12)*12."""
    if index_length is None or timeindex_length is None:
        return True
    return any((m // 12) * 12 == timeindex_length for m in range(index_length, index_length + 8))


def _length(path: Optional[str]) -> Optional[int]:
    try:
        return os.path.getsize(path) if path is not None else None
    except OSError:
        return None


def verify_partition(partition: Partition, *, only: Optional[int] = None,
                     progress: Optional[Callable[[int], None]] = None,
                     index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                     compare_indexes: bool = True) -> Tuple[List[Finding], PartitionPlan]:
    """Check every index of a partition against its .log, changing nothing.

    Offset index: Kafka's sanity checks, entry size, offsets and positions strictly
    increasing, each entry (o, p) at a batch start p with every earlier batch below o
    and o not past the segment (an entry of a multi-batch append carries the last
    offset of the append, which is fine). Time index: sanity checks, timestamps
    strictly increasing, each entry (t, o) naming a batch whose max timestamp is t
    and is the running maximum, the final entry of a rolled segment equal to the
    segment's max timestamp. Transaction index: equal to what recovery rebuilds.
    Zero slots at the end of the active segment's preallocated indexes are notes.
    `compare_indexes` (plan_partition's): False for a check that never writes.
    """
    findings, add = partition_findings_sink(partition, only)
    # Each segment is checked as soon as it is recovered, against what its scan gathered at the
    # indexes' entries (nothing per batch is kept: a 1 GiB segment can hold millions of batches).
    at_entries: Optional[_BatchesAtEntries] = None
    opened: Optional[_SegmentIndexes] = None

    def sink(segment: Segment) -> BatchSink:
        nonlocal at_entries, opened
        opened = _SegmentIndexes(segment)
        at_entries = _BatchesAtEntries.of_indexes(opened, segment.base_offset)
        return at_entries.sink

    def check(splan: SegmentPlan) -> None:
        nonlocal at_entries, opened
        batches, at_entries = at_entries, None
        indexes, opened = opened, None
        _verify_segment(splan, batches, add, metadata_log=partition.name == names.METADATA_PARTITION_DIR,
                        indexes=indexes)

    plan = plan_partition(partition, only=only, progress=progress, stop_at_damage=False, batch_sink=sink,
                          on_segment=check, index_interval_bytes=index_interval_bytes,
                          compare_indexes=compare_indexes)
    return findings, plan


class _SegmentIndexes:
    """A segment's .index and .timeindex, each opened (mapped) once for all of verify's checks: the index
    object, or the error opening it raised (None for a file that is not there)."""

    __slots__ = ("index", "timeindex")

    def __init__(self, segment: Segment) -> None:
        self.index = self._open(OffsetIndex, segment.index, segment.base_offset)
        self.timeindex = self._open(TimeIndex, segment.timeindex, segment.base_offset)

    @staticmethod
    def _open(kind, path: Optional[str], base_offset: int):
        if path is None:
            return None
        try:
            return kind(path, base_offset)
        except KstoreError as exc:
            return exc

    @staticmethod
    def get(opened):
        """The index object, or the error opening it raised again."""
        if isinstance(opened, KstoreError):
            raise opened
        return opened


def partition_findings_sink(partition: Partition, only: Optional[int]) -> Tuple[List[Finding], Callable[..., None]]:
    """A partition's findings list and the `add(segment, file, severity, check, message)` that fills it,
    with the partition's file findings (:func:`file_findings`) in it already when the whole partition is checked."""
    findings: List[Finding] = []

    def add(segment, file, severity, check, message):
        findings.append(Finding(partition.name, segment, file, severity, check, message))

    if only is None:
        file_findings(partition, add)
    return findings, add


def file_findings(partition: Partition, add: Callable[..., None]) -> None:
    """Index files without a .log, and leftovers of an interrupted delete, clean or swap."""
    for orphan in partition.orphan_indexes:
        add(names.base_offset_from_name(orphan), orphan, ERROR, "orphan-index",
            "index file without a .log (Kafka deletes it at startup)")
    for leftover in partition.leftovers:
        add(None, leftover, NOTE, "leftover-file", "left by an interrupted delete, clean or swap")


_MISSING = {
    names.INDEX_SUFFIX: ("missing-index", "no .index (Kafka recovers the segment at startup to rebuild it)"),
    names.TIME_INDEX_SUFFIX: ("missing-timeindex",
                              "no .timeindex (Kafka creates an empty one at startup and does not fill it)"),
}


def missing_index(seg: Segment, suffix: str, add: Callable[..., None]) -> bool:
    """A finding when the segment has no file of `suffix` (.index or .timeindex); whether it has one."""
    if (seg.index if suffix == names.INDEX_SUFFIX else seg.timeindex) is not None:
        return True
    check, message = _MISSING[suffix]
    if suffix == names.TIME_INDEX_SUFFIX and seg.index is None:
        message = "no .timeindex, nor .index (Kafka recovers the segment at startup, which fills both)"
    add(seg.base_offset, seg.path(suffix), ERROR, check, message)
    return False


def _verify_segment(splan: SegmentPlan, batches: Optional["_BatchesAtEntries"], add: Callable[..., None], *,
                    metadata_log: bool = False, indexes: Optional[_SegmentIndexes] = None) -> None:
    """One segment's checks, once recovery has scanned it: where its valid data ends, then each index
    against what the scan found. A torn tail of the metadata log is a warning: KafkaMetadataLog opens the log
    with recovery point 0, as after an unclean shutdown, so every start cuts it."""
    seg = splan.segment
    base = seg.base_offset
    if splan.error is not None:
        add(base, seg.log, ERROR, "log-unreadable", str(splan.error.message))
        return
    result = splan.result
    problem = result.problem
    if problem is not None:
        if problem.kind == ZERO_TAIL and splan.is_last:
            add(base, seg.log, NOTE, "log-zero-tail",
                f"{problem.tail_bytes} zero bytes after byte {problem.position} (preallocated active segment; "
                "a broker's recovery trims them)")
        else:
            torn = (metadata_log and splan.is_last and problem.kind in _TORN_KINDS
                    and is_torn_tail(seg.log, problem.position, base - 1 if result.last_offset is None
                                     else result.last_offset, last_segment=True))
            add(base, seg.log, WARNING if torn else ERROR, "log-" + problem.kind,
                f"valid data ends at byte {problem.position}: {problem.message}")
    opened = indexes if indexes is not None else _SegmentIndexes(seg)
    prealloc = splan.is_last and looks_preallocated(_length(seg.index), _length(seg.timeindex))
    # ---- .index
    if missing_index(seg, names.INDEX_SUFFIX, add):
        try:
            idx = _SegmentIndexes.get(opened.index)
            _verify_offset_index(idx, result, batches, prealloc, add)
        except KstoreError as exc:
            add(base, seg.index, ERROR, "index-unreadable", str(exc.message))
    # ---- .timeindex
    if missing_index(seg, names.TIME_INDEX_SUFFIX, add):
        try:
            tidx = _SegmentIndexes.get(opened.timeindex)
            _verify_time_index(tidx, result, batches, prealloc, splan.is_last, add)
        except KstoreError as exc:
            add(base, seg.timeindex, ERROR, "timeindex-unreadable", str(exc.message))
    _verify_txn_index(seg, result.aborted, add)


def _verify_txn_index(seg: Segment, expected: List[AbortedTxn], add: Callable[..., None]) -> None:
    """The .txnindex must hold exactly what recovery rebuilds: one AbortedTxn per ABORT marker of a
    non-empty transaction."""
    base = seg.base_offset
    if seg.txnindex is None:
        if expected:
            add(base, seg.path(names.TXN_INDEX_SUFFIX), ERROR, "missing-txnindex",
                f"no .txnindex, but the segment holds {len(expected)} ABORT marker(s) of non-empty transactions")
    else:
        try:
            txn = TransactionIndex(seg.txnindex, base)
            if txn.length % 34:
                add(base, seg.txnindex, ERROR, "txnindex-size",
                    f"{txn.length} bytes is not a multiple of 34 (a partial trailing entry is ignored)")
            try:
                txn.sanity_check()
            except KstoreError as exc:
                add(base, seg.txnindex, ERROR, "txnindex-sanity", str(exc.message))
            got = txn.entries()
            if got != expected:
                first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                detail = (f"entry {first}: found {got[first] if first < len(got) else 'nothing'}, "
                          f"expected {expected[first] if first < len(expected) else 'nothing'}")
                add(base, seg.txnindex, ERROR, "txnindex-entries",
                    f"{len(got)} entries, the ABORT markers give {len(expected)}; {detail}")
        except KstoreError as exc:
            add(base, seg.txnindex, ERROR, "txnindex-unreadable", str(exc.message))


_NEVER = float("inf")  # above every position and offset


class _BatchesAtEntries:
    """What the checks of one segment's .index and .timeindex need of its batches, gathered during
    recovery's scan (:attr:`sink`) at the places their entries name: for each position in the .index,
    the batch starting there (its base offset, and the last offset of the batch before it); for each
    offset in the .timeindex, the batch Kafka's lookups land on for it -- the first batch whose last
    offset reaches it (``LogSegment.translateOffset``) -- with its max timestamp, its last offset and
    the running maximum timestamp of every batch before it. Memory follows the indexes' entries (at
    most segment.index.bytes of them), not the segment's batches. An index that cannot be read names
    nothing (its check reports why).
    """

    __slots__ = ("positions", "found", "lower", "base", "offsets", "ended", "max_ts", "before", "last", "sink",
                 "_next_p", "_next_o")

    def __init__(self, positions: "array[int]", offsets: "array[int]", base_offset: int) -> None:
        """`positions` and `offsets`: the places to watch, distinct and sorted."""
        self.positions = positions
        self.offsets = offsets
        n, m = len(positions), len(offsets)
        self.found = bytearray(n)  # 1: a v2 batch starts at positions[k], 2: a legacy entry
        self.lower = array("q", bytes(8 * n))
        self.base = array("q", bytes(8 * n))
        self.ended = bytearray(m)  # 1: a batch reaches offsets[k]
        self.max_ts = array("q", bytes(8 * m))
        self.before = array("q", bytes(8 * m))
        self.last = array("q", bytes(8 * m))
        self.sink = self._sink(base_offset)
        # The checks look entries up in file order, which for a healthy index is the keys' order: the slot
        # after the last one found is tried before a binary search.
        self._next_p = 0
        self._next_o = 0

    @classmethod
    def of_indexes(cls, opened: _SegmentIndexes, base_offset: int) -> "_BatchesAtEntries":
        """Watching the positions of the segment's .index entries and the offsets of its .timeindex's."""
        return cls(_entry_keys(opened.index, 1), _entry_keys(opened.timeindex, 1), base_offset)

    def _sink(self, base_offset: int) -> BatchSink:
        positions, found, lower, base = self.positions, self.found, self.lower, self.base
        offsets, ended, max_ts_at, before_at, last_at = self.offsets, self.ended, self.max_ts, self.before, self.last
        n, m = len(positions), len(offsets)
        i = 0  # positions[:i] lie before the batches still to come (positions only grow)
        next_position = positions[0] if n else _NEVER
        j = 0  # offsets[:j] have their batch (the first whose last offset reaches them)
        next_offset = offsets[0] if m else _NEVER
        prev_last = base_offset - 1
        running = -1

        def sink(position: int, batch_base: Optional[int], last: int, max_ts: int) -> None:
            nonlocal i, next_position, j, next_offset, prev_last, running
            if position >= next_position:
                while i < n and positions[i] < position:
                    i += 1
                if i < n and positions[i] == position:
                    found[i] = 2 if batch_base is None else 1
                    lower[i] = prev_last
                    if batch_base is not None:
                        base[i] = batch_base
                    i += 1
                next_position = positions[i] if i < n else _NEVER
            prev_last = last
            if last >= next_offset:
                while j < m and offsets[j] <= last:
                    ended[j] = 1
                    max_ts_at[j] = max_ts
                    before_at[j] = running
                    last_at[j] = last
                    j += 1
                next_offset = offsets[j] if j < m else _NEVER
            if max_ts > running:
                running = max_ts

        return sink

    def at_position(self, position: int) -> Optional[Tuple[int, Optional[int]]]:
        """(last offset of the batch before, base offset or None for legacy) of the batch starting at
        `position`, or None when no batch starts there."""
        k = _slot(self.positions, self._next_p, position)
        if k < 0:
            return None
        self._next_p = k + 1
        if not self.found[k]:
            return None
        return self.lower[k], (self.base[k] if self.found[k] == 1 else None)

    def at_offset(self, offset: int) -> Optional[Tuple[int, int, int]]:
        """(max timestamp, last offset, running max timestamp of the batches before it) of the first
        batch whose last offset reaches `offset`, or None when no batch does."""
        k = _slot(self.offsets, self._next_o, offset)
        if k < 0:
            return None
        self._next_o = k + 1
        if not self.ended[k]:
            return None
        return self.max_ts[k], self.last[k], self.before[k]


def _slot(keys: "array[int]", hint: int, key: int) -> int:
    """Where `key` is in the sorted `keys` (-1: not there), trying slot `hint` first (the checks look entries
    up in file order, which for a healthy index is the keys' order)."""
    if hint < len(keys) and keys[hint] == key:
        return hint
    k = bisect_left(keys, key)
    return k if k < len(keys) and keys[k] == key else -1


def _entry_keys(index, field: int) -> "array[int]":
    """The distinct values of one field of an index's entries (as ``entry(n)`` gives them), sorted; none
    for an index that is not there or cannot be read."""
    if index is None or isinstance(index, KstoreError):
        return array("q")
    try:
        # A zero tail adds one distinct value however long it is: one slot of it stands for all (a sparse
        # multi-GB index would otherwise be a list of a billion entries).
        keep = min(index.entries, index.zero_tail_start() + 1)
        values = [entry[field] for entry in islice(index, keep)]
    except KstoreError:
        return array("q")
    if any(map(operator.ge, values, islice(values, 1, None))):  # not strictly increasing (a damaged index)
        values = sorted(set(values))
    return array("q", values)


def _zero_tail(index, prealloc: bool, add, base: int, kind: str) -> int:
    """Entries to check: all of them, or those before a preallocated zero tail."""
    entries = index.entries
    start = index.zero_tail_start()
    if start == entries:
        return entries
    zeros = entries - start
    if prealloc:
        add(base, index.path, NOTE, f"{kind}-preallocated",
            f"{zeros} zero slot(s) after {start} entries: preallocated active-segment index (trimmed at roll/close)")
    else:
        add(base, index.path, ERROR, f"{kind}-zero-padding",
            f"{zeros} all-zero slot(s) after {start} entries, in a file that is not a preallocated active index")
    return start


def _check_sanity(index, kind: str, prealloc: bool, add) -> None:
    """Kafka's sanity check, size first; zero slots of a preallocated active index only make it a note."""
    problem = index.size_problem()
    if problem:
        add(index.base_offset, index.path, ERROR, f"{kind}-size", problem)
        return
    try:
        index.sanity_check()
    except KstoreError as exc:
        explained = prealloc and index.zero_tail_start() < index.entries
        add(index.base_offset, index.path, NOTE if explained else ERROR, f"{kind}-sanity",
            str(exc.message) + (" (because of the preallocated zero slots)" if explained else ""))


def _verify_offset_index(idx, result: RecoveryResult, batches: _BatchesAtEntries, prealloc: bool, add) -> None:
    base = idx.base_offset
    path = idx.path
    _check_sanity(idx, "index", prealloc, add)
    n = _zero_tail(idx, prealloc, add, base, "index")
    last_offset = result.last_offset
    prev = None
    past, first_past = 0, None  # entries past a damaged segment's valid data: one finding, not one each
    for i in range(n):
        offset, position = idx.entry(i)
        where = f"entry {i} (offset {offset}, position {position})"
        if result.problem is not None and position >= result.valid_bytes:
            past += 1
            first_past = where if first_past is None else first_past
            continue
        if prev is not None:
            if offset <= prev[0]:
                add(base, path, ERROR, "index-order", f"{where}: offset not above the previous entry's {prev[0]}")
            if position <= prev[1]:
                add(base, path, ERROR, "index-order", f"{where}: position not above the previous entry's {prev[1]}")
        prev = (offset, position)
        if position >= result.valid_bytes:
            add(base, path, ERROR, "index-position", f"{where}: position is past the valid data ({result.valid_bytes} bytes)")
            continue
        found = batches.at_position(position)
        if found is None:
            add(base, path, ERROR, "index-position", f"{where}: position is not the start of a batch")
            continue
        lower, batch_base = found
        if offset <= lower:
            add(base, path, ERROR, "index-offset",
                f"{where}: the batches before this position already reach offset {lower}")
        elif batch_base is not None and offset < batch_base:
            add(base, path, ERROR, "index-offset", f"{where}: the batch there starts at offset {batch_base}")
        elif last_offset is not None and offset > last_offset:
            add(base, path, ERROR, "index-offset", f"{where}: past the segment's last offset {last_offset}")
    if past:
        add(base, path, ERROR, "index-position",
            f"{past} entries, from {first_past}, point past the valid data ({result.valid_bytes} bytes)")


def _verify_time_index(tidx, result: RecoveryResult, batches: _BatchesAtEntries, prealloc: bool, is_last: bool,
                       add) -> None:
    """An entry (t, o) is wrong only where Kafka's lookups through it answer wrongly.

    LogSegment.findOffsetByTimestamp(ts) takes the last entry with timestamp <= ts, goes to the first
    batch whose last offset reaches o and scans on for the first batch with max timestamp >= ts: the
    answer is right for every ts the entry serves exactly when no batch before that one already holds
    a timestamp >= t. Which offset inside the batch the entry names is a matter of who wrote it (a
    Kafka <= 3.6 leader: the record holding the max timestamp; 3.7+, followers, recovery and the
    cleaner: the batch's last offset), never an error. The last entry also gives the segment's max
    timestamp (LogSegment.maxTimestampSoFar: retention) and the offset ListOffsets(MAX_TIMESTAMP)
    starts from: its timestamp must be the segment's max and its batch must hold it.
    """
    base = tidx.base_offset
    path = tidx.path
    _check_sanity(tidx, "timeindex", prealloc, add)
    n = _zero_tail(tidx, prealloc, add, base, "timeindex")
    prev = None
    last_found = None
    past, first_past = 0, None  # entries past a damaged segment's valid data: one finding, not one each
    valid_last = result.last_offset if result.last_offset is not None else base - 1
    for i in range(n):
        ts, offset = tidx.entry(i)
        where = f"entry {i} (timestamp {ts}, offset {offset})"
        if result.problem is not None and offset > valid_last:
            past += 1
            first_past = where if first_past is None else first_past
            last_found = None
            continue
        if prev is not None:
            if ts <= prev[0]:
                add(base, path, ERROR, "timeindex-order", f"{where}: timestamp not above the previous entry's {prev[0]}")
            if offset < prev[1]:
                add(base, path, ERROR, "timeindex-order", f"{where}: offset below the previous entry's {prev[1]}")
        prev = (ts, offset)
        found = batches.at_offset(offset) if offset >= base else None
        last_found = found
        if found is None:
            add(base, path, ERROR, "timeindex-offset",
                f"{where}: no batch of the segment holds or follows this offset (Kafka's lookups find nothing)")
        elif found[2] >= ts:
            add(base, path, ERROR, "timeindex-timestamp",
                f"{where}: an earlier batch already holds timestamp {found[2]}, so Kafka's lookups for "
                f"timestamps from {ts} skip it")
    if past:
        add(base, path, ERROR, "timeindex-offset",
            f"{past} entries, from {first_past}, name offsets past the valid data (last valid offset {valid_last})")
    if result.max_timestamp >= 0:
        want = (result.max_timestamp, result.offset_of_max_timestamp)
        last = tidx.entry(n - 1) if n else None
        right = (last is not None and last[0] == want[0] and last_found is not None
                 and last_found[0] == want[0])
        if not right:
            message = (f"last entry is {last if last else 'missing'}, expected timestamp {want[0]} at an offset of "
                       f"a batch that holds it (e.g. {want[1]}): the segment's max timestamp, which retention reads")
            if is_last and (last is None or last[0] < want[0]):
                add(base, path, NOTE, "timeindex-final-entry",
                    message + " (active segment: written at roll or close)")
            else:
                add(base, path, ERROR, "timeindex-final-entry", message)
