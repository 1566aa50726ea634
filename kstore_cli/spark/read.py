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
from typing import Iterator, Optional

import pyarrow as pa

from kstore_cli.segment import decode
from kstore_cli.segment.columns import RecordColumns, read_columns
from kstore_cli.segment.reader import read_batches
from kstore_cli.spark.columns import ColumnBuilder
from kstore_cli.spark.plan import Slice, Task


#: Also turns tracing on (for executors whose options a test cannot reach, e.g. on a cluster).
TRACE_ENV = "KSTORE_SPARK_TRACE"


class SliceTrace:
    """What reading one slice touched (a test hook: written when ``traceDir`` or $KSTORE_SPARK_TRACE is set)."""

    __slots__ = ("log", "start", "end", "bytes_read", "batches", "rows")

    def __init__(self, sl: Slice) -> None:
        self.log = sl.log
        self.start = sl.start
        self.end = sl.end
        self.bytes_read = 0
        self.batches = 0
        self.rows = 0

    def to_dict(self) -> dict:
        return {"log": self.log, "start": self.start, "end": self.end, "bytesRead": self.bytes_read,
                "batches": self.batches, "rows": self.rows, "module": __file__,
                "decoder": decode.BACKEND}


def _read_slice(sl: Slice, builder: ColumnBuilder, trace: SliceTrace) -> Iterator[pa.RecordBatch]:
    scan = sl.scan
    start, end = scan.start, scan.end
    ts_lo, ts_hi, offsets_in = scan.ts_lo, scan.ts_hi, scan.offsets_in
    topic, partition = scan.topic, scan.partition
    # The planner gives a partition transaction facts only for read_committed.
    read_committed = scan.aborted is not None or scan.open_txns is not None
    if builder.columnar and offsets_in is None and ts_lo is None and ts_hi is None:
        # Runs of plain batches wholly in [start, end) (not transactional when aborts matter) come
        # decoded as columns; anything else comes as a batch, for the checks below.
        entries = read_columns(sl.log, start=sl.start, end=sl.end, min_offset=start, end_offset=end,
                               stop_transactional=read_committed)
    else:
        entries = read_batches(sl.log, start=sl.start, end=sl.end)
    for batch in entries:
        if isinstance(batch, RecordColumns):
            trace.bytes_read += batch.stop - batch.position
            trace.batches += batch.batches
            trace.rows += batch.rows
            builder.add_run(topic, partition, batch)
            if builder.full:
                yield builder.finish()
            continue
        trace.bytes_read += batch.size
        trace.batches += 1
        if end is not None and batch.magic >= 2 and batch.base_offset >= end:
            return
        if start is not None and batch.last_offset < start:
            continue
        if batch.is_control:
            continue
        if ts_lo is not None and batch.max_timestamp < ts_lo:
            continue
        if read_committed and batch.is_transactional and scan.is_aborted(batch.producer_id, batch.base_offset):
            continue
        if offsets_in is None and ts_lo is None and ts_hi is None:
            added = builder.add_batch(topic, partition, batch, start, end)  # columnar: no object per record
            if added is not None:
                trace.rows += added
                if builder.full:
                    yield builder.finish()
                continue
        records = batch.records()
        if not records:
            continue
        if end is not None and records[0].offset >= end:
            return  # a legacy entry past the end
        if (start is not None and records[0].offset < start) or (end is not None and records[-1].offset >= end):
            records = [r for r in records if (start is None or r.offset >= start) and (end is None or r.offset < end)]
        if offsets_in is not None:
            records = [r for r in records if r.offset in offsets_in]
        if ts_lo is not None or ts_hi is not None:
            records = [r for r in records if (ts_lo is None or r.timestamp >= ts_lo)
                       and (ts_hi is None or r.timestamp <= ts_hi)]
        trace.rows += len(records)
        builder.add(topic, partition, batch, records)
        if builder.full:
            yield builder.finish()


def read_task(task: Task, *, include_headers: bool = False,
              include_metadata: bool = False, trace_dir: Optional[str] = None) -> Iterator[pa.RecordBatch]:
    """The rows of a task as Arrow record batches of the source schema."""
    builder = ColumnBuilder(include_headers, include_metadata)
    trace_dir = trace_dir or os.environ.get(TRACE_ENV) or None
    traces = []
    for sl in task.slices:
        trace = SliceTrace(sl)
        traces.append(trace)
        yield from _read_slice(sl, builder, trace)
    if builder.rows:
        yield builder.finish()
    if trace_dir:
        path = os.path.join(trace_dir, f"trace-{os.getpid()}.jsonl")
        with open(path, "a", encoding="utf-8") as f:
            for trace in traces:
                f.write(json.dumps(trace.to_dict()) + "\n")
