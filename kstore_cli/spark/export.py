"""The export job: Kafka log directories to Parquet through the ``kstore`` data source.

:func:`run_export` starts a session (``local[*]`` by default), ships kstore to the
executors, registers the source and writes Parquet; :func:`export_with` does the same
with a session the caller owns (tests, notebooks). Both return an :class:`ExportSummary`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from kstore_cli import errors
from kstore_cli.errors import CorruptDataError, ExitStatus, FileUnreadableError, KstoreError, UsageError
from kstore_cli.spark.options import ON_CORRUPTION, ReadOptions
from kstore_cli.spark.plan import Plan, plan_read
from kstore_cli.spark.read import SkippedBatch, skipped_of, unique_skipped
from kstore_cli.spark.session import build_session, check_java

PARTITION_BY = {"topic,partition": ["topic", "partition"], "date": ["date"], "none": []}
PARQUET_COMPRESSION = ("snappy", "zstd", "gzip", "none")
MODES = {"error": "errorifexists", "overwrite": "overwrite", "append": "append"}
#: Beside ``_SUCCESS``: the batches an export with ``--on-corruption skip`` left out.
SKIPPED_FILE = "_kstore_skipped.json"
#: Who writes the Parquet files: Spark's writer (rows go through the JVM), each task with pyarrow, or
#: auto: arrow where it writes what Spark's writer would (see ExportRequest.writer), else Spark's.
WRITERS = ("auto", "spark", "arrow")
#: --spark-conf keys only Spark's writer reads (Parquet writer, file-source and Hadoop settings): with
#: one of them, auto picks Spark's writer so that the setting is honoured.
SPARK_WRITER_SETTINGS = ("spark.sql.parquet.", "spark.sql.sources.", "spark.sql.files.", "spark.hadoop.",
                         "spark.sql.hive.")

#: Outputs the arrow writer takes under auto: local, and pyarrow's own object stores (credentials as for
#: remote inputs, --storage-option); Hadoop's (s3a://, hdfs://, abfs://, wasb://...) go to Spark's writer.
ARROW_OUTPUT_SCHEMES = ("file://", "s3://", "gs://", "gcs://")
#: Task size of the arrow writer (Spark's file-source default, maxPartitionBytes). Its tasks stream rows
#: to pyarrow without sorting them, so larger tasks only save Spark's ~20 ms between tasks: local[1]
#: 0.67 -> 0.63 s for 2 M rows. Spark's writer keeps the source's 64 MiB.
ARROW_MAX_BYTES_PER_TASK = 128 * 1024 * 1024

class SparkJobError(KstoreError):
    """The Spark job failed (the first line of Spark's error; kstore's own errors are raised as themselves)."""


class NothingToExportError(KstoreError):
    """The PATHs and the topic options select no Kafka partition (exit 1, before Spark starts)."""


def _arrow_dates_hold(partition_by: str, time_zone: Optional[str]) -> bool:
    """Whether the arrow writer's directories match Spark's: it takes a record's date in UTC, Spark's
    writer in the session time zone (None: not set, UTC)."""
    return partition_by != "date" or time_zone in (None, "UTC", "Z")


class ExportRequest:
    """What to export, where, and how."""

    def __init__(self, paths: Sequence[str], output: str, *, master: str = "local[*]", topics: Optional[str] = None,
                 starting_offsets: Optional[str] = None, ending_offsets: Optional[str] = None,
                 starting_timestamp: Optional[int] = None, ending_timestamp: Optional[int] = None,
                 isolation_level: str = "read_uncommitted", include_headers: bool = False,
                 include_metadata: bool = False, partition_by: str = "topic,partition",
                 parquet_compression: str = "snappy", mode: Optional[str] = None,
                 spark_conf: Optional[Dict[str, str]] = None, max_bytes_per_partition: Optional[int] = None,
                 extra_options: Optional[Dict[str, str]] = None, progress: bool = False,
                 writer: str = "auto", on_corruption: str = "fail", key_format: str = "binary",
                 value_format: str = "binary", schemas_from: Optional[str] = None,
                 reader_schema: Optional[str] = None, engine: str = "spark", jobs: Optional[int] = None,
                 storage_options: Optional[Dict[str, str]] = None, incremental: Optional[str] = None,
                 table_format: str = "parquet") -> None:
        if partition_by not in PARTITION_BY:
            raise UsageError(f"--partition-by must be one of {', '.join(PARTITION_BY)}, not {partition_by!r}")
        if parquet_compression not in PARQUET_COMPRESSION:
            raise UsageError(f"--parquet-compression must be one of {', '.join(PARQUET_COMPRESSION)}")
        if mode is not None and mode not in MODES:
            raise UsageError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
        if on_corruption not in ON_CORRUPTION:
            raise UsageError(f"--on-corruption must be one of {', '.join(ON_CORRUPTION)}, not {on_corruption!r}")
        if writer not in WRITERS:
            raise UsageError(f"--writer must be one of {', '.join(WRITERS)}, not {writer!r}")
        self.paths = [os.path.abspath(p) if "://" not in p else p for p in paths]
        self.output = output
        self.master = master
        self.topics = topics
        self.starting_offsets = starting_offsets
        self.ending_offsets = ending_offsets
        self.starting_timestamp = starting_timestamp
        self.ending_timestamp = ending_timestamp
        self.isolation_level = isolation_level
        self.include_headers = include_headers
        self.include_metadata = include_metadata
        self.partition_by = partition_by
        self.parquet_compression = parquet_compression
        #: error (the default: an existing output is refused), overwrite or append
        self.mode = mode or "error"
        self.on_corruption = on_corruption
        #: --incremental STATE_DIR (spark/incremental.py): each run exports what is new since the last
        self.incremental = incremental
        #: --format: parquet files, or a Delta table (spark/tables.py)
        self.table_format = _table_format(table_format, incremental)
        #: Decoded columns (kstore_cli.spark.decoded): formats, the store's partition, the reader schema.
        self.formats = (key_format, value_format, schemas_from, reader_schema)
        self.spark_conf = dict(spark_conf or {})
        self.max_bytes_per_partition = max_bytes_per_partition
        self.extra_options = dict(extra_options or {})
        self.extra_options.update({f"storage.{k}": v for k, v in (storage_options or {}).items()})
        self.progress = progress
        self.requested_writer = writer
        #: The writer this export uses ("spark" or "arrow"; auto resolved).
        self.writer = writer if writer != "auto" else self._auto_writer()
        from kstore_cli.spark.engines import check_engine

        #: Who runs the tasks: "spark" or "arrow" (local processes, no JVM; `jobs` of them, default the cores)
        self.engine, self.jobs = check_engine(self, engine, jobs)

    def _auto_writer(self) -> str:
        """arrow for a local output, unless a setting asks for what only Spark's writer does.

        The arrow writer writes the same directories, schema and rows, and commits as Spark's default
        committer does, at a quarter of the CPU; also to s3:// and gs:// (pyarrow's filesystems, as remote
        inputs). Other URIs go to Spark's writer: it writes through Hadoop's filesystems and credentials
        (s3a://, hdfs://, abfs://), which pyarrow does not share."""
        if any(key.startswith(SPARK_WRITER_SETTINGS) for key in self.spark_conf):
            return "spark"
        if not _arrow_dates_hold(self.partition_by, self.spark_conf.get("spark.sql.session.timeZone")):
            return "spark"
        if "://" in self.output and not self.output.startswith(ARROW_OUTPUT_SCHEMES):
            return "spark"
        return "arrow"

    def reader_options(self, min_partitions: Optional[int] = None) -> Dict[str, str]:
        """The data source options (Spark's Kafka-source names where they exist)."""
        import json

        opts: Dict[str, str] = {"paths": json.dumps(self.paths), "kafka.isolation.level": self.isolation_level,
                                "includeHeaders": str(self.include_headers).lower(),
                                "includeMetadata": str(self.include_metadata).lower()}
        if self.topics:
            opts["topics"] = self.topics
        if self.starting_offsets:
            opts["startingOffsets"] = self.starting_offsets
        if self.ending_offsets:
            opts["endingOffsets"] = self.ending_offsets
        if self.starting_timestamp is not None:
            opts["startingTimestamp"] = str(self.starting_timestamp)
        if self.ending_timestamp is not None:
            opts["endingTimestamp"] = str(self.ending_timestamp)
        if min_partitions:
            opts["minPartitions"] = str(min_partitions)
        if self.on_corruption != "fail":
            opts["onCorruption"] = self.on_corruption
        opts.update({k: v for k, v in zip(("keyFormat", "valueFormat", "schemasFrom"), self.formats) if v})
        max_bytes = self.max_bytes_per_partition or (ARROW_MAX_BYTES_PER_TASK if self.writer == "arrow" else None)
        if max_bytes:
            opts["maxBytesPerPartition"] = str(max_bytes)
        opts.update(self.extra_options)
        return opts

    def validate(self) -> Plan:
        """Parse the options, plan the read and check the output, in this process, before Spark starts:
        UsageError (exit 2) for options and an existing output without --mode, NothingToExportError
        (exit 1) when no partition is selected."""
        plan = plan_read(ReadOptions(self.reader_options()))
        if self.formats[:2] != ("binary", "binary") and self.writer != "arrow":
            raise UsageError("--key-format/--value-format other than binary are written by the arrow writer "
                             "(--writer arrow, a local --output)")
        if self.formats[:2] != ("binary", "binary") and plan.scans:  # store and reader schemas before Spark
            from kstore_cli.spark.decoded import build_decoding

            self.decoding = build_decoding(self.paths, sorted({s.topic for s in plan.scans}), *self.formats[:2],
                                           schemas_from=self.formats[2], reader_schema=self.formats[3])
        if not plan.scans:
            where = " ".join(self.paths)
            why = f" matches --topics {self.topics!r}" if self.topics else ""
            message = f"nothing to export: no Kafka partition under {where}{why}"
            if plan.internal_left_out:
                message += (f" (internal topics are exported only when named: --topics "
                            f"'{plan.internal_left_out[0].rsplit('-', 1)[0]}')")
            raise NothingToExportError(message)
        if "://" not in self.output or self.output.startswith("file://"):
            from kstore_cli.log.scope import check_output_dir

            # A local output: never in an input nor a Kafka data dir (--mode overwrite would replace it).
            check_output_dir(self.output[len("file://"):] if self.output.startswith("file://") else self.output,
                             option="--output", inputs=self.paths)
        if self.incremental and self.mode == "overwrite":
            raise UsageError("--incremental adds each run's records to --output; --mode overwrite would remove "
                             "the earlier runs' (start a new STATE_DIR and output instead)")
        if self.mode == "error" and not self.incremental and self.table_format == "parquet" \
                and _output_exists(self.output):
            raise UsageError(f"{self.output} already exists: use --mode overwrite to replace it, "
                             f"or --mode append to add to it")
        return plan


def _table_format(table_format: str, incremental: Optional[str]) -> str:
    if table_format not in ("parquet", "delta", "iceberg"):
        raise UsageError(f"--format must be parquet, delta or iceberg, not {table_format!r}")
    if table_format != "parquet" and incremental:
        raise UsageError(f"--format {table_format} is incremental itself (it starts after the table's highest "
                         "offsets): drop --incremental")
    return table_format


class ExportSummary:
    """What an export did."""

    def __init__(self) -> None:
        self.kafka_partitions = 0
        self.tasks = 0
        self.records = 0
        self.bytes_in = 0
        self.parquet_files = 0
        self.parquet_bytes = 0
        self.seconds = 0.0
        self.output = ""
        self.writer = ""
        self.engine = "spark"
        #: batches left out with --on-corruption skip (the export then exits 1)
        self.skipped: List[SkippedBatch] = []
        #: internal topics' partitions not exported because nothing named them
        self.internal_left_out: List[str] = []
        #: records that did not decode (--key-format/--value-format), in _kstore_dead_letters/ (exit 1)
        self.dead_letters = 0
        #: --incremental: offsets that were not (and will not be) exported (spark/incremental.py, exit 1)
        self.gaps: List[Any] = []
        #: --incremental: the state dir, run number, job id, a recovered run's job id
        self.incremental: Optional[Dict[str, Any]] = None
        #: --format delta: the table's commit (files added, partitions it held before); lines on it (spark/tables.py)
        self.table: Optional[Dict[str, Any]] = None
        self.table_notes: List[str] = []

    def to_dict(self) -> dict:
        return {"type": "summary", "kafka_partitions": self.kafka_partitions, "spark_partitions": self.tasks, "records": self.records,
                "bytes_in": self.bytes_in, "parquet_files": self.parquet_files, "parquet_bytes": self.parquet_bytes,
                "seconds": round(self.seconds, 3), "output": self.output, "writer": self.writer, "engine": self.engine,
                "skipped_batches": [b.to_dict(snake_case=True) for b in self.skipped],
                "internal_partitions_left_out": list(self.internal_left_out), "dead_letters": self.dead_letters,
                **({"incremental": dict(self.incremental, gaps=[g.to_dict() for g in self.gaps])}
                   if self.incremental is not None else {}),
                **({"table": self.table} if self.table is not None else {})}

    def text(self, size: Optional[Callable[[int], str]] = None) -> str:
        """The summary line (then the notes); `size` spells the byte counts (a terminal's human units)."""
        rate = self.records / self.seconds if self.seconds else 0.0
        sizes = (f"{size(self.bytes_in)} in, {size(self.parquet_bytes)} of Parquet out" if size else
                 f"{self.bytes_in} bytes in, {self.parquet_bytes} Parquet bytes out")
        return (f"exported {_count(self.records, 'record')} from {_count(self.kafka_partitions, 'Kafka partition')} "
                f"({_count(self.tasks, 'Spark partition' if self.engine == 'spark' else 'task')}): {sizes} "
                f"in {_count(self.parquet_files, 'file')} ({self.writer} writer{'' if self.engine == 'spark' else ', arrow engine'}), {self.seconds:.1f} s ({rate:,.0f} records/s) "
                f"-> {self.output}" + "".join(f"\n{line}" for line in self.notes()))

    def notes(self) -> List[str]:
        """What was not exported, one line each (after the summary line)."""
        lines = []
        if self.internal_left_out:
            topics = sorted({p.rsplit('-', 1)[0] for p in self.internal_left_out})  # a store's: a decoded export
            lines.append(f"not exported: {_count(len(self.internal_left_out), 'partition')} of internal topics "
                         f"({', '.join(topics)}); name them (--topics '{','.join(topics)}') to export them")
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} damaged or truncated batches "
                         f"(listed in {self.output.rstrip('/')}/{SKIPPED_FILE}):")
            lines += [f"  {b.text()}" for b in self.skipped]
        lines += [f"gap: {g.text()}" for g in self.gaps] + self.table_notes
        if self.dead_letters:
            lines.append(f"{self.dead_letters} records did not decode: in {self.output.rstrip('/')}/"
                         "_kstore_dead_letters/ (topic, partition, offset, raw key and value, reason)")
        return lines


def _count(n: int, noun: str) -> str:
    """`n` and the noun, plural unless n is 1 ("1 file", "2 files")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _parquet_files(output: str) -> Dict[str, int]:
    """{path: size} of the Parquet files under `output` (any pyarrow filesystem URI)."""
    import pyarrow.fs as pafs

    from kstore_cli.spark.write import filesystem

    try:
        fs, root = filesystem(output)
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except (OSError, ValueError, FileUnreadableError):
        return {}
    return {i.path: i.size for i in infos
            if i.type == pafs.FileType.File and i.base_name.endswith(".parquet") and not i.base_name.startswith(("_", "."))}


def _count_rows(output: str, files: List[str]) -> int:
    import pyarrow.parquet as pq

    from kstore_cli.spark.write import filesystem

    fs = filesystem(output)[0]
    total = 0
    for path in files:
        with fs.open_input_file(path) as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


_OURS = re.compile(r"^kstore_cli\.errors\.(\w+): (.+)$")


def _spark_error(exc: BaseException) -> KstoreError:
    """One KstoreError for a failed Spark job: kstore's own error raised in a task (its file, byte and
    exit code kept), else the first line of Spark's."""
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("kstore_cli.") and "Error" in line.split(":")[0]]
    if ours:
        match = _OURS.match(ours[-1].strip())
        cls = getattr(errors, match.group(1), None) if match else None
        if isinstance(cls, type) and issubclass(cls, KstoreError):
            message = match.group(2)
            if issubclass(cls, CorruptDataError):
                message += "; --on-corruption skip exports the other batches and lists this one"
            return cls(message)
    from kstore_cli.spark.failures import MISSING_JAR, describe

    first = lines[0] if lines else type(exc).__name__
    error = SparkJobError(f"Spark job failed: {ours[-1] if ours else describe(exc) or first}")
    if MISSING_JAR in error.message:
        error.exit_status = ExitStatus.UNREADABLE  # a library the job needs is not installed (exit 3)
    return error


def _raise_spark_error(exc: BaseException) -> None:
    """Raise a Py4J or PySpark error as its KstoreError (:func:`_spark_error`); return on any other."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:  # --engine arrow without pyspark: no Spark error to translate
        return

    if isinstance(exc, (Py4JError, PySparkException)):
        from kstore_cli.spark.failures import java_trace

        raise _spark_error(exc) from java_trace(exc)  # the Java stack: in Spark's log and with --traceback


def _output_exists(output: str) -> bool:
    """Whether `output` exists (False when its filesystem cannot be asked from here: Spark decides)."""
    import pyarrow.fs as pafs

    from kstore_cli.spark.write import filesystem, output_info

    try:
        filesystem(output)
    except (OSError, ValueError, FileUnreadableError):
        return False
    return output_info(output).type != pafs.FileType.NotFound  # remote: a missing bucket, one line at once


def _remove_empty_output(output: str) -> None:
    """Remove `output` when it is an empty directory (so that the same command can run again)."""
    from kstore_cli.spark.write import filesystem, remove_if_empty

    try:
        fs, root = filesystem(output)
    except (OSError, ValueError, FileUnreadableError):
        return
    remove_if_empty(fs, root)


def export_with(spark, request: ExportRequest, progress: Optional[Callable[..., None]] = None) -> ExportSummary:
    """Run the export on an existing session (registers the source and ships kstore first)."""
    from kstore_cli.spark.engines import SparkEngine

    return export_on(SparkEngine(spark), request, progress)


def export_on(engine: Any, request: ExportRequest, progress: Optional[Callable[..., None]] = None) -> ExportSummary:
    """Run the export's tasks on `engine` (:mod:`~kstore_cli.spark.engines`); while they run, `progress` is
    called as ``progress(tasks_done, tasks_total, rows, input_bytes_done, input_bytes_total)`` (rows -1:
    not known while Spark's own writer runs)."""
    if request.incremental or request.table_format != "parquet":
        return _committed_run(engine, request, progress)
    started = time.perf_counter()
    options = request.reader_options(min_partitions=engine.parallelism)
    # The same plan the source makes inside Spark (validates the options before Spark runs).
    plan = plan_read(ReadOptions(options))
    summary = _planned_summary(request, plan)
    engine.prepare(source=request.writer != "arrow")
    if progress is not None:
        tasks_total, bytes_total, report = len(plan.tasks), plan.bytes_in, progress
        progress = lambda done, rows, size: report(done, tasks_total, rows, size, bytes_total)  # noqa: E731
        progress(0, 0, 0)
    if request.writer == "arrow":
        _export_arrow(engine, request, plan, summary, progress)
        summary.seconds = time.perf_counter() - started
        return summary
    from pyspark.sql import functions as F

    spark = engine.spark
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    before = _parquet_files(request.output)
    existed = _output_exists(request.output)
    accumulator = None
    if request.on_corruption == "skip":
        from kstore_cli.spark.source import skipped_accumulator

        accumulator = skipped_accumulator(spark)
        options["skippedAccumulator"] = str(accumulator.aid)
    try:
        df = spark.read.format("kstore").options(**options).load()
        columns = PARTITION_BY[request.partition_by]
        if request.partition_by == "date":
            df = df.withColumn("date", F.to_date(F.col("timestamp")))
        writer = df.write.mode(MODES[request.mode]).option("compression", request.parquet_compression)
        if columns:
            writer = writer.partitionBy(*columns)
        with _spark_writer_progress(spark, summary, progress):
            writer.parquet(request.output)
    except Exception as exc:  # noqa: BLE001 - Py4J/PySpark errors become one KstoreError
        if not existed:
            _remove_empty_output(request.output)  # Spark's committer leaves the directory it made
        if isinstance(exc, KstoreError):
            raise
        _raise_spark_error(exc)
        raise
    if accumulator is not None:
        summary.skipped = unique_skipped([SkippedBatch.from_dict(d) for d in accumulator.value])
        if summary.skipped:
            _write_skipped_file(spark, request, summary.skipped)
    after = _parquet_files(request.output)
    new = [p for p in after if p not in before]
    summary.parquet_files = len(new)
    summary.parquet_bytes = sum(after[p] for p in new)
    summary.records = _count_rows(request.output, new)
    summary.seconds = time.perf_counter() - started
    return summary


def _committed_run(engine: Any, request: ExportRequest, progress: Optional[Callable[..., None]]) -> ExportSummary:
    """--incremental (spark/incremental.py: from the state dir's offsets) or --format delta (spark/tables.py: after
    the table's), on the arrow writer's tasks."""
    from functools import partial

    engine.prepare(source=False)
    hooks = {"summary_of": partial(_planned_summary, request), "spark_metadata": _spark_row_metadata(request)}
    if request.table_format != "parquet":
        from kstore_cli.spark.tables import run_delta, run_iceberg

        return (run_delta if request.table_format == "delta" else run_iceberg)(engine, request, progress, **hooks)
    from kstore_cli.spark.incremental import run_incremental

    return run_incremental(engine, request, request.incremental, progress, **hooks)


def _planned_summary(request: ExportRequest, plan: Plan) -> ExportSummary:
    """The summary as far as the plan tells it, before Spark runs."""
    summary = ExportSummary()
    summary.output = request.output
    summary.writer = request.writer
    summary.engine = request.engine
    summary.kafka_partitions = len(plan.scans)
    summary.tasks = max(1, len(plan.tasks))
    summary.bytes_in = plan.bytes_in
    summary.internal_left_out = list(plan.internal_left_out)
    return summary


def skipped_file_bytes(request: ExportRequest, skipped: List[SkippedBatch], previous: Optional[bytes] = None) -> bytes:
    """The content of ``_kstore_skipped.json``; with --mode append, the earlier exports' entries are kept."""
    entries = []
    if previous and request.mode == "append":
        try:
            entries = list(json.loads(previous.decode("utf-8")).get("skippedBatches", []))
        except (ValueError, AttributeError, UnicodeDecodeError):
            entries = []
    entries += [b.to_dict() for b in skipped]
    return (json.dumps({"skippedBatches": entries}, indent=1, sort_keys=True) + "\n").encode("utf-8")


def _write_skipped_file(spark, request: ExportRequest, skipped: List[SkippedBatch]) -> None:
    """Write ``_kstore_skipped.json`` beside Spark's ``_SUCCESS``: with pyarrow where it knows the
    filesystem, else through Hadoop's (s3a://, hdfs://: the writer's own filesystems)."""
    from kstore_cli.spark.write import filesystem

    try:
        fs, root = filesystem(request.output)
    except (OSError, ValueError, FileUnreadableError):
        fs = None
    if fs is not None:
        from kstore_cli.spark.write import read_if_exists, write_atomically

        path = f"{root}/{SKIPPED_FILE}"
        write_atomically(fs, path, skipped_file_bytes(request, skipped, read_if_exists(fs, path)))
        return
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{request.output.rstrip('/')}/{SKIPPED_FILE}")
    hfs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    previous = None
    if request.mode == "append" and hfs.exists(path):
        stream = hfs.open(path)
        try:
            previous = bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()
    out = hfs.create(path, True)
    try:
        out.write(bytearray(skipped_file_bytes(request, skipped, previous)))
    finally:
        out.close()


def _spark_row_metadata(request: ExportRequest) -> Optional[str]:
    """The Spark schema Spark's own writer stores in each file (partition columns left out)."""
    from kstore_cli.spark.columns import arrow_schema
    from kstore_cli.spark.engines import spark_schema_json

    return spark_schema_json(arrow_schema(request.include_headers, request.include_metadata),
                             PARTITION_BY[request.partition_by])


def _spark_writer_progress(spark, summary: ExportSummary, progress: Optional[Callable[..., None]]) -> Any:
    from kstore_cli.spark.engines import Poller, spark_stage_progress

    if progress is None:
        return Poller(None, tuple)
    return Poller(progress, spark_stage_progress(spark, summary.tasks, summary.bytes_in),
                  final=lambda: (summary.tasks, -1, summary.bytes_in))


def _export_arrow(engine: Any, request: ExportRequest, plan: Plan, summary: ExportSummary,
                  progress: Optional[Callable[..., None]] = None) -> None:
    """The ``arrow`` writer: the engine runs the planned tasks, each writes Parquet with pyarrow."""
    import uuid

    import pyarrow.fs as pafs

    from kstore_cli.spark.write import WriteJob, abort_job, commit_job, filesystem, output_info, remove_if_empty

    if not _arrow_dates_hold(request.partition_by, engine.time_zone()):
        raise UsageError("--writer arrow partitions by the UTC date; drop spark.sql.session.timeZone or use --writer spark")
    try:
        fs, root = filesystem(request.output)
    except (OSError, ValueError, FileUnreadableError) as exc:
        raise UsageError(f"--writer arrow cannot write to {request.output} ({exc}); use --writer spark") from None
    info = _clear_arrow_output(fs, root, request, output_info(request.output))
    from kstore_cli.spark.decoded import build_decoding, dead_letter_count

    decoding = getattr(request, "decoding", None) or build_decoding(
        request.paths, sorted({s.topic for s in plan.scans}), *request.formats[:2], schemas_from=request.formats[2],
        reader_schema=request.formats[3])
    job = WriteJob(request.output, uuid.uuid4().hex, request.include_headers, request.include_metadata,
                   request.partition_by, request.parquet_compression,
                   _spark_row_metadata(request) if decoding is None else None, request.on_corruption, decoding)
    tasks = list(enumerate(plan.tasks))
    try:
        written = engine.run_tasks(job, tasks, progress) if tasks else []
        summary.skipped = skipped_of(written)
        written = [w for w in written if "skipped" not in w]
        extra = {}
        if summary.skipped:
            from kstore_cli.spark.write import read_if_exists

            path = f"{root}/{SKIPPED_FILE}"
            extra[SKIPPED_FILE] = skipped_file_bytes(request, summary.skipped, read_if_exists(fs, path))
        commit_job(fs, root, job, written, extra)
    except BaseException as exc:
        engine.settle(job)
        abort_job(fs, root, job)
        if info.type == pafs.FileType.NotFound:
            remove_if_empty(fs, root)  # so that the same command can run again once the input is mended
        if isinstance(exc, Exception) and not isinstance(exc, KstoreError):
            _raise_spark_error(exc)
        raise
    summary.parquet_files = len(written)
    summary.parquet_bytes = sum(w["bytes"] for w in written)
    summary.records = sum(w["rows"] for w in written)
    summary.dead_letters = dead_letter_count(written)


def _clear_arrow_output(fs: Any, root: str, request: ExportRequest, info: Any) -> Any:
    """`info`, the output's file info as the export found it: an existing output is refused (--mode error)
    or removed (--mode overwrite), as Spark's writer does."""
    import pyarrow.fs as pafs

    if info.type != pafs.FileType.NotFound:
        if request.mode == "error":
            raise SparkJobError(f"Spark job failed: [PATH_ALREADY_EXISTS] Path {request.output} already exists. "
                                f"Set mode as \"overwrite\" to overwrite the existing path.")
        if request.mode == "overwrite":
            if info.type == pafs.FileType.Directory:
                fs.delete_dir(root)
            else:
                fs.delete_file(root)
    return info


def run_export(request: ExportRequest, progress: Optional[Callable[..., None]] = None) -> ExportSummary:
    """Validate, run the export on its engine (a session started and stopped for Spark's), time it."""
    started = time.perf_counter()
    request.validate()
    if request.engine == "arrow":
        from kstore_cli.spark.engines import LocalEngine

        summary = export_on(LocalEngine(request.jobs), request, progress)
    else:
        summary = _run_on_spark(request, progress)
    summary.seconds = time.perf_counter() - started
    return summary


def _run_on_spark(request: ExportRequest, progress: Optional[Callable[..., None]]) -> ExportSummary:
    """Start a session, export, stop the session; a Spark failure names Spark's log when it holds anything."""
    import tempfile

    from kstore_cli.spark import require_dependencies

    require_dependencies(("pyspark", "pyarrow"))
    check_java()
    log_dir = tempfile.mkdtemp(prefix="kstore-spark-")
    keep_log = False
    try:
        spark = build_session(request.master, request.spark_conf, request.progress, request.writer, log_dir,
                              context_only=request.writer == "arrow")
        try:
            from kstore_cli.spark.engines import SparkEngine

            return export_on(SparkEngine(spark), request, progress)
        finally:
            spark.stop()
    except SparkJobError as exc:
        # Not kstore's own error: Spark's log may say more, and gets the Java stack.
        log = os.path.join(log_dir, "spark.log")
        if exc.__cause__ is not None:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"kstore: {exc.message}\n{exc.__cause__}\n")
        if os.path.exists(log) and os.path.getsize(log):
            keep_log = True
            exc.message += f" (Spark's log: {log})"
            exc.args = (exc.message,)
        raise
    finally:
        if not keep_log:
            shutil.rmtree(log_dir, ignore_errors=True)
