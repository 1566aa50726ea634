"""The one place where decoded batches become Arrow columns, and the schema they follow.

The schema is Spark's Kafka source schema, same names, types and order::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int
    [, headers array<struct<key:string,value:binary>>]          includeHeaders
    [, leaderEpoch int, producerId long, producerEpoch short, sequence int,
       isTransactional boolean, batchBaseOffset long, compression string]   includeMetadata

Kafka timestamps are milliseconds; Spark's are microseconds (``timestamp[us, tz=UTC]``
in Arrow): a record's value is exactly ms * 1000. A timestamp of -1 (magic v0, no
timestamp) becomes -1000 us, as Spark's Kafka source turns it into 1969-12-31
23:59:59.999; timestampType is then -1. ``headers`` is null when a record has none, as
Spark does. ``leaderEpoch`` is null when the batch has none (-1, and legacy batches).

:class:`ColumnBuilder` is where the record decoder's columnar mode lands: key, value, offset and
timestamp are kept as Arrow buffers (int64 offsets and timestamps, int32 ends, concatenated bytes,
validity), filled either straight from a whole v2 batch by ``decode.decode_v2_columns`` (no Python
object per record; :meth:`ColumnBuilder.add_batch`) or from decoded records (:meth:`ColumnBuilder.add`,
for filtered, legacy and header/metadata exports). Both give the same arrays.
"""

from __future__ import annotations

from array import array
from itertools import accumulate
from typing import List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from kstore_cli.record import decode
from kstore_cli.record.columns import RecordColumns

KAFKA_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"
METADATA_DDL = (
    "leaderEpoch int, producerId long, producerEpoch short, sequence int, isTransactional boolean, "
    "batchBaseOffset long, compression string"
)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

_KAFKA_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
_METADATA_FIELDS = [
    pa.field("leaderEpoch", pa.int32()),
    pa.field("producerId", pa.int64()),
    pa.field("producerEpoch", pa.int16()),
    pa.field("sequence", pa.int32()),
    pa.field("isTransactional", pa.bool_()),
    pa.field("batchBaseOffset", pa.int64()),
    pa.field("compression", pa.string()),
]

#: Rows per Arrow batch handed to Spark.
MAX_ROWS = 65536
#: Batch bytes (as on disk) per Arrow batch handed to Spark.
MAX_BATCH_BYTES = 32 * 1024 * 1024
#: Key or value bytes per Arrow batch (binary arrays have int32 offsets: stay far below 2 GiB).
MAX_DATA_BYTES = 512 * 1024 * 1024
_INT32_ZERO = array("i", [0]).tobytes()


def spark_ddl(include_headers: bool = False, include_metadata: bool = False) -> str:
    """The Spark schema as a DDL string."""
    parts = [KAFKA_DDL]
    if include_headers:
        parts.append(HEADERS_DDL)
    if include_metadata:
        parts.append(METADATA_DDL)
    return ", ".join(parts)


def arrow_schema(include_headers: bool = False, include_metadata: bool = False) -> pa.Schema:
    """The Arrow schema matching :func:`spark_ddl` exactly."""
    fields = list(_KAFKA_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    if include_metadata:
        fields.extend(_METADATA_FIELDS)
    return pa.schema(fields)


class ColumnBuilder:
    """Collects records batch by batch; :meth:`finish` returns them as one Arrow record batch."""

    __slots__ = ("include_headers", "include_metadata", "schema", "rows", "batch_bytes", "columnar",
                 "_offsets", "_timestamps", "_key_ends", "_key_data", "_key_valid", "_key_size",
                 "_value_ends", "_value_data", "_value_valid", "_value_size",
                 "_topics", "_partitions", "_ts_types",
                 "_headers", "_epochs", "_pids", "_pepochs", "_sequences", "_txn", "_batch_base", "_codec")

    def __init__(self, include_headers: bool = False, include_metadata: bool = False) -> None:
        self.include_headers = include_headers
        self.include_metadata = include_metadata
        self.schema = arrow_schema(include_headers, include_metadata)
        #: Whole v2 batches can go through the columnar mode (no per-record columns asked for).
        self.columnar = not include_headers and not include_metadata
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.batch_bytes = 0
        # Pieces of Arrow buffers, joined by finish().
        self._offsets: List[bytes] = []
        self._timestamps: List[bytes] = []
        self._key_ends: List[bytes] = []
        self._key_data: List[bytes] = []
        self._key_valid: List[bytes] = []
        self._key_size = 0
        self._value_ends: List[bytes] = []
        self._value_data: List[bytes] = []
        self._value_valid: List[bytes] = []
        self._value_size = 0
        # Runs of (value, rows): a task's rows come from few partitions.
        self._topics: List[Tuple[str, int]] = []
        self._partitions: List[Tuple[int, int]] = []
        self._ts_types: List[bytes] = []
        self._headers: list = []
        self._epochs: list = []
        self._pids: List[int] = []
        self._pepochs: List[int] = []
        self._sequences: List[int] = []
        self._txn: List[bool] = []
        self._batch_base: List[int] = []
        self._codec: List[str] = []

    @property
    def full(self) -> bool:
        return (self.rows >= MAX_ROWS or self.batch_bytes >= MAX_BATCH_BYTES
                or self._key_size >= MAX_DATA_BYTES or self._value_size >= MAX_DATA_BYTES)

    def _piece(self, n: int, offsets: bytes, timestamps: bytes, key_ends: bytes, key_data: bytes, key_valid: bytes,
               value_ends: bytes, value_data: bytes, value_valid: bytes) -> None:
        self._offsets.append(offsets)
        self._timestamps.append(timestamps)
        self._key_ends.append(key_ends)
        self._key_data.append(key_data)
        self._key_valid.append(key_valid)
        self._key_size += len(key_data)
        self._value_ends.append(value_ends)
        self._value_data.append(value_data)
        self._value_valid.append(value_valid)
        self._value_size += len(value_data)

    def _per_batch(self, topic: str, partition: int, batch, n: int) -> None:
        self._per_rows(topic, partition, batch.size, n, array("i", [batch.timestamp_type]).tobytes() * n)

    def _per_rows(self, topic: str, partition: int, size: int, n: int, ts_types: bytes) -> None:
        self.rows += n
        self.batch_bytes += size
        if self._topics and self._topics[-1][0] == topic and self._partitions[-1][0] == partition:
            self._topics[-1] = (topic, self._topics[-1][1] + n)
            self._partitions[-1] = (partition, self._partitions[-1][1] + n)
        else:
            self._topics.append((topic, n))
            self._partitions.append((partition, n))
        self._ts_types.append(ts_types)

    def add_run(self, topic: str, partition: int, run: RecordColumns) -> None:
        """Append a run of plain batches decoded by ``read_columns`` (the builder must be :attr:`columnar`)."""
        self._piece(run.rows, run.offsets, run.timestamps, self._rebased(run.key_ends, self._key_size), run.key_data,
                    run.key_valid, self._rebased(run.value_ends, self._value_size), run.value_data, run.value_valid)
        self._per_rows(topic, partition, run.stop - run.position, run.rows, run.timestamp_types)

    @staticmethod
    def _rebased(ends: bytes, base: int):
        """int32 ends counted from 0 made ends counted from base (the data already collected)."""
        if not base:
            return ends
        if base + (array("i", ends[-4:])[0] if ends else 0) > 0x7FFFFFFF:
            raise OverflowError("more than 2 GiB of keys or values in one Arrow array")
        arr = pa.Array.from_buffers(pa.int32(), len(ends) // 4, [None, pa.py_buffer(ends)])
        return pc.add(arr, pa.scalar(base, pa.int32())).buffers()[1]

    def add_batch(self, topic: str, partition: int, batch, start: Optional[int] = None,
                  end: Optional[int] = None) -> Optional[int]:
        """Append every record of v2 `batch` through the columnar mode: the rows added, or None
        when the batch needs :meth:`add` instead (some record outside ``[start, end)``, or a
        builder with headers/metadata). Raises what ``batch.records()`` raises."""
        if not self.columnar or batch.is_legacy:
            return None
        piece = batch.columns(self._key_size, self._value_size)
        n = piece[0]
        if not n:
            return 0
        if start is not None or end is not None:
            offsets = array("q", piece[1])
            if (start is not None and min(offsets) < start) or (end is not None and max(offsets) >= end):
                return None
        self._piece(*piece)
        self._per_batch(topic, partition, batch, n)
        return n

    def add(self, topic: str, partition: int, batch, records: Sequence) -> None:
        """Append `records` (all from `batch`, none of them control records)."""
        n = len(records)
        if not n:
            return
        keys = [r.key for r in records]
        values = [r.value for r in records]
        self._piece(
            n,
            array("q", [r.offset for r in records]).tobytes(),
            array("q", [r.timestamp for r in records]).tobytes(),
            *self._binary_piece(keys, self._key_size),
            *self._binary_piece(values, self._value_size),
        )
        self._per_batch(topic, partition, batch, n)
        if self.include_headers:
            if batch.is_legacy:
                self._headers += [None] * n
            else:
                self._headers += [[(h.key, h.value) for h in r.headers] or None for r in records]
        if self.include_metadata:
            epoch = batch.partition_leader_epoch
            self._epochs += [None if epoch < 0 else epoch] * n
            self._pids += [batch.producer_id] * n
            self._pepochs += [batch.producer_epoch] * n
            self._sequences += [r.sequence for r in records]
            self._txn += [bool(batch.is_transactional)] * n
            self._batch_base += [records[0].offset if batch.is_legacy else batch.base_offset] * n
            self._codec += [batch.compression_name] * n

    @staticmethod
    def _binary_piece(items: List[Optional[bytes]], base: int) -> tuple:
        ends = array("i", accumulate((0 if b is None else len(b) for b in items), initial=base))
        del ends[0]
        return ends.tobytes(), b"".join(b for b in items if b is not None), bytes(b is not None for b in items)

    @staticmethod
    def _binary(n: int, ends: List[bytes], data: List[bytes], valid: List[bytes]) -> pa.Array:
        bitmap, nulls = decode.pack_validity(b"".join(valid))
        return pa.Array.from_buffers(
            pa.binary(), n,
            [pa.py_buffer(bitmap) if nulls else None, pa.py_buffer(_INT32_ZERO + b"".join(ends)),
             pa.py_buffer(b"".join(data))],
            null_count=nulls,
        )

    def finish(self) -> pa.RecordBatch:
        """The collected rows as a record batch of :attr:`schema`; the builder starts over."""
        n = self.rows
        offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(b"".join(self._offsets))])
        ts = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(b"".join(self._timestamps))])
        ts = pc.multiply_checked(ts, 1000).cast(TIMESTAMP_TYPE)
        arrays = [
            self._binary(n, self._key_ends, self._key_data, self._key_valid),
            self._binary(n, self._value_ends, self._value_data, self._value_valid),
            _repeated(self._topics, pa.string()),
            _repeated(self._partitions, pa.int32()),
            offsets,
            ts,
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(b"".join(self._ts_types))]),
        ]
        if self.include_headers:
            arrays.append(pa.array(self._headers, HEADER_TYPE))
        if self.include_metadata:
            arrays += [
                pa.array(self._epochs, pa.int32()),
                pa.array(self._pids, pa.int64()),
                pa.array(self._pepochs, pa.int16()),
                pa.array(self._sequences, pa.int32()),
                pa.array(self._txn, pa.bool_()),
                pa.array(self._batch_base, pa.int64()),
                pa.array(self._codec, pa.string()),
            ]
        out = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return out


def _repeated(runs: List[tuple], type_: pa.DataType) -> pa.Array:
    """An array of `type_` from runs of (value, count)."""
    if not runs:
        return pa.array([], type_)
    return pa.concat_arrays([pa.repeat(pa.scalar(value, type_), count) for value, count in runs])
