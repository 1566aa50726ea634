"""Reading one planned task: its slices' batches, filtered, as Arrow record batches.

What is dropped, in order, per batch (shallow, before decoding) and then per record:

* batches past the partition's end offset end the slice (nothing after them is read);
* batches wholly below the start offset, control batches (transaction markers and
  KRaft control records are never exported), batches whose largest timestamp is below
  a pushed timestamp bound, and with read_committed the batches of aborted (and still
  open) transactions;
* records outside ``[start, end)``, outside a pushed ``offset IN (...)`` list, or
  outside the pushed timestamp bounds.

Runs on executors; imports only the segment core, pyarrow and this package's pure modules.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Generator, Iterator, List, Optional

import pyarrow as pa

from kstore_cli.errors import CorruptDataError, CorruptRecordError, KstoreError
from kstore_cli.record import decode, storage
from kstore_cli.record.batch import LOG_OVERHEAD, Batch
from kstore_cli.record.columns import RecordColumns, read_columns
from kstore_cli.record.reader import read_batches
from kstore_cli.record.wire import LAST_OFFSET_DELTA_OFFSET, LOG_ENTRY_HEADER, MAGIC_OFFSET
from kstore_cli.spark.columns import ColumnBuilder
from kstore_cli.spark.plan import Slice, Task


#: Also turns tracing on (for executors whose options a test cannot reach, e.g. on a cluster).
TRACE_ENV = "KSTORE_SPARK_TRACE"


class SliceTrace:
    """What reading one slice touched (a test hook: written when ``traceDir`` or $KSTORE_SPARK_TRACE is set)."""

    __slots__ = ("log", "start", "end", "bytes_read", "batches", "rows", "remote_reads", "largest_read")

    def __init__(self, sl: Slice) -> None:
        self.log = sl.log
        self.start = sl.start
        self.end = sl.end
        self.bytes_read = 0
        self.batches = 0
        self.rows = 0
        #: ranged reads of a remote slice, and the most bytes one of them asked for
        self.remote_reads = -storage.ReadStats.reads
        storage.ReadStats.largest = self.largest_read = 0

    def done(self) -> None:
        self.remote_reads += storage.ReadStats.reads
        self.largest_read = storage.ReadStats.largest

    def to_dict(self) -> dict:
        return {"log": self.log, "start": self.start, "end": self.end, "bytesRead": self.bytes_read,
                "batches": self.batches, "rows": self.rows, "module": __file__,
                "decoder": decode.BACKEND, "remoteReads": self.remote_reads, "largestRead": self.largest_read}


class SkippedBatch:
    """A damaged or truncated batch left out with ``onCorruption=skip``: where it is, and the
    offsets its header claims (None when not even a header could be read)."""

    __slots__ = ("topic", "partition", "log", "position", "size", "base_offset", "last_offset", "reason")

    def __init__(self, topic: str, partition: int, log: str, position: int, size: int,
                 base_offset: Optional[int], last_offset: Optional[int], reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.position = position
        self.size = size
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.reason = reason

    def to_dict(self, snake_case: bool = False) -> dict:
        """As _kstore_skipped.json spells it (a file format: unchanged); `snake_case`: as --json does."""
        first, last = ("base_offset", "last_offset") if snake_case else ("baseOffset", "lastOffset")
        return {"topic": self.topic, "partition": self.partition, "file": self.log, "position": self.position,
                "bytes": self.size, first: self.base_offset, last: self.last_offset, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> "SkippedBatch":
        return cls(d["topic"], d["partition"], d["file"], d["position"], d["bytes"], d["baseOffset"],
                   d["lastOffset"], d["reason"])

    def text(self) -> str:
        if self.base_offset is None:
            offsets = "offsets unknown"
        elif self.last_offset is None:
            offsets = f"from offset {self.base_offset} (as its header says)"
        else:
            offsets = f"offsets {self.base_offset}..{self.last_offset} (as its header says)"
        return f"{self.log} at byte {self.position}: {self.size} bytes skipped, {offsets}: {self.reason}"


def unique_skipped(skipped: List[SkippedBatch]) -> List[SkippedBatch]:
    """Each skipped batch once (a retried task reports its batches again), in file order."""
    seen = {}
    for b in skipped:
        seen.setdefault((b.log, b.position), b)
    return [seen[k] for k in sorted(seen)]


def skipped_of(written: List[dict]) -> List[SkippedBatch]:
    """The batches the tasks left out (write_task's ``{"skipped": ...}`` entries), each once."""
    return unique_skipped([SkippedBatch.from_dict(w["skipped"]) for w in written if "skipped" in w])


#: An entry's first bytes: base offset (v2) or offset (legacy), size.
_ENTRY_PREFIX = LOG_ENTRY_HEADER
_INT32 = struct.Struct(">i")


def _head(log: str, position: int, length: int) -> bytes:
    """Up to `length` bytes of a .log (or remote object) from `position`."""
    if storage.is_uri(log):
        return storage.RemoteFile(log).read(position, length)
    with open(log, "rb") as f:
        f.seek(position)
        return f.read(length)


def _truncated_tail(log: str, position: int, end: int) -> CorruptRecordError:
    """The error for bytes [position, end) that do not hold a whole batch (a segment cut short)."""
    have = end - position
    size = None
    try:
        head = _head(log, position, _ENTRY_PREFIX.size)
        if len(head) == _ENTRY_PREFIX.size:
            size = _ENTRY_PREFIX.unpack(head)[1] + LOG_OVERHEAD
    except OSError:
        pass
    if size is not None and size > have:
        found = f"the batch here is {size} bytes but the segment ends after {have}"
    else:
        found = f"{have} bytes that are no whole batch"
    return CorruptRecordError(f"truncated batch: expected a whole batch, found {found}", path=log, position=position)


def _skipped(sl: Slice, position: int, size: int, exc: KstoreError, header=None) -> SkippedBatch:
    base = last = None
    if header is not None:
        # A legacy wrapper's first offset is inside its compressed data: unknown when that is damaged.
        base = None if header.is_legacy and header.compression else header.base_offset
        last = header.last_offset
    elif size >= _ENTRY_PREFIX.size:
        try:
            head = _head(sl.log, position, min(size, LAST_OFFSET_DELTA_OFFSET + 4))
            base = _ENTRY_PREFIX.unpack_from(head)[0]
            if len(head) == LAST_OFFSET_DELTA_OFFSET + 4 and head[MAGIC_OFFSET] == 2:
                last = base + _INT32.unpack_from(head, LAST_OFFSET_DELTA_OFFSET)[0]
        except (OSError, struct.error):
            base = None
    return SkippedBatch(sl.scan.topic, sl.scan.partition, sl.log, position, size, base, last, exc.message)


def _checked_records(sl: Slice, batch) -> list:
    """The batch's records; the consumer's check.crcs: each inner message of a legacy wrapper has its
    own CRC, checked here (a v2 batch's CRC covers its records)."""
    records = batch.records()
    if batch.is_legacy and batch.compression:
        bad = next((r for r in records if not r.is_valid), None)
        if bad is not None:
            raise CorruptRecordError(f"Record is corrupt (inner message at offset {bad.offset} fails its "
                                     f"CRC, stored crc = {bad.crc})", path=sl.log, position=batch.position)
    return records


def _selected(scan, records: list) -> list:
    """The records the scan asks for: offsets in [start, end), in offsets_in, timestamps in range."""
    start, end, offsets_in, ts_lo, ts_hi = scan.start, scan.end, scan.offsets_in, scan.ts_lo, scan.ts_hi
    if (start is not None and records[0].offset < start) or (end is not None and records[-1].offset >= end):
        records = [r for r in records if (start is None or r.offset >= start) and (end is None or r.offset < end)]
    if offsets_in is not None:
        records = [r for r in records if r.offset in offsets_in]
    if ts_lo is not None or ts_hi is not None:
        records = [r for r in records if (ts_lo is None or r.timestamp >= ts_lo)
                   and (ts_hi is None or r.timestamp <= ts_hi)]
    return records


def _entries(sl: Slice, columnar: bool, read_committed: bool) -> Iterator:
    """The slice's batches, CRC checked. Columnar: runs of plain batches wholly in [start, end) (not
    transactional when aborts matter) come decoded as columns; anything else comes as a batch."""
    if columnar:
        return read_columns(sl.log, start=sl.start, end=sl.end, min_offset=sl.scan.start, end_offset=sl.scan.end,
                            stop_transactional=read_committed, check_crc=True)
    return read_batches(sl.log, start=sl.start, end=sl.end, check_crc=True)


def _check_tail(sl: Slice, covered: int, skipped: Optional[List[SkippedBatch]]) -> None:
    """Bytes after the last whole batch of the slice: a partial trailing entry, which the reader
    stops before (FileLogInputStream does too), so bytes cut off the end of a segment are reported
    (raised, or skipped); a running broker's append in progress is not in the log yet."""
    if covered >= sl.end or sl.live_tail:
        return
    exc = _truncated_tail(sl.log, covered, sl.end)
    if skipped is None:
        raise exc
    skipped.append(_skipped(sl, covered, sl.end - covered, exc))


def _read_slice(sl: Slice, builder: ColumnBuilder, trace: SliceTrace,
                skipped: Optional[List[SkippedBatch]] = None) -> Iterator[pa.RecordBatch]:
    """The slice's rows. Every batch's CRC is checked (natively, while framing); a damaged batch,
    a batch that does not decode, or a tail that holds no whole batch raises CorruptDataError
    naming file and byte, or with `skipped` is left out and appended there."""
    scan = sl.scan
    # The planner gives a partition transaction facts only for read_committed.
    read_committed = scan.aborted is not None or scan.open_txns is not None
    entries = _entries(sl, builder.columnar and scan.offsets_in is None and scan.ts_lo is None and scan.ts_hi is None,
                       read_committed)
    covered = sl.start  # every byte before this was framed as a whole batch
    while True:
        try:
            batch = next(entries)
        except StopIteration:
            break
        except CorruptDataError as exc:
            # The framing itself failed (a size field below Kafka's minimum): nothing after it can be
            # framed, so the rest of the slice goes.
            if skipped is None:
                raise
            skipped.append(_skipped(sl, covered, sl.end - covered, exc))
            return
        if isinstance(batch, RecordColumns):
            covered = batch.stop
            trace.bytes_read += batch.stop - batch.position
            trace.batches += batch.batches
            trace.rows += batch.rows
            builder.add_run(scan.topic, scan.partition, batch)
            if builder.full:
                yield builder.finish()
            continue
        covered = batch.position + batch.size
        trace.bytes_read += batch.size
        trace.batches += 1
        if (yield from _batch_rows(sl, batch, builder, trace, skipped, read_committed)):
            return
    _check_tail(sl, covered, skipped)


def _batch_rows(sl: Slice, batch: Batch, builder: ColumnBuilder, trace: SliceTrace,
                skipped: Optional[List[SkippedBatch]], read_committed: bool
                ) -> Generator[pa.RecordBatch, None, bool]:
    """A framed batch's selected rows added to `builder` (yielding each record batch it fills); True when
    the batch is past the slice's end offset, which ends the read."""
    scan = sl.scan
    start, end = scan.start, scan.end
    ts_lo, ts_hi, offsets_in = scan.ts_lo, scan.ts_hi, scan.offsets_in
    try:
        batch.ensure_valid()  # free for batches framed with their CRC checked
        if end is not None and batch.magic >= 2 and batch.base_offset >= end:
            return True
        if start is not None and batch.last_offset < start:
            return False
        if batch.is_control:
            return False
        if ts_lo is not None and batch.max_timestamp < ts_lo:
            return False
        if read_committed and batch.is_transactional and scan.is_aborted(batch.producer_id, batch.base_offset):
            return False
        if offsets_in is None and ts_lo is None and ts_hi is None:
            added = builder.add_batch(scan.topic, scan.partition, batch, start, end)  # columnar: no object per record
            if added is not None:
                trace.rows += added
                if builder.full:
                    yield builder.finish()
                return False
        records = _checked_records(sl, batch)
    except CorruptDataError as exc:
        if skipped is None:
            raise
        skipped.append(_skipped(sl, batch.position, batch.size, exc, batch))
        return False
    if not records:
        return False
    if end is not None and records[0].offset >= end:
        return True  # a legacy entry past the end
    records = _selected(scan, records)
    trace.rows += len(records)
    builder.add(scan.topic, scan.partition, batch, records)
    if builder.full:
        yield builder.finish()
    return False


def read_task(task: Task, *, include_headers: bool = False, include_metadata: bool = False,
              trace_dir: Optional[str] = None,
              skipped: Optional[List[SkippedBatch]] = None) -> Iterator[pa.RecordBatch]:
    """The rows of a task as Arrow record batches of the source schema.

    A damaged or truncated batch raises CorruptDataError (file and byte) unless `skipped` is given:
    then it is left out and appended there."""
    builder = ColumnBuilder(include_headers, include_metadata)
    if task.storage:
        storage.configure(task.storage)
    trace_dir = trace_dir or os.environ.get(TRACE_ENV) or None
    traces = []
    for sl in task.slices:
        trace = SliceTrace(sl)
        traces.append(trace)
        yield from _read_slice(sl, builder, trace, skipped)
        trace.done()
    if builder.rows:
        yield builder.finish()
    if trace_dir:
        path = os.path.join(trace_dir, f"trace-{os.getpid()}.jsonl")
        with open(path, "a", encoding="utf-8") as f:
            for trace in traces:
                f.write(json.dumps(trace.to_dict()) + "\n")
