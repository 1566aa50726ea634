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
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kstore_cli import errors
from kstore_cli.errors import CorruptDataError, ExitStatus, KstoreError, UsageError
from kstore_cli.spark.options import ON_CORRUPTION, ReadOptions
from kstore_cli.spark.plan import Plan, plan_read
from kstore_cli.spark.read import SkippedBatch

PARTITION_BY = {"topic,partition": ["topic", "partition"], "date": ["date"], "none": []}
PARQUET_COMPRESSION = ("snappy", "zstd", "gzip", "none")
MODES = {"error": "errorifexists", "overwrite": "overwrite", "append": "append"}
#: Beside ``_SUCCESS``: the batches an export with ``--on-corruption skip`` left out.
SKIPPED_FILE = "_kstore_skipped.json"
#: Spark 4 runs on Java 17 and later.
JAVA_MIN_VERSION = 17
JAVA_MESSAGE = "spark-export needs Java 17+ (JAVA_HOME)"
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

#: Session settings the export needs (a --spark-conf of the same key wins).
DEFAULT_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.ui.enabled": "false",
}


class SparkJobError(KstoreError):
    """The Spark job failed (the first line of Spark's error; kstore's own errors are raised as themselves)."""


class NothingToExportError(KstoreError):
    """The PATHs and the topic options select no Kafka partition (exit 1, before Spark starts)."""


class JavaMissingError(KstoreError):
    """No Java 17+ to start Spark with (exit 3, like a missing codec library)."""

    exit_status = ExitStatus.UNREADABLE


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
                 writer: str = "auto", on_corruption: str = "fail",
                 storage_options: Optional[Dict[str, str]] = None) -> None:
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
        self.spark_conf = dict(spark_conf or {})
        self.max_bytes_per_partition = max_bytes_per_partition
        self.extra_options = dict(extra_options or {})
        self.extra_options.update({f"storage.{k}": v for k, v in (storage_options or {}).items()})
        self.progress = progress
        self.requested_writer = writer
        #: The writer this export uses ("spark" or "arrow"; auto resolved).
        self.writer = writer if writer != "auto" else self._auto_writer()

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
        if not plan.scans:
            where = " ".join(self.paths)
            why = f" matches --topics {self.topics!r}" if self.topics else ""
            message = f"nothing to export: no Kafka partition under {where}{why}"
            if plan.internal_left_out:
                message += (f" (internal topics are exported only when named: --topics "
                            f"'{plan.internal_left_out[0].rsplit('-', 1)[0]}' or '__*')")
            raise NothingToExportError(message)
        if "://" not in self.output or self.output.startswith("file://"):
            from kstore_cli.log.scope import check_output_dir

            # A local output: never in an input nor a Kafka data dir (--mode overwrite would replace it).
            check_output_dir(self.output[len("file://"):] if self.output.startswith("file://") else self.output,
                             option="--output", inputs=self.paths)
        if self.mode == "error" and _output_exists(self.output):
            raise UsageError(f"{self.output} already exists: use --mode overwrite to replace it, "
                             f"or --mode append to add to it")
        return plan


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
        #: batches left out with --on-corruption skip (the export then exits 1)
        self.skipped: List[SkippedBatch] = []
        #: internal topics' partitions not exported because nothing named them
        self.internal_left_out: List[str] = []

    def to_dict(self) -> dict:
        return {"type": "summary", "kafka_partitions": self.kafka_partitions, "spark_partitions": self.tasks, "records": self.records,
                "bytes_in": self.bytes_in, "parquet_files": self.parquet_files, "parquet_bytes": self.parquet_bytes,
                "seconds": round(self.seconds, 3), "output": self.output, "writer": self.writer,
                "skipped_batches": [b.to_dict(snake_case=True) for b in self.skipped],
                "internal_partitions_left_out": list(self.internal_left_out)}

    def text(self, size: Optional[Callable[[int], str]] = None) -> str:
        """The summary line (then the notes); `size` spells the byte counts (a terminal's human units)."""
        rate = self.records / self.seconds if self.seconds else 0.0
        sizes = (f"{size(self.bytes_in)} in, {size(self.parquet_bytes)} of Parquet out" if size else
                 f"{self.bytes_in} bytes in, {self.parquet_bytes} Parquet bytes out")
        return (f"exported {self.records} records from {self.kafka_partitions} Kafka partitions "
                f"({self.tasks} Spark partitions): {sizes} "
                f"in {self.parquet_files} files ({self.writer} writer), {self.seconds:.1f} s ({rate:,.0f} records/s) "
                f"-> {self.output}" + "".join(f"\n{line}" for line in self.notes()))

    def notes(self) -> List[str]:
        """What was not exported, one line each (after the summary line)."""
        lines = []
        if self.internal_left_out:
            lines.append(f"not exported: {len(self.internal_left_out)} partitions of internal topics "
                         f"({', '.join(sorted({p.rsplit('-', 1)[0] for p in self.internal_left_out}))}); "
                         f"name them (--topics '__*') to export them")
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} damaged or truncated batches "
                         f"(listed in {self.output.rstrip('/')}/{SKIPPED_FILE}):")
            lines += [f"  {b.text()}" for b in self.skipped]
        return lines


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
    first = lines[0] if lines else type(exc).__name__
    return SparkJobError(f"Spark job failed: {ours[-1] if ours else first}")


def _raise_spark_error(exc: BaseException) -> None:
    """Raise a Py4J or PySpark error as its KstoreError (:func:`_spark_error`); return on any other."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    if isinstance(exc, (Py4JError, PySparkException)):
        raise _spark_error(exc) from None


def _output_exists(output: str) -> bool:
    """Whether `output` exists (False when its filesystem cannot be asked from here: Spark decides)."""
    import pyarrow.fs as pafs

    from kstore_cli.spark.write import filesystem

    try:
        fs, root = filesystem(output)
        return fs.get_file_info(root).type != pafs.FileType.NotFound
    except (OSError, ValueError):
        return False


def _remove_empty_output(output: str) -> None:
    """Remove `output` when it is an empty directory (so that the same command can run again)."""
    from kstore_cli.spark.write import filesystem, remove_if_empty

    try:
        fs, root = filesystem(output)
    except (OSError, ValueError):
        return
    remove_if_empty(fs, root)


_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def check_java() -> str:
    """The java Spark's launcher would run ($JAVA_HOME/bin/java, else java on PATH), if it is 17+;
    else JavaMissingError."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.isfile(java) or not os.access(java, os.X_OK):
        raise JavaMissingError(f"{JAVA_MESSAGE}: " + (f"no {java}" if home else "no java on PATH and JAVA_HOME not set"))
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise JavaMissingError(f"{JAVA_MESSAGE}: {java} does not run ({exc})") from None
    match = _JAVA_VERSION.search(done.stderr + done.stdout)
    if done.returncode != 0 or not match:
        raise JavaMissingError(f"{JAVA_MESSAGE}: {java} -version failed")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))  # "1.8.0_392" is Java 8
    if major < JAVA_MIN_VERSION:
        raise JavaMissingError(f"{JAVA_MESSAGE}: {java} is Java {major}")
    return java


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


#: Spark's log4j2 settings while its logs are off: only FATAL, on stderr (which is a log file then).
_QUIET_LOG4J2 = """\
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""
LOG_LEVEL_ENV = "KSTORE_SPARK_LOG_LEVEL"


class _JvmStderr:
    """While a JVM is started, fd 2 points at a log file, so the JVM's own stderr (its start-up
    warnings, Spark's log lines, local Python workers' stderr) goes there and not to the terminal."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.saved: Optional[int] = None

    def __enter__(self) -> "_JvmStderr":
        sys.stderr.flush()
        self.saved = os.dup(2)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.dup2(fd, 2)
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)


def build_session(master: str = "local[*]", conf: Optional[Dict[str, str]] = None, progress: bool = False,
                  writer: str = "spark", log_dir: Optional[str] = None):
    """A session for the export: this interpreter for the Python workers, the export's defaults.

    `writer` tunes the driver JVM for that writer (it takes effect when this call starts the JVM).
    Unless $KSTORE_SPARK_LOG_LEVEL asks for Spark's logs, a JVM this call starts logs only FATAL
    lines, and with `log_dir` its stderr goes to ``log_dir/spark.log`` (the JVM prints start-up
    warnings no setting turns off)."""
    import tempfile

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable
    if master.startswith("local"):
        # Embedded mode needs no network beyond loopback (and no slow hostname lookups).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = session_settings(master, conf, progress, writer)
    quiet = not os.environ.get(LOG_LEVEL_ENV) and SparkContext._active_spark_context is None
    if quiet:
        # Our own log4j2 settings: Spark then also leaves out its "default log4j profile" lines.
        config = os.path.join(log_dir or tempfile.mkdtemp(prefix="kstore-spark-"), "log4j2.properties")
        with open(config, "w", encoding="utf-8") as f:
            f.write(_QUIET_LOG4J2)
        options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{config} {options}".strip()
    builder = SparkSession.builder.master(master).appName("kstore spark-export")
    for key, value in settings.items():
        builder = builder.config(key, value)
    if quiet and log_dir:
        with _JvmStderr(os.path.join(log_dir, "spark.log")):
            spark = builder.getOrCreate()
    else:
        spark = builder.getOrCreate()
    # Task failures are reported by kstore as one line with the cause; Spark's own ERROR logs
    # would print Java stack traces for the same failure. KSTORE_SPARK_LOG_LEVEL brings them back.
    spark.sparkContext.setLogLevel(os.environ.get(LOG_LEVEL_ENV, "FATAL"))
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
    summary = _planned_summary(request, plan)
    register(spark)
    if request.writer == "arrow":
        _export_arrow(spark, request, plan, summary)
        summary.seconds = time.perf_counter() - started
        return summary
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
        writer.parquet(request.output)
    except Exception as exc:  # noqa: BLE001 - Py4J/PySpark errors become one KstoreError
        if not existed:
            _remove_empty_output(request.output)  # Spark's committer leaves the directory it made
        if isinstance(exc, KstoreError):
            raise
        _raise_spark_error(exc)
        raise
    if accumulator is not None:
        summary.skipped = _unique([SkippedBatch.from_dict(d) for d in accumulator.value])
        if summary.skipped:
            _write_skipped_file(spark, request, summary.skipped)
    after = _parquet_files(request.output)
    new = [p for p in after if p not in before]
    summary.parquet_files = len(new)
    summary.parquet_bytes = sum(after[p] for p in new)
    summary.records = _count_rows(request.output, new)
    summary.seconds = time.perf_counter() - started
    return summary


def _planned_summary(request: ExportRequest, plan: Plan) -> ExportSummary:
    """The summary as far as the plan tells it, before Spark runs."""
    summary = ExportSummary()
    summary.output = request.output
    summary.writer = request.writer
    summary.kafka_partitions = len(plan.scans)
    summary.tasks = max(1, len(plan.tasks))
    summary.bytes_in = plan.bytes_in
    summary.internal_left_out = list(plan.internal_left_out)
    return summary


def _unique(skipped: List[SkippedBatch]) -> List[SkippedBatch]:
    """Each skipped batch once (a retried task reports its batches again), in file order."""
    seen = {}
    for b in skipped:
        seen.setdefault((b.log, b.position), b)
    return [seen[k] for k in sorted(seen)]


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
    except (OSError, ValueError):
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

    from kstore_cli.spark.write import WriteJob, abort_job, commit_job, filesystem, remove_if_empty

    if not _arrow_dates_hold(request.partition_by, spark.conf.get("spark.sql.session.timeZone", "UTC")):
        raise UsageError("--writer arrow partitions by the UTC date; drop spark.sql.session.timeZone or use --writer spark")
    try:
        fs, root = filesystem(request.output)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--writer arrow cannot write to {request.output} ({exc}); use --writer spark") from None
    info = _clear_arrow_output(fs, root, request)
    job = WriteJob(request.output, uuid.uuid4().hex, request.include_headers, request.include_metadata,
                   request.partition_by, request.parquet_compression, _spark_row_metadata(request),
                   request.on_corruption)
    tasks = list(enumerate(plan.tasks))
    try:
        written = _run_arrow_tasks(spark, job, tasks) if tasks else []
        summary.skipped = _unique([SkippedBatch.from_dict(w["skipped"]) for w in written if "skipped" in w])
        written = [w for w in written if "skipped" not in w]
        extra = {}
        if summary.skipped:
            from kstore_cli.spark.write import read_if_exists

            path = f"{root}/{SKIPPED_FILE}"
            extra[SKIPPED_FILE] = skipped_file_bytes(request, summary.skipped, read_if_exists(fs, path))
        commit_job(fs, root, job, written, extra)
    except BaseException as exc:
        # Spark fails the job at the first failed task while others are still being killed; they
        # could write into the staging directory after it is removed.
        _wait_for_tasks(spark, job.job_id)
        abort_job(fs, root, job)
        if info.type == pafs.FileType.NotFound:
            remove_if_empty(fs, root)  # so that the same command can run again once the input is mended
        if isinstance(exc, Exception) and not isinstance(exc, KstoreError):
            _raise_spark_error(exc)
        raise
    summary.parquet_files = len(written)
    summary.parquet_bytes = sum(w["bytes"] for w in written)
    summary.records = sum(w["rows"] for w in written)


def _clear_arrow_output(fs: Any, root: str, request: ExportRequest) -> Any:
    """The output's file info as the export found it: an existing output is refused (--mode error) or
    removed (--mode overwrite), as Spark's writer does."""
    import pyarrow.fs as pafs

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
    return info


def _run_arrow_tasks(spark: Any, job: Any, tasks: List[Tuple[int, Any]]) -> List[Dict[str, Any]]:
    """Each planned task run by Spark as one partition of the job's group; what each wrote (or skipped)."""
    from functools import partial

    from kstore_cli.spark.write import write_partition

    sc = spark.sparkContext
    previous = {key: sc.getLocalProperty(key) for key in _JOB_GROUP_PROPERTIES}
    sc.setJobGroup(job.job_id, "kstore spark-export (arrow writer)")
    try:
        rdd = sc.parallelize(tasks, len(tasks))
        return rdd.mapPartitions(partial(write_partition, job)).collect()
    finally:
        for key, value in previous.items():
            sc.setLocalProperty(key, value)  # None removes it


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
    import tempfile

    started = time.perf_counter()
    request.validate()
    check_java()
    log_dir = tempfile.mkdtemp(prefix="kstore-spark-")
    keep_log = False
    try:
        spark = build_session(request.master, request.spark_conf, request.progress, request.writer, log_dir)
        try:
            summary = export_with(spark, request)
        finally:
            spark.stop()
    except SparkJobError as exc:
        # Not kstore's own error: Spark's log may say more.
        log = os.path.join(log_dir, "spark.log")
        if os.path.exists(log) and os.path.getsize(log):
            keep_log = True
            exc.message += f" (Spark's log: {log})"
            exc.args = (exc.message,)
        raise
    finally:
        if not keep_log:
            shutil.rmtree(log_dir, ignore_errors=True)
    summary.seconds = time.perf_counter() - started
    return summary
