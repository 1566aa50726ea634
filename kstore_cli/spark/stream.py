"""``spark.readStream.format("kstore")``: Kafka's on-disk logs as a Structured Streaming source.

Its offsets are Kafka's, per partition: ``{"topic": {"0": next_offset, ...}}`` (JSON, checkpointed by Spark).
The first micro-batch starts at each partition's first offset; each ends at the partitions' log end offsets
when Spark asks for the latest (a live broker's half-written tail is not in it); a partition that appears
later starts at its first offset. A micro-batch is planned and read as the batch source reads
(spark/plan.py, spark/read.py), with startingOffsets/endingOffsets set to its range, so
``writeStream.trigger(availableNow=True)`` into a file sink with a checkpointLocation takes, on each run,
exactly what was appended (or what new segments hold) since the last. Offsets retention removed before a
micro-batch read them are not there to read (as Spark's Kafka source with failOnDataLoss=false).
"""

from __future__ import annotations

import json
from typing import Dict, Iterator, Optional, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from kstore_cli.log.log_segment import read_next_offset
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import Task, plan_read, select_partitions
from kstore_cli.spark.read import read_task

Offsets = Dict[str, Dict[str, int]]


class _StreamTask(InputPartition):
    def __init__(self, task: Task) -> None:
        super().__init__(None)
        self.task = task


def log_offsets(options: ReadOptions) -> Dict[str, Dict[str, tuple]]:
    """Per selected partition (first offset, log end offset), as ``{"topic": {"p": (first, end)}}``."""
    out: Dict[str, Dict[str, tuple]] = {}
    for target in select_partitions(options):
        part = target.partition
        if part.segments:
            last = part.segments[-1]
            bounds = (part.segments[0].base_offset, read_next_offset(last.log, last.base_offset))
        else:
            bounds = (0, 0)
        out.setdefault(part.topic, {})[str(part.partition)] = bounds
    return out


class KstoreStreamReader(DataSourceStreamReader):
    """Plans each micro-batch from Kafka offsets (driver); reads its tasks (executors)."""

    def __init__(self, options: Dict[str, str], decoding=None) -> None:
        self.raw = dict(options)
        self.options = ReadOptions(options)
        self.decoding = decoding

    def initialOffset(self) -> Offsets:
        return {t: {p: first for p, (first, _end) in parts.items()} for t, parts in log_offsets(self.options).items()}

    def latestOffset(self, start: Optional[Offsets] = None, limit=None) -> Offsets:
        return {t: {p: end for p, (_first, end) in parts.items()} for t, parts in log_offsets(self.options).items()}

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        starting: Offsets = {}
        ending: Offsets = {}
        for topic, parts in end.items():
            for p, stop in parts.items():
                begin = start.get(topic, {}).get(p, -2)  # a partition new since `start`: from its first offset
                starting.setdefault(topic, {})[p] = min(begin, stop) if begin >= 0 else begin
                ending.setdefault(topic, {})[p] = stop
        # A partition found after `end` was taken waits for the next micro-batch (an empty range here: the
        # offsets JSON must name every partition the source reads, as Spark's Kafka source requires).
        for topic, parts in log_offsets(self.options).items():
            for p, (first, _end) in parts.items():
                if p not in ending.get(topic, {}):
                    starting.setdefault(topic, {})[p] = ending.setdefault(topic, {})[p] = first
        options = dict(self.raw, startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
        tasks = plan_read(ReadOptions(options)).tasks
        return [_StreamTask(task) for task in tasks] or [_StreamTask(Task([]))]

    def read(self, partition: InputPartition) -> Iterator:
        opts = self.options
        batches = read_task(partition.task, include_headers=opts.include_headers,
                            include_metadata=opts.include_metadata, trace_dir=opts.trace_dir)
        if self.decoding is None:
            return batches
        from kstore_cli.spark.decoded import decoded_batches

        return decoded_batches(self.decoding, batches, self.raw.get("deadLetterPath"))

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the logs are read in place, never consumed."""

