"""The ``arrow`` writer of spark-export: each Spark task writes its own Parquet files with pyarrow.

With Spark's own writer every row crosses from the Python worker to the JVM (Arrow IPC), becomes
an UnsafeRow, is sorted by the partition columns and goes through parquet-mr row by row: about
1.2 us of JVM CPU per row, twice what reading and decoding it costs, and on a few cores the JVM
and the Python workers compete for the same CPUs. This writer uses Spark only to schedule the
planned tasks: a task reads its slices (:func:`~kstore_cli.spark.read.read_task`, the same
reader as the data source) and writes each Kafka partition's rows with ``pyarrow.parquet`` into
the same Hive-style layout (``topic=T/partition=P/part-*.parquet``, partition columns kept out of
the files), with the same schema and Parquet types as Spark's writer. Rows never enter the JVM.

Commits work as Spark's default committer (FileOutputCommitter v1) does: a task writes under
``_temporary/<job id>/`` (a hidden name while open, renamed when the task commits), and only when
every task has committed does the driver move the files into place (:func:`commit_job`) and write
``_SUCCESS``; a failed job removes its ``_temporary/<job id>`` (:func:`abort_job`), so it leaves no
partial output for a reader to take as complete. File names are fixed per (job, task, Kafka
partition), so a retried or speculative task attempt replaces its files rather than adding to them.

Runs on executors; imports only pyarrow and this package's pure modules.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from kstore_cli.record import storage
from kstore_cli.spark.columns import arrow_schema
from kstore_cli.spark.plan import Task
from kstore_cli.spark.read import read_task

#: Characters Spark escapes in partition directory names (ExternalCatalogUtils.escapePathName).
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}

#: Key under which Spark keeps its own schema in a Parquet file's metadata.
SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"


def escape_path_name(value: str) -> str:
    """A partition value as Spark writes it in a directory name."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def unescape_path_name(name: str) -> str:
    """A partition value from its directory name (escape_path_name undone)."""
    import re

    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), name)


def filesystem(output: str) -> Tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and root path of `output` (a local path or a URI pyarrow knows)."""
    if storage.is_uri(output):
        return storage.filesystem(output, writing=True)  # with the storage options (--storage-option)
    if output.startswith("file://"):
        output = output[len("file://"):]
    return pafs.LocalFileSystem(), os.path.abspath(output)


def output_info(output: str) -> pafs.FileInfo:
    """The file info of `output`; a remote one's asked as remote inputs are (storage.output_info)."""
    if storage.is_uri(output):
        return storage.output_info(output)
    fs, root = filesystem(output)
    return fs.get_file_info(root)


class WriteJob:
    """What every task needs to write (pickled to the executors with each task)."""

    def __init__(self, output: str, job_id: str, include_headers: bool, include_metadata: bool,
                 partition_by: str, compression: str, spark_metadata: Optional[str] = None,
                 on_corruption: str = "fail", decoding=None) -> None:
        self.output = output
        self.decoding = decoding  # kstore_cli.spark.decoded.Decoding, or None: raw key and value
        self.on_corruption = on_corruption  # "fail" or "skip" (ReadOptions.on_corruption)
        self.job_id = job_id
        self.include_headers = include_headers
        self.include_metadata = include_metadata
        self.partition_by = partition_by  # "topic,partition", "date" or "none"
        self.compression = compression
        self.spark_metadata = spark_metadata
        #: topic and partition kept in the files too (Iceberg takes a file's partition from its columns)
        self.keep_partition_columns = False


def _file_schema(job: WriteJob) -> pa.Schema:
    schema = arrow_schema(job.include_headers, job.include_metadata)
    if job.decoding is not None:
        schema = job.decoding.schema(schema)
    if job.partition_by == "topic,partition" and not getattr(job, "keep_partition_columns", False):
        schema = pa.schema([f for f in schema if f.name not in ("topic", "partition")])
    if job.spark_metadata:
        schema = schema.with_metadata({SPARK_ROW_METADATA: job.spark_metadata})
    return schema


def _groups(task: Task, by_partition: bool) -> List[Tuple[Optional[Tuple[str, int]], Task]]:
    """The task's slices as consecutive runs of one Kafka partition (or all of them)."""
    if not by_partition:
        return [(None, task)]
    out: List[Tuple[Optional[Tuple[str, int]], Task]] = []
    for sl in task.slices:
        key = (sl.scan.topic, sl.scan.partition)
        if out and out[-1][0] == key:
            out[-1][1].slices.append(sl)
        else:
            out.append((key, Task([sl], task.storage)))
    return out


def staging_dir(root: str, job: WriteJob) -> str:
    """Where the job's tasks write their files until the job commits."""
    return f"{root}/_temporary/{job.job_id}"


def commit_job(fs: pafs.FileSystem, root: str, job: WriteJob, written: List[Dict],
               extra: Optional[Dict[str, bytes]] = None) -> None:
    """Move every committed task's files into place, write the `extra` files (name -> bytes, e.g.
    ``_kstore_skipped.json``) and then ``_SUCCESS``, drop the staging directory."""
    staging = staging_dir(root, job)
    for entry in written:
        if "path" not in entry:
            continue  # a skipped batch's record
        final = f"{root}/{entry['path']}"
        fs.create_dir(os.path.dirname(final), recursive=True)
        fs.move(f"{staging}/{entry['path']}", final)
    fs.create_dir(root, recursive=True)
    for name, data in (extra or {}).items():
        write_atomically(fs, f"{root}/{name}", data)
    with fs.open_output_stream(f"{root}/_SUCCESS"):
        pass
    abort_job(fs, root, job)


def read_if_exists(fs: pafs.FileSystem, path: str) -> Optional[bytes]:
    """The bytes of a small file, None when there is none."""
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except (FileNotFoundError, OSError):
        return None


def write_atomically(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a small file under a hidden name, then move it into place (readers see all of it or none)."""
    hidden = f"{os.path.dirname(path)}/.{os.path.basename(path)}.inprogress"
    with fs.open_output_stream(hidden) as f:
        f.write(data)
    fs.move(hidden, path)


def abort_job(fs: pafs.FileSystem, root: str, job: WriteJob) -> None:
    """Remove the job's staging directory (and ``_temporary`` when nothing else is in it)."""
    try:
        fs.delete_dir(staging_dir(root, job))
    except OSError:
        pass
    remove_if_empty(fs, f"{root}/_temporary")


def remove_if_empty(fs: pafs.FileSystem, directory: str) -> None:
    """Remove `directory` when it exists and holds nothing (best effort)."""
    try:
        if not fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
            fs.delete_dir(directory)
    except OSError:
        pass


@lru_cache(maxsize=16)  # once per file schema, not in every task
def dictionary_columns(schema: pa.Schema) -> Tuple[str, ...]:
    """The Parquet column paths dictionary-encoded: the string leaves (a topic, a decoded enum or name repeat
    their values) and a raw key (keys repeat in keyed and compacted topics). Values, offsets, timestamps and
    decoded numbers mostly do not: trying a dictionary on every column first (pyarrow's default) cost a third
    of the write of a decoded export, two fifths of a raw one, and made the files larger, not smaller."""
    sink = io.BytesIO()
    pq.write_table(schema.empty_table(), sink)  # the Parquet schema pyarrow derives (nested paths and all)
    parquet = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return tuple(parquet.column(i).path for i in range(len(parquet))
                 if parquet.column(i).logical_type.type == "STRING" or parquet.column(i).path == "key")


class _Files:
    """The task's open Parquet writers, one per output directory (relative to the output), under
    ``_temporary/<job id>`` and hidden names until the task commits."""

    def __init__(self, job: WriteJob, index: int) -> None:
        self.fs, root = filesystem(job.output)
        self.staging = staging_dir(root, job)
        self.schema = _file_schema(job)
        self.codec = None if job.compression == "none" else job.compression
        self.dictionary = dictionary_columns(self.schema)
        self.job = job
        self.index = index
        self.open: Dict[str, list] = {}  # directory -> [writer, hidden, final, rows]

    def write(self, directory: str, batch: pa.RecordBatch) -> None:
        entry = self.open.get(directory)
        if entry is None:
            suffix = "" if self.codec is None else f".{self.codec}"
            name = f"part-{self.index:05d}-{len(self.open):04d}-{self.job.job_id}.c000{suffix}.parquet"
            final = f"{directory}/{name}" if directory else name
            staged = f"{self.staging}/{directory}" if directory else self.staging
            hidden = f"{staged}/.{name}.inprogress"
            self.fs.create_dir(staged, recursive=True)
            entry = self.open[directory] = [
                pq.ParquetWriter(hidden, self.schema, filesystem=self.fs, compression=self.codec,
                                 use_dictionary=self.dictionary), hidden, final, 0]
        entry[0].write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=self.schema))
        entry[3] += batch.num_rows

    def commit(self) -> List[Dict]:
        out = []
        for writer, hidden, final, rows in self.open.values():
            writer.close()
            staged = f"{self.staging}/{final}"
            self.fs.move(hidden, staged)
            out.append({"path": final, "rows": rows, "bytes": self.fs.get_file_info(staged).size})
        self.open = {}
        return out

    def abort(self) -> None:
        for writer, hidden, _final, _rows in self.open.values():
            try:
                writer.close()
                self.fs.delete_file(hidden)
            except OSError:
                pass
        self.open = {}


def _by_date(batch: pa.RecordBatch) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """(date=YYYY-MM-DD, rows) runs of a batch: the timestamp's UTC date, as Spark's to_date."""
    import pyarrow.compute as pc

    dates = batch.column("timestamp").cast(pa.date32())
    for day in pc.unique(dates).to_pylist():
        rows = batch.filter(pc.equal(dates, pa.scalar(day, pa.date32())))
        yield f"date={day.isoformat()}", rows


def write_task(job: WriteJob, index: int, task: Task) -> List[Dict]:
    """Write one planned task's rows; one summary per Parquet file written (none without rows),
    then one ``{"skipped": ...}`` per batch left out (``on_corruption`` skip)."""
    files = _Files(job, index)
    skipped: Optional[list] = [] if job.on_corruption == "skip" else None
    letters = None
    if job.decoding is not None:
        from kstore_cli.spark.decoded import DeadLetterFile

        letters = DeadLetterFile(job.decoding, files.fs, files.staging, f"part-{index:05d}-{job.job_id}", files.codec)
    try:
        for key, group in _groups(task, job.partition_by == "topic,partition"):
            for batch in read_task(group, include_headers=job.include_headers,
                                   include_metadata=job.include_metadata, skipped=skipped):
                if letters is not None:
                    batch = letters.decode(batch)
                if not batch.num_rows:
                    continue
                if key is not None:
                    files.write(f"topic={escape_path_name(key[0])}/partition={key[1]}", batch
                                if getattr(job, "keep_partition_columns", False) else batch.drop_columns(["topic", "partition"]))
                elif job.partition_by == "date":
                    for name, rows in _by_date(batch):
                        files.write(name, rows)
                else:
                    files.write("", batch)
        dead = letters.commit() if letters is not None else []
        return files.commit() + dead + [{"skipped": b.to_dict()} for b in skipped or ()]
    except BaseException:
        files.abort()
        if letters is not None:
            letters.abort()
        raise


def write_partition(job: WriteJob, indexed: Iterable[Tuple[int, Task]]) -> Iterator[Dict]:
    """mapPartitions body: the (index, task) pairs of one Spark partition."""
    for index, task in indexed:
        storage.configure(task.storage)
        yield from write_task(job, index, task)
