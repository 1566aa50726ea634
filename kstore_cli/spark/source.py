"""The ``kstore`` Spark Python data source: Kafka log directories as a DataFrame.

    from kstore_cli.spark import register
    register(spark)                      # ships kstore to the executors, registers "kstore"
    df = (spark.read.format("kstore")
          .option("startingOffsets", '{"orders":{"0":1000,"1":-2}}')
          .option("kafka.isolation.level", "read_committed")
          .load("/var/lib/kafka/data"))

Planning (:mod:`.plan`) happens once on the driver; every input partition is a
:class:`~kstore_cli.spark.plan.Task` of segment byte ranges, read on an executor by
:func:`~kstore_cli.spark.read.read_task`, which yields Arrow record batches.

Filter pushdown (``spark.sql.python.filterPushdown.enabled=true`` and the source option
``filterPushdown=true``; Spark rejects a reader with pushFilters when the setting is off): AND-ed conditions on
``topic`` (=, IN, LIKE 'x%'), ``partition`` and ``offset`` (=, IN, <, <=, >, >=) are
applied exactly and prune partitions, segments and index ranges; ``timestamp`` bounds
prune segments (time index) and batches (max timestamp), filter records, and are still
checked by Spark afterwards.
"""

from __future__ import annotations

import datetime
from typing import Iterable, Iterator, List, Optional

from pyspark.accumulators import AccumulatorParam
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from kstore_cli.spark.columns import spark_ddl
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import Pushed, Task, plan_read
from kstore_cli.spark.read import SkippedBatch, read_task

NAME = "kstore"


class TaskPartition(InputPartition):
    """A Spark input partition holding one planned task."""

    def __init__(self, task: Task) -> None:
        super().__init__(None)
        self.task = task

    def __repr__(self) -> str:
        return f"TaskPartition({self.task!r})"


def _micros(value: object) -> Optional[int]:
    """A pushed timestamp literal as microseconds since the epoch (None when not a timestamp)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            # Spark hands TIMESTAMP literals to Python as naive local datetimes.
            value = value.astimezone()
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _int_literal(value: object) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def push_filter(pushed: Pushed, f: Filter) -> bool:
    """Record one filter in `pushed`; True when it is applied exactly (Spark can drop it)."""
    column = f.attribute if hasattr(f, "attribute") else None
    if not column or len(column) != 1:
        return False
    name = column[0].lower()
    if name == "topic":
        return _push_topic(pushed, f)
    if name in ("partition", "offset"):
        return _push_position(pushed, f, name)
    if name == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
        _push_timestamp(pushed, f)
        return False  # pruned and filtered here, and still checked by Spark
    return False


def _push_topic(pushed: Pushed, f: Filter) -> bool:
    if isinstance(f, EqualTo) and isinstance(f.value, str):
        pushed.intersect_topics([f.value])
        return True
    if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        pushed.intersect_topics(f.value)
        return True
    return False  # StringStartsWith etc.: Spark evaluates it


def _push_position(pushed: Pushed, f: Filter, name: str) -> bool:
    """A filter on ``partition`` or ``offset`` (`name`): integer literals only."""
    if isinstance(f, In):
        values = [_int_literal(v) for v in f.value]
        if any(v is None for v in values):
            return False
        if name == "partition":
            pushed.intersect_partitions(values)
        else:
            pushed.intersect_offsets(values)
        return True
    if not isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
        return False
    v = _int_literal(f.value)
    if v is None:
        return False
    if name == "partition":
        if isinstance(f, EqualTo):
            pushed.intersect_partitions([v])
        else:
            lo = v + 1 if isinstance(f, GreaterThan) else v if isinstance(f, GreaterThanOrEqual) else None
            hi = v - 1 if isinstance(f, LessThan) else v if isinstance(f, LessThanOrEqual) else None
            if lo is not None:
                pushed.partition_lo = lo if pushed.partition_lo is None else max(pushed.partition_lo, lo)
            if hi is not None:
                pushed.partition_hi = hi if pushed.partition_hi is None else min(pushed.partition_hi, hi)
        return True
    if isinstance(f, EqualTo):
        pushed.intersect_offsets([v])
    elif isinstance(f, GreaterThan):
        pushed.lower_offset(v + 1)
    elif isinstance(f, GreaterThanOrEqual):
        pushed.lower_offset(v)
    elif isinstance(f, LessThan):
        pushed.upper_offset(v)
    else:
        pushed.upper_offset(v + 1)
    return True


def _push_timestamp(pushed: Pushed, f: Filter) -> None:
    """A bound on ``timestamp``: narrows the pushed time range (records are ms, the literal us)."""
    us = _micros(f.value)
    if us is None:
        return
    # Exact in integers: a record's timestamp is ms * 1000 us.
    if isinstance(f, GreaterThan):
        lo, hi = us // 1000 + 1, None
    elif isinstance(f, GreaterThanOrEqual):
        lo, hi = -(-us // 1000), None
    elif isinstance(f, LessThan):
        lo, hi = None, -(-us // 1000) - 1
    else:
        lo, hi = None, us // 1000
    if lo is not None:
        pushed.ts_lo = lo if pushed.ts_lo is None else max(pushed.ts_lo, lo)
    if hi is not None:
        pushed.ts_hi = hi if pushed.ts_hi is None else min(pushed.ts_hi, hi)


class SkippedParam(AccumulatorParam):
    """Accumulates the skipped batches of reads with ``onCorruption=skip`` (a list of dicts)."""

    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, value1: list, value2: list) -> list:
        value1.extend(value2)
        return value1


def skipped_accumulator(spark):
    """An accumulator for the batches reads with ``onCorruption=skip`` leave out.

    Give its id to the reader, ``.option("skippedAccumulator", str(acc.aid))``; once the action
    has run, ``acc.value`` lists them (dicts: topic, partition, file, position, bytes,
    baseOffset, lastOffset, reason; a retried task may list a batch twice). Without it, each
    skipped batch is one ``kstore: skipped ...`` line on the executor's stderr."""
    return spark.sparkContext.accumulator([], SkippedParam())


def _reporting_skips(task: Task, opts: ReadOptions) -> Iterator:
    """read_task with skipping, then the skipped batches reported (accumulator, or stderr lines)."""
    import sys

    skipped: List[SkippedBatch] = []
    yield from read_task(task, include_headers=opts.include_headers, include_metadata=opts.include_metadata,
                         trace_dir=opts.trace_dir, skipped=skipped)
    if not skipped:
        return
    if opts.skipped_accumulator is not None:
        # What unpickling an Accumulator does in a task: the worker sends its value to the driver
        # when the task ends (and Spark keeps the updates of successful tasks only).
        from pyspark.accumulators import _deserialize_accumulator

        _deserialize_accumulator(opts.skipped_accumulator, [], SkippedParam()).add([b.to_dict() for b in skipped])
        return
    for b in skipped:
        print(f"kstore: skipped {b.text()}", file=sys.stderr, flush=True)


class KstoreReader(DataSourceReader):
    """Plans on the driver (partitions), reads on executors (read)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed = Pushed()

    def partitions(self) -> List[InputPartition]:
        plan = plan_read(self.options, self.pushed)
        # Spark reads one default partition when given none: hand it an empty task.
        return [TaskPartition(task) for task in plan.tasks] or [TaskPartition(Task([]))]

    def read(self, partition: InputPartition) -> Iterator:
        opts = self.options
        if opts.on_corruption != "skip":
            batches = read_task(partition.task, include_headers=opts.include_headers,
                                include_metadata=opts.include_metadata, trace_dir=opts.trace_dir)
        else:
            batches = _reporting_skips(partition.task, opts)
        decoding = getattr(self, "decoding", None)  # keyFormat/valueFormat: kstore_cli.spark.decoded
        if decoding is None:
            return batches
        from kstore_cli.spark.decoded import decoded_batches

        return decoded_batches(decoding, batches, getattr(self, "dead_letter_path", None))


class KstorePushdownReader(KstoreReader):
    """The reader with ``pushFilters``, used with the ``filterPushdown`` option.

    Spark refuses a reader that implements pushFilters while
    ``spark.sql.python.filterPushdown.enabled`` is false (its default), so pushdown is
    opt-in twice: that setting, and ``.option("filterPushdown", "true")``.
    """

    def pushFilters(self, filters: List[Filter]) -> Iterable[Filter]:
        # Spark may plan several queries with one reader: each push starts afresh.
        self.pushed = Pushed()
        for f in filters:
            if not push_filter(self.pushed, f):
                yield f


class KstoreDataSource(DataSource):
    """``spark.read.format("kstore")``: Kafka's on-disk logs with Spark's Kafka source schema."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        opts = ReadOptions(self.options)
        from kstore_cli.spark.decoded import source_decoding, spark_schema

        decoding = source_decoding(self.options)
        if decoding is not None:
            from kstore_cli.spark.columns import arrow_schema

            return spark_schema(decoding, arrow_schema(opts.include_headers, opts.include_metadata))
        return spark_ddl(opts.include_headers, opts.include_metadata)

    def streamReader(self, schema):
        """``spark.readStream.format("kstore")``: micro-batches by Kafka offsets (kstore_cli.spark.stream)."""
        from kstore_cli.spark.decoded import source_decoding
        from kstore_cli.spark.stream import KstoreStreamReader

        return KstoreStreamReader(self.options, source_decoding(self.options))

    def reader(self, schema) -> DataSourceReader:
        from kstore_cli.spark.decoded import source_decoding

        options = ReadOptions(self.options)
        reader = KstorePushdownReader(options) if options.filter_pushdown else KstoreReader(options)
        reader.decoding = source_decoding(self.options)
        reader.dead_letter_path = {str(k).lower(): v for k, v in self.options.items()}.get("deadletterpath")
        return reader
