"""Planning a read: PATHs to Kafka partitions, offset bounds, and byte ranges of segments.

Runs on the driver (inside Spark's planning worker, and in the launcher before Spark
starts, to validate options and to count the bytes in). Only index files, the
``.txnindex`` files, producer snapshots and the few batches at a lookup or a split
point are read here; ``.log`` bytes outside the selected offset range are never read,
here or by the readers.

The steps, per partition directory:

1. the offset range ``[start, end)``: Spark's Kafka-source options resolved against the
   log (timestamps through Kafka's own lookup, ``fetchOffsetByTimestamp``), intersected
   with pushed-down ``offset`` filters;
2. the segments that hold offsets in the range, and for the first and last of them the
   byte positions from the sparse ``.index`` (the first batch that can hold ``start``;
   the first batch that cannot hold an offset below ``end``);
3. large byte ranges cut at ``.index`` positions (every index entry points at the first
   byte of a batch; each cut is checked against the batch found there);
4. slices packed, in log order, into tasks of about equal bytes (Spark input partitions): at most
   ``maxBytesPerPartition`` each, as many as a multiple of ``minPartitions``.

For read_committed, the aborted transactions come from every ``.txnindex`` of the
partition (a transaction's ABORT marker may sit in a later segment than its data) and
the transactions still open at the end of the log from the newest producer snapshot,
replayed forward over the batches after it.
"""

from __future__ import annotations

import bisect
import math
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from kstore_cli.errors import KstoreError, UsageError, RemoteReadError
from kstore_cli.log import locks, logdir
from kstore_cli.log.index import OffsetIndex, TransactionIndex
from kstore_cli.log.log_segment import max_timestamp_so_far, open_index
from kstore_cli.log.logdir import LookupStats, Partition, Segment
from kstore_cli.record import storage
from kstore_cli.record.reader import read_batches
from kstore_cli.spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions


class Pushed:
    """Conditions Spark pushed down (AND-ed): exact for topic/partition/offset, a pruning
    bound for timestamps (in ms, inclusive on both sides; Spark re-checks those)."""

    __slots__ = ("topics", "partitions", "partition_lo", "partition_hi", "offset_lo", "offset_hi",
                 "offsets_in", "ts_lo", "ts_hi", "empty")

    def __init__(self) -> None:
        self.topics: Optional[set] = None
        self.partitions: Optional[set] = None
        self.partition_lo: Optional[int] = None
        self.partition_hi: Optional[int] = None
        #: offsets in [offset_lo, offset_hi) (hi exclusive)
        self.offset_lo: Optional[int] = None
        self.offset_hi: Optional[int] = None
        self.offsets_in: Optional[frozenset] = None
        self.ts_lo: Optional[int] = None
        self.ts_hi: Optional[int] = None
        #: a contradiction was pushed (e.g. topic = 'a' AND topic = 'b'): nothing to read
        self.empty = False

    def intersect_topics(self, values: Iterable[str]) -> None:
        values = set(values)
        self.topics = values if self.topics is None else self.topics & values

    def intersect_partitions(self, values: Iterable[int]) -> None:
        values = set(values)
        self.partitions = values if self.partitions is None else self.partitions & values

    def lower_offset(self, value: int) -> None:
        self.offset_lo = value if self.offset_lo is None else max(self.offset_lo, value)

    def upper_offset(self, value: int) -> None:
        self.offset_hi = value if self.offset_hi is None else min(self.offset_hi, value)

    def intersect_offsets(self, values: Iterable[int]) -> None:
        values = frozenset(values)
        self.offsets_in = values if self.offsets_in is None else self.offsets_in & values
        if self.offsets_in:
            self.lower_offset(min(self.offsets_in))
            self.upper_offset(max(self.offsets_in) + 1)
        else:
            self.empty = True

    def partition_ok(self, topic: str, partition: int) -> bool:
        if self.empty:
            return False
        if self.topics is not None and topic not in self.topics:
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.partition_lo is not None and partition < self.partition_lo:
            return False
        if self.partition_hi is not None and partition > self.partition_hi:
            return False
        return True


class PartitionScan:
    """One Kafka partition as the readers see it: bounds and transaction facts."""

    __slots__ = ("topic", "partition", "path", "start", "end", "aborted", "open_txns", "offsets_in",
                 "ts_lo", "ts_hi")

    def __init__(self, topic: str, partition: int, path: str) -> None:
        self.topic = topic
        self.partition = partition
        self.path = path
        #: first offset to export (None: from the start)
        self.start: Optional[int] = None
        #: first offset not to export (None: to the end of the log)
        self.end: Optional[int] = None
        #: producer id -> sorted [(first offset, marker offset)] of aborted transactions
        self.aborted: Optional[Dict[int, List[Tuple[int, int]]]] = None
        #: producer id -> first offset of its transaction still open at the end of the log
        self.open_txns: Optional[Dict[int, int]] = None
        self.offsets_in: Optional[frozenset] = None
        self.ts_lo: Optional[int] = None
        self.ts_hi: Optional[int] = None

    def is_aborted(self, producer_id: int, base_offset: int) -> bool:
        """Whether a transactional data batch belongs to an aborted (or still open) transaction.

        A producer has at most one transaction open at a time, so a transactional batch of
        producer P at offset o is in the aborted transaction (P, first, marker) exactly when
        first <= o <= marker: what a read_committed consumer computes from the fetch's
        aborted-transaction list and the ABORT markers it meets.
        """
        if self.aborted:
            spans = self.aborted.get(producer_id)
            if spans:
                i = bisect.bisect_right(spans, (base_offset, float("inf"))) - 1
                if i >= 0 and spans[i][0] <= base_offset <= spans[i][1]:
                    return True
        if self.open_txns:
            first = self.open_txns.get(producer_id)
            if first is not None and base_offset >= first:
                return True
        return False

    def __repr__(self) -> str:
        return f"PartitionScan({self.topic}-{self.partition}, [{self.start}, {self.end}))"


class Slice:
    """A byte range [start, end) of one segment; both ends are batch boundaries."""

    __slots__ = ("scan", "log", "base_offset", "start", "end", "live_tail")

    def __init__(self, scan: PartitionScan, log: str, base_offset: int, start: int, end: int,
                 live_tail: bool = False) -> None:
        self.scan = scan
        self.log = log
        self.base_offset = base_offset
        self.start = start
        self.end = end
        #: The end of the active segment of a log a running broker holds (its data dir's .lock):
        #: a partial batch there is an append in progress, not one cut short.
        self.live_tail = live_tail

    @property
    def size(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"Slice({self.scan.topic}-{self.scan.partition} {os.path.basename(self.log)} [{self.start}, {self.end}))"


class Task:
    """What one Spark input partition reads: slices in log order."""

    __slots__ = ("slices", "storage")

    def __init__(self, slices: List[Slice], storage_options: Optional[Dict[str, str]] = None) -> None:
        self.slices = slices
        #: The storage options remote slices are read with (kstore_cli.record.storage.configure).
        self.storage = storage_options

    @property
    def size(self) -> int:
        return sum(s.size for s in self.slices)

    def __repr__(self) -> str:
        return f"Task({len(self.slices)} slices, {self.size} bytes)"


class Plan:
    """The result of planning: partitions, slices, tasks, and what was read to get there."""

    def __init__(self) -> None:
        self.scans: List[PartitionScan] = []
        self.slices: List[Slice] = []
        self.tasks: List[Task] = []
        #: index/txnindex/snapshot bytes and lookup batches read while planning
        self.stats = LookupStats()
        self.target_bytes = 0
        #: internal topics' partitions ("topic-partition") left out because no option named them
        self.internal_left_out: List[str] = []

    @property
    def bytes_in(self) -> int:
        return sum(s.size for s in self.slices)


# --------------------------------------------------------------------------- offsets


def _spec_value(spec: OffsetSpec, topic: str, partition: int) -> Tuple[str, Optional[int]]:
    """('offset', n) / ('timestamp', ms) / ('earliest', None) / ('latest', None) for one partition."""
    if spec.kind in ("earliest", "latest"):
        return spec.kind, None
    if spec.kind == "timestamp":
        return "timestamp", spec.timestamp
    value = spec.per_partition[(topic, partition)]
    if spec.kind == "timestamps":
        return "timestamp", value
    if value == EARLIEST:
        return "earliest", None
    if value == LATEST:
        return "latest", None
    return "offset", value


def offset_for_timestamp(partition: Partition, timestamp: int, stats: LookupStats) -> Optional[int]:
    """Kafka's ListOffsets by timestamp: the first offset whose record timestamp is >= it, or None."""
    for _segment, _batch, record in logdir.find_timestamp(partition, timestamp, stats):
        return record.offset
    return None


def _check_specific(spec: OffsetSpec, assigned: Sequence[Tuple[str, int]]) -> None:
    """Spark requires per-partition JSON to name exactly the partitions being read."""
    if not spec.is_specific:
        return
    specified = set(spec.per_partition)
    if specified != set(assigned):
        raise UsageError(
            f"If {spec.option} contains specific offsets, you must specify all TopicPartitions.\n"
            "Use -1 for latest, -2 for earliest.\n"
            f"Specified: {sorted(f'{t}-{p}' for t, p in specified)} "
            f"Assigned: {sorted(f'{t}-{p}' for t, p in assigned)}"
        )


def _resolve_bounds(scan: PartitionScan, partition: Partition, opts: ReadOptions, pushed: Pushed,
                    stats: LookupStats) -> bool:
    """Set scan.start/end; False when the partition has nothing to read."""
    topic, p = scan.topic, scan.partition
    kind, value = _spec_value(opts.starting, topic, p)
    start: Optional[int] = None
    if kind == "offset":
        start = value
    elif kind == "timestamp":
        start = offset_for_timestamp(partition, value, stats)
        if start is None:
            if opts.fail_on_no_timestamp_match:
                raise UsageError(
                    f"No offset matched from request of topic-partition {topic}-{p} and timestamp {value}"
                )
            return False  # strategy "latest": start at the end, nothing to read
    kind, value = _spec_value(opts.ending, topic, p)
    end: Optional[int] = None
    if kind == "offset":
        end = value
    elif kind == "timestamp":
        end = offset_for_timestamp(partition, value, stats)  # None: latest
    if start is not None and end is not None and start > end:
        raise UsageError(
            f"The start offset {start} is after the end offset {end} for topic partition {topic}-{p}"
        )
    if pushed.offset_lo is not None:
        start = pushed.offset_lo if start is None else max(start, pushed.offset_lo)
    if pushed.offset_hi is not None:
        end = pushed.offset_hi if end is None else min(end, pushed.offset_hi)
    scan.start, scan.end = start, end
    scan.offsets_in = pushed.offsets_in
    scan.ts_lo, scan.ts_hi = pushed.ts_lo, pushed.ts_hi
    return not (start is not None and end is not None and start >= end)


# --------------------------------------------------------------------------- transactions


def _aborted_transactions(partition: Partition, stats: LookupStats) -> Dict[int, List[Tuple[int, int]]]:
    out: Dict[int, List[Tuple[int, int]]] = {}
    for segment in partition.segments:
        if segment.txnindex is None:
            continue
        index = TransactionIndex(segment.txnindex, segment.base_offset)
        stats.index_bytes += index.length
        for txn in index:
            out.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    for spans in out.values():
        spans.sort()
    return out


def _open_transactions(partition: Partition, _stats: LookupStats) -> Dict[int, int]:
    """Producer id -> first offset of each transaction with no marker by the end of the log
    (ProducerStateManager at the log end: the newest readable snapshot, then the log after it)."""
    from kstore_cli.log.producer_state import ProducerStateManager

    state = ProducerStateManager.load(partition)
    return {e.producer_id: e.current_txn_first_offset for e in state.open_transactions()}


# --------------------------------------------------------------------------- byte ranges


def _usable_offset_index(segment: Segment, stats: LookupStats) -> List[Tuple[int, int]]:
    """(offset, position) entries of the segment's .index, without a preallocated zero tail."""
    index, entries = open_index(OffsetIndex, segment.index, segment.base_offset, stats)
    if index is None:
        return []
    stats.index_bytes += entries * index.entry_size
    return [index.entry(n) for n in range(entries)]


def _is_batch_start(log: str, position: int, entry_offset: int, stats: LookupStats) -> bool:
    """Whether a batch that can hold the index entry's offset starts at `position` (CRC checked)."""
    try:
        for batch in read_batches(log, start=position):
            stats.log_bytes += batch.size
            stats.batches_scanned += 1
            if batch.last_offset > entry_offset or batch.magic > 2:
                return False
            return batch.is_valid
    except RemoteReadError:
        raise  # no damage: the object could not be read
    except KstoreError:
        return False
    return False


def _segment_range(segment: Segment, next_base: Optional[int], scan: PartitionScan,
                   entries: List[Tuple[int, int]], size: int, stats: LookupStats) -> Tuple[int, int]:
    """Byte positions [lo, hi) of the batches that can hold offsets in [scan.start, scan.end).

    An index position that is no batch start (a damaged .index) is not used: the range then
    runs from the segment's start, or to its end, and the reader's offset checks do the rest
    (a slice edge inside a batch would read as a damaged or cut-off batch in the .log)."""
    lo, hi = 0, size
    if scan.start is not None and scan.start > segment.base_offset and entries:
        # OffsetIndex.lookup: the largest entry with offset <= start.
        i = bisect.bisect_right([o for o, _p in entries], scan.start) - 1
        if i >= 0 and _is_batch_start(segment.log, entries[i][1], entries[i][0], stats):
            lo = entries[i][1]
    if scan.end is not None and (next_base is None or scan.end < next_base) and entries:
        # Entry k names the largest offset of the append at p_k; everything from p_(k+1)
        # on is above it. The first k with offset >= end bounds the range.
        offsets = [o for o, _p in entries]
        k = bisect.bisect_left(offsets, scan.end)
        if k + 1 < len(entries) and _is_batch_start(segment.log, entries[k + 1][1], entries[k + 1][0], stats):
            hi = entries[k + 1][1]
    return lo, max(lo, hi)


def _cut(log: str, lo: int, hi: int, entries: List[Tuple[int, int]], target: int,
         stats: LookupStats) -> List[Tuple[int, int]]:
    """[lo, hi) cut into ranges of about `target` bytes at checked index positions."""
    if hi - lo <= target or not entries:
        return [(lo, hi)]
    out = []
    last = lo
    for offset, position in entries:
        if position <= last or position >= hi:
            continue
        if position - last >= target and hi - position >= target // 4 and _is_batch_start(log, position, offset, stats):
            out.append((last, position))
            last = position
    out.append((last, hi))
    return out


# --------------------------------------------------------------------------- the plan


def _task_count(total: int, opts: ReadOptions) -> int:
    """How many tasks: none above ``max_bytes_per_partition``, and a multiple of ``min_partitions``
    (every core then gets as many tasks; 3 tasks on 2 cores took 2 waves, the second half idle)."""
    count = max(1, math.ceil(total / opts.max_bytes_per_partition))
    if opts.min_partitions:
        count = math.ceil(count / opts.min_partitions) * opts.min_partitions
    return count


def _pack(slices: List[Slice], count: int) -> List[Task]:
    """The slices, in log order, as at most `count` tasks of about equal bytes.

    Each task takes slices while that brings it closer to an equal share of what is left. Filling
    tasks up to a fixed size instead made one task more than `count` whenever the sizes did not
    divide evenly (4 partitions of ~64 MB, 2 cores: 3 tasks)."""
    tasks: List[Task] = []
    remaining = sum(sl.size for sl in slices)
    i = 0
    for left in range(count, 0, -1):
        if i >= len(slices):
            break
        share = remaining / left
        group, size = [slices[i]], slices[i].size
        i += 1
        while i < len(slices) and (left == 1 or (len(slices) - i >= left and  # a slice for each later task
                                                 abs(size + slices[i].size - share) <= abs(size - share))):
            group.append(slices[i])
            size += slices[i].size
            i += 1
        tasks.append(Task(group))
        remaining -= size
    return tasks


def select_partitions(opts: ReadOptions, pushed: Optional[Pushed] = None,
                      internal_left_out: Optional[List[str]] = None) -> List[logdir.Target]:
    """The PATHs resolved to partition directories, filtered by topic options and pushed filters.

    `internal_left_out` collects the internal topics' partitions left out only because nothing named them."""
    pushed = pushed or Pushed()
    seen: Dict[Tuple[str, int], str] = {}
    out = []
    for target, named in _resolve_named(opts.paths):
        part = target.partition
        if part.partition < 0:
            raise UsageError("not a <topic>-<partition> directory", path=part.path)
        key = (part.topic, part.partition)
        if key in seen:
            if seen[key] == part.path:
                continue
            raise UsageError(f"{part.topic}-{part.partition} is given twice ({seen[key]} and {part.path})",
                             path=part.path)
        seen[key] = part.path
        if not opts.topic_selected(part.topic, named) or not pushed.partition_ok(part.topic, part.partition):
            if internal_left_out is not None and opts.left_out_unless_named(part.topic) \
                    and opts.topic_selected(part.topic, True) \
                    and pushed.partition_ok(part.topic, part.partition):
                internal_left_out.append(f"{part.topic}-{part.partition}")
            continue
        out.append(target)
    return out


def _resolve_named(paths: Sequence[str]) -> List[Tuple[logdir.Target, bool]]:
    """The PATHs' targets, each with whether its PATH named the partition itself (a partition
    directory or a segment) rather than a data directory that holds it."""
    out: List[Tuple[logdir.Target, bool]] = []
    for raw in paths:
        remote = storage.is_uri(raw)
        whole = raw.rstrip("/") if remote else os.path.abspath(storage.local_path(raw))
        for target in logdir.resolve([raw]):
            path = target.partition.path if remote else os.path.abspath(target.partition.path)
            out.append((target, target.only is not None or path == whole))
    return out


def plan_read(opts: ReadOptions, pushed: Optional[Pushed] = None) -> Plan:
    """Plan a read: which bytes of which segments each Spark input partition reads."""
    pushed = pushed or Pushed()
    storage.configure(opts.storage)
    plan = Plan()
    stats = plan.stats
    targets = select_partitions(opts, pushed, plan.internal_left_out)
    assigned = [(t.partition.topic, t.partition.partition) for t in targets]
    _check_specific(opts.starting, assigned)
    _check_specific(opts.ending, assigned)
    ranges: List[Tuple[Slice, List[Tuple[int, int]]]] = []
    locked: Dict[str, bool] = {}
    for target in targets:
        part = target.partition
        if part.data_dir not in locked:
            locked[part.data_dir] = locks.is_locked(part.data_dir)
        scan = PartitionScan(part.topic, part.partition, part.path)
        plan.scans.append(scan)
        if not _resolve_bounds(scan, part, opts, pushed, stats):
            continue
        segments = [s for s in target.segments]
        if opts.read_committed:
            scan.aborted = _aborted_transactions(part, stats)
            scan.open_txns = _open_transactions(part, stats)
        for i, segment in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if scan.end is not None and segment.base_offset >= scan.end:
                break
            if scan.start is not None and next_base is not None and next_base <= scan.start:
                continue
            size = segment.log_size
            if size == 0:
                continue
            if scan.ts_lo is not None and next_base is not None:
                # The time index's word only: planning reads no data (None: the read decides).
                largest = max_timestamp_so_far(segment, stats, scan=False)
                if largest is not None and 0 <= largest[0] < scan.ts_lo:
                    continue
            entries = _usable_offset_index(segment, stats)
            lo, hi = _segment_range(segment, next_base, scan, entries, size, stats)
            if hi > lo:
                live = locked[part.data_dir] and hi == size and segment.base_offset == part.segments[-1].base_offset
                ranges.append((Slice(scan, segment.log, segment.base_offset, lo, hi, live), entries))
    total = sum(sl.size for sl, _e in ranges)
    count = _task_count(total, opts)
    plan.target_bytes = target = max(1, math.ceil(total / count))
    for sl, entries in ranges:
        for lo, hi in _cut(sl.log, sl.start, sl.end, entries, target, stats):
            plan.slices.append(Slice(sl.scan, sl.log, sl.base_offset, lo, hi, sl.live_tail and hi == sl.end))
    plan.tasks = _pack(plan.slices, count)
    for task in plan.tasks:
        task.storage = opts.storage or None
    return plan
