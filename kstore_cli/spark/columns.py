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

:class:`ColumnBuilder` is the seam for a native columnar decoder: it takes a batch and
the records to export, and hands out ``pyarrow.RecordBatch``es.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

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

    __slots__ = ("include_headers", "include_metadata", "schema", "rows", "batch_bytes",
                 "_keys", "_values", "_topics", "_partitions", "_offsets", "_timestamps", "_ts_types",
                 "_headers", "_epochs", "_pids", "_pepochs", "_sequences", "_txn", "_batch_base", "_codec")

    def __init__(self, include_headers: bool = False, include_metadata: bool = False) -> None:
        self.include_headers = include_headers
        self.include_metadata = include_metadata
        self.schema = arrow_schema(include_headers, include_metadata)
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.batch_bytes = 0
        self._keys: List[Optional[bytes]] = []
        self._values: List[Optional[bytes]] = []
        self._topics: List[str] = []
        self._partitions: List[int] = []
        self._offsets: List[int] = []
        self._timestamps: List[int] = []
        self._ts_types: List[int] = []
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
        return self.rows >= MAX_ROWS or self.batch_bytes >= MAX_BATCH_BYTES

    def add(self, topic: str, partition: int, batch, records: Sequence) -> None:
        """Append `records` (all from `batch`, none of them control records)."""
        n = len(records)
        if not n:
            return
        self.rows += n
        self.batch_bytes += batch.size
        self._keys += [r.key for r in records]
        self._values += [r.value for r in records]
        self._offsets += [r.offset for r in records]
        self._timestamps += [r.timestamp for r in records]
        self._topics += [topic] * n
        self._partitions += [partition] * n
        self._ts_types += [batch.timestamp_type] * n
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

    def finish(self) -> pa.RecordBatch:
        """The collected rows as a record batch of :attr:`schema`; the builder starts over."""
        ts = pc.multiply_checked(pa.array(self._timestamps, pa.int64()), 1000).cast(TIMESTAMP_TYPE)
        arrays = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.array(self._topics, pa.string()),
            pa.array(self._partitions, pa.int32()),
            pa.array(self._offsets, pa.int64()),
            ts,
            pa.array(self._ts_types, pa.int32()),
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
