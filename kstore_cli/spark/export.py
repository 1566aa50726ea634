"""The export job: Kafka log directories to Parquet through the ``kstore`` data source.

:func:`run_export` starts a session (``local[*]`` by default), ships kstore to the
executors, registers the source and writes Parquet; :func:`export_with` does the same
with a session the caller owns (tests, notebooks). Both return an :class:`ExportSummary`.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Dict, List, Optional, Sequence

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import Plan, plan_read

PARTITION_BY = {"topic,partition": ["topic", "partition"], "date": ["date"], "none": []}
PARQUET_COMPRESSION = ("snappy", "zstd", "gzip", "none")
MODES = {"error": "errorifexists", "overwrite": "overwrite", "append": "append"}
#: Who writes the Parquet files: Spark's writer (rows go through the JVM), each task with pyarrow, or
#: auto: arrow where it writes what Spark's writer would (see ExportRequest.writer), else Spark's.
WRITERS = ("auto", "spark", "arrow")
#: --spark-conf keys only Spark's writer reads (Parquet writer, file-source and Hadoop settings): with
#: one of them, auto picks Spark's writer so that the setting is honoured.
SPARK_WRITER_SETTINGS = ("spark.sql.parquet.", "spark.sql.sources.", "spark.sql.files.", "spark.hadoop.",
                         "spark.sql.hive.")

#: Task size of the arrow writer (Spark's file-source default, maxPartitionBytes). Its tasks stream rows
#: to pyarrow without sorting them, so larger tasks only save Spark's ~20 ms between tasks: local[1]
#: 0.67 -> 0.63 s for 2 M rows. Spark's writer keeps the source's 64 MiB.
ARROW_MAX_BYTES_PER_TASK = 128 * 1024 * 1024

#: Session settings the export needs (a --spark-conf of the same key wins).
DEFAULT_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.ui.enabled": "false",
}


class SparkJobError(KstoreError):
    """The Spark job failed (the first line of Spark's error, and kstore's own error when it is one)."""


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
                 parquet_compression: str = "snappy", mode: str = "error",
                 spark_conf: Optional[Dict[str, str]] = None, max_bytes_per_partition: Optional[int] = None,
                 extra_options: Optional[Dict[str, str]] = None, progress: bool = False,
                 writer: str = "auto") -> None:
        if partition_by not in PARTITION_BY:
            raise UsageError(f"--partition-by must be one of {', '.join(PARTITION_BY)}, not {partition_by!r}")
        if parquet_compression not in PARQUET_COMPRESSION:
            raise UsageError(f"--parquet-compression must be one of {', '.join(PARQUET_COMPRESSION)}")
        if mode not in MODES:
            raise UsageError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
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
        self.mode = mode
        self.spark_conf = dict(spark_conf or {})
        self.max_bytes_per_partition = max_bytes_per_partition
        self.extra_options = dict(extra_options or {})
        self.progress = progress
        self.requested_writer = writer
        #: The writer this export uses ("spark" or "arrow"; auto resolved).
        self.writer = writer if writer != "auto" else self._auto_writer()

    def _auto_writer(self) -> str:
        """arrow for a local output, unless a setting asks for what only Spark's writer does.

        The arrow writer writes the same directories, schema and rows, and commits as Spark's default
        committer does, at a quarter of the CPU. Other URIs go to Spark's writer: it writes through
        Hadoop's filesystems and credentials (s3a://, hdfs://, abfs://), which pyarrow does not share."""
        if any(key.startswith(SPARK_WRITER_SETTINGS) for key in self.spark_conf):
            return "spark"
        if not _arrow_dates_hold(self.partition_by, self.spark_conf.get("spark.sql.session.timeZone")):
            return "spark"
        if "://" in self.output and not self.output.startswith("file://"):
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
        max_bytes = self.max_bytes_per_partition or (ARROW_MAX_BYTES_PER_TASK if self.writer == "arrow" else None)
        if max_bytes:
            opts["maxBytesPerPartition"] = str(max_bytes)
        opts.update(self.extra_options)
        return opts

    def validate(self) -> Plan:
        """Parse the options and plan the read in this process (UsageError before Spark starts)."""
        return plan_read(ReadOptions(self.reader_options()))


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

    def to_dict(self) -> dict:
        return {"kafkaPartitions": self.kafka_partitions, "sparkPartitions": self.tasks, "records": self.records,
                "bytesIn": self.bytes_in, "parquetFiles": self.parquet_files, "parquetBytes": self.parquet_bytes,
                "seconds": round(self.seconds, 3), "output": self.output, "writer": self.writer}

    def text(self) -> str:
        rate = self.records / self.seconds if self.seconds else 0.0
        return (f"exported {self.records} records from {self.kafka_partitions} Kafka partitions "
                f"({self.tasks} Spark partitions): {self.bytes_in} bytes in, {self.parquet_bytes} Parquet bytes out "
                f"in {self.parquet_files} files ({self.writer} writer), {self.seconds:.1f} s ({rate:,.0f} records/s) "
                f"-> {self.output}")


def _parquet_files(output: str) -> Dict[str, int]:
    """{path: size} of the Parquet files under `output` (any pyarrow filesystem URI)."""
    import pyarrow.fs as pafs

    from kstore_cli.spark.write import filesystem

    try:
        fs, root = filesystem(output)
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except (OSError, ValueError):
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


def _spark_error(exc: BaseException) -> SparkJobError:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("kstore_cli.") and "Error" in line.split(":")[0]]
    first = lines[0] if lines else type(exc).__name__
    message = ours[-1] if ours else first
    return SparkJobError(f"Spark job failed: {message}")


#: JVM options of an arrow-writer session. Its JVM only schedules tasks (the rows never enter it), yet
#: the C2 compiler kept compiling Spark's scheduler code for ~0.45 CPU-s per 8 M-row export, taking a
#: core from the Python workers. C1 alone compiles that code cheaply. Spark's own writer runs the rows
#: through the JVM and needs C2 (C1 alone made it 2.6x slower), so it keeps the JVM's defaults.
ARROW_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def session_settings(master: str = "local[*]", conf: Optional[Dict[str, str]] = None, progress: bool = False,
                     writer: str = "spark") -> Dict[str, str]:
    """The Spark settings of an export's session: the export's defaults, then `conf` (which wins)."""
    settings = dict(DEFAULT_CONF)
    settings["spark.ui.showConsoleProgress"] = "true" if progress else "false"
    if master.startswith("local"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    conf = dict(conf or {})
    if writer == "arrow":
        # Later JVM options win, so the user's own options (say, a TieredStopAtLevel) still decide.
        theirs = conf.pop("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{ARROW_JAVA_OPTIONS} {theirs}".strip()
    settings.update(conf)
    return settings


def build_session(master: str = "local[*]", conf: Optional[Dict[str, str]] = None, progress: bool = False,
                  writer: str = "spark"):
    """A session for the export: this interpreter for the Python workers, the export's defaults.

    `writer` tunes the driver JVM for that writer (it takes effect when this call starts the JVM)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable
    if master.startswith("local"):
        # Embedded mode needs no network beyond loopback (and no slow hostname lookups).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = session_settings(master, conf, progress, writer)
    builder = SparkSession.builder.master(master).appName("kstore spark-export")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Task failures are reported by kstore as one line with the cause; Spark's own ERROR logs
    # would print Java stack traces for the same failure. KSTORE_SPARK_LOG_LEVEL brings them back.
    spark.sparkContext.setLogLevel(os.environ.get("KSTORE_SPARK_LOG_LEVEL", "FATAL"))
    return spark


def export_with(spark, request: ExportRequest) -> ExportSummary:
    """Run the export on an existing session (registers the source and ships kstore first)."""
    from pyspark.sql import functions as F

    from kstore_cli.spark import register

    started = time.perf_counter()
    parallelism = spark.sparkContext.defaultParallelism
    options = request.reader_options(min_partitions=parallelism)
    # The same plan the source makes inside Spark (validates the options before Spark runs).
    plan = plan_read(ReadOptions(options))
    summary = ExportSummary()
    summary.output = request.output
    summary.writer = request.writer
    summary.kafka_partitions = len(plan.scans)
    summary.tasks = max(1, len(plan.tasks))
    summary.bytes_in = plan.bytes_in
    register(spark)
    if request.writer == "arrow":
        _export_arrow(spark, request, plan, summary)
        summary.seconds = time.perf_counter() - started
        return summary
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    before = _parquet_files(request.output)
    try:
        df = spark.read.format("kstore").options(**options).load()
        columns = PARTITION_BY[request.partition_by]
        if request.partition_by == "date":
            df = df.withColumn("date", F.to_date(F.col("timestamp")))
        writer = df.write.mode(MODES[request.mode]).option("compression", request.parquet_compression)
        if columns:
            writer = writer.partitionBy(*columns)
        writer.parquet(request.output)
    except KstoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - Py4J/PySpark errors become one KstoreError
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        if isinstance(exc, (Py4JError, PySparkException)):
            raise _spark_error(exc) from None
        raise
    after = _parquet_files(request.output)
    new = [p for p in after if p not in before]
    summary.parquet_files = len(new)
    summary.parquet_bytes = sum(after[p] for p in new)
    summary.records = _count_rows(request.output, new)
    summary.seconds = time.perf_counter() - started
    return summary


def _spark_row_metadata(request: ExportRequest) -> Optional[str]:
    """The Spark schema Spark's own writer stores in each file (partition columns left out)."""
    try:
        from pyspark.sql.types import StructType, _parse_datatype_string

        from kstore_cli.spark.columns import spark_ddl

        schema = _parse_datatype_string(spark_ddl(request.include_headers, request.include_metadata))
        dropped = set(PARTITION_BY[request.partition_by])
        return StructType([f for f in schema.fields if f.name not in dropped]).json()
    except Exception:  # noqa: BLE001 - the metadata is a courtesy to Spark readers
        return None


def _export_arrow(spark, request: ExportRequest, plan: Plan, summary: ExportSummary) -> None:
    """The ``arrow`` writer: Spark schedules the planned tasks, each writes Parquet with pyarrow."""
    import uuid

    import pyarrow.fs as pafs

    from kstore_cli.spark.write import WriteJob, abort_job, commit_job, filesystem, remove_if_empty, write_partition

    if not _arrow_dates_hold(request.partition_by, spark.conf.get("spark.sql.session.timeZone", "UTC")):
        raise UsageError("--writer arrow partitions by the UTC date; drop spark.sql.session.timeZone or use --writer spark")
    try:
        fs, root = filesystem(request.output)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--writer arrow cannot write to {request.output} ({exc}); use --writer spark") from None
    info = fs.get_file_info(root)
    if info.type != pafs.FileType.NotFound:
        if request.mode == "error":
            raise SparkJobError(f"Spark job failed: [PATH_ALREADY_EXISTS] Path {request.output} already exists. "
                                f"Set mode as \"overwrite\" to overwrite the existing path.")
        if request.mode == "overwrite":
            if info.type == pafs.FileType.Directory:
                fs.delete_dir(root)
            else:
                fs.delete_file(root)
    job = WriteJob(request.output, uuid.uuid4().hex, request.include_headers, request.include_metadata,
                   request.partition_by, request.parquet_compression, _spark_row_metadata(request))
    tasks = list(enumerate(plan.tasks))
    try:
        written = []
        if tasks:
            from functools import partial

            sc = spark.sparkContext
            previous = {key: sc.getLocalProperty(key) for key in _JOB_GROUP_PROPERTIES}
            sc.setJobGroup(job.job_id, "kstore spark-export (arrow writer)")
            try:
                rdd = sc.parallelize(tasks, len(tasks))
                written = rdd.mapPartitions(partial(write_partition, job)).collect()
            finally:
                for key, value in previous.items():
                    sc.setLocalProperty(key, value)  # None removes it
        commit_job(fs, root, job, written)
    except BaseException as exc:
        # Spark fails the job at the first failed task while others are still being killed; they
        # could write into the staging directory after it is removed.
        _wait_for_tasks(spark, job.job_id)
        abort_job(fs, root, job)
        if info.type == pafs.FileType.NotFound:
            remove_if_empty(fs, root)  # so that the same command can run again once the input is mended
        if isinstance(exc, Exception) and not isinstance(exc, KstoreError):
            from py4j.protocol import Py4JError
            from pyspark.errors import PySparkException

            if isinstance(exc, (Py4JError, PySparkException)):
                raise _spark_error(exc) from None
        raise
    summary.parquet_files = len(written)
    summary.parquet_bytes = sum(w["bytes"] for w in written)
    summary.records = sum(w["rows"] for w in written)


#: The thread-local properties SparkContext.setJobGroup sets.
_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def _wait_for_tasks(spark, group: str, timeout: float = 60.0) -> None:
    """Wait (at most `timeout` s) until no task of the job group is running."""
    try:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stages = [tracker.getStageInfo(sid) for jid in tracker.getJobIdsForGroup(group)
                      for sid in (getattr(tracker.getJobInfo(jid), "stageIds", None) or [])]
            if not any(stage and stage.numActiveTasks for stage in stages):
                return
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - cleanup is best effort: a session that is gone has no tasks
        return


def run_export(request: ExportRequest) -> ExportSummary:
    """Validate, start a session, export, stop the session."""
    started = time.perf_counter()
    request.validate()
    spark = build_session(request.master, request.spark_conf, request.progress, request.writer)
    try:
        summary = export_with(spark, request)
    finally:
        spark.stop()
    summary.seconds = time.perf_counter() - started
    return summary
