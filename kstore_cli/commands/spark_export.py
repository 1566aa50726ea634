"""``kstore spark-export``: Kafka log directories to Parquet with Spark (local by default)."""

from __future__ import annotations

import json
from typing import Dict, Optional, Tuple

import click

from kstore_cli.commands._render import human_bytes, is_tty
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import TIME, ExistingPath, json_option, topics_option

from kstore_cli.errors import ExitStatus, UsageError

#: kstore_cli.spark.decoded.FORMATS (spelled here: the command module imports no Spark code at load).
DECODED_FORMATS = ("auto", "avro", "json-schema", "protobuf", "json", "string", "binary")


def _spark_conf(pairs: Tuple[str, ...], option: str = "--spark-conf") -> Dict[str, str]:
    conf: Dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} expects KEY=VALUE, not {pair!r}")
        conf[key.strip()] = value
    return conf


@click.command(name="spark-export")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath(allow_uri=True))
@click.option("--output", "-o", required=True, help="Output directory (a local path or any URI Spark can write).")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[N], spark://HOST:PORT, yarn, k8s://...")
@topics_option
@click.option("--starting-offsets", metavar="earliest|JSON",
              help='Spark Kafka source startingOffsets: earliest, or {"topic":{"0":23,"1":-2}} (-2 earliest).')
@click.option("--ending-offsets", metavar="latest|JSON",
              help='Spark Kafka source endingOffsets (exclusive): latest, or {"topic":{"0":50,"1":-1}} (-1 latest).')
@click.option("--starting-timestamp", type=TIME, metavar="TIME",
              help="Start every partition at the first offset with timestamp >= TIME (epoch ms or ISO-8601; "
                   "Kafka's offsetsForTimes).")
@click.option("--ending-timestamp", type=TIME, metavar="TIME",
              help="End every partition before the first offset with timestamp >= TIME (epoch ms or ISO-8601; "
                   "latest when none).")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="read_committed drops records of aborted (and still open) transactions, using .txnindex.")
@click.option("--include-headers", is_flag=True, help="Add the headers column (null when a record has none).")
@click.option("--include-metadata", is_flag=True,
              help="Add leaderEpoch, producerId, producerEpoch, sequence, isTransactional, batchBaseOffset, compression.")
@click.option("--partition-by", type=click.Choice(["topic,partition", "date", "none"]), default="topic,partition",
              show_default=True, help="Parquet directory layout (date: the record timestamp's UTC date).")
@click.option("--parquet-compression", type=click.Choice(["snappy", "zstd", "gzip", "none"]), default="snappy",
              show_default=True)
@click.option("--mode", type=click.Choice(["error", "overwrite", "append"]),
              help="What to do when the output already exists: overwrite or append to it (without --mode, or with "
                   "error, an existing output is refused, exit 2, before Spark starts).")
@click.option("--on-corruption", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
              help="A damaged batch (CRC mismatch, undecodable) or a truncated one: fail the export with one error "
                   "naming file and byte, or skip it: the export goes on, lists each skipped batch (file, byte, "
                   "offsets) in its summary and in _kstore_skipped.json beside _SUCCESS, and exits 1.")
@click.option("--max-bytes-per-partition", type=click.IntRange(min=1), metavar="BYTES",
              help="Most bytes one Spark task reads (default 64 MiB; 128 MiB with the arrow writer).")
@click.option("--writer", type=click.Choice(["auto", "spark", "arrow"]), default="auto", show_default=True,
              help="Who writes Parquet: spark: Spark's writer (rows pass through the JVM); arrow: each task writes "
                   "its files with pyarrow (same layout, schema, rows and commit; about 4x less CPU; local paths and "
                   "URIs pyarrow can open); auto: arrow for a local --output, unless a --spark-conf names a "
                   "spark.sql.parquet/sources/files/hive or spark.hadoop setting, or --partition-by date with a "
                   "session time zone other than UTC.")
@click.option("--engine", type=click.Choice(["spark", "arrow"]), default="spark", show_default=True,
              help="Who runs the planned tasks: spark: a Spark session (--master, --spark-conf); arrow: local "
                   "worker processes, no JVM (pyarrow only; the arrow writer; same files row for row; starts in "
                   "well under a second). See docs/spark-clusters.md.")
@click.option("--jobs", type=click.IntRange(min=1), metavar="N",
              help="--engine arrow: tasks run at once (default: the usable cores).")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="Any Spark setting (repeatable); spark.ui.showConsoleProgress=true shows Spark's stage progress.")
@click.option("--value-format", type=click.Choice(DECODED_FORMATS), default="binary", show_default=True,
              help="Values as typed columns: avro (a struct of the reader schema's fields), json-schema, protobuf "
                   "(JSON string columns), json, string; auto: as the topic's subject's schema type; binary: bytes. "
                   "Records that do not decode go to OUTPUT/_kstore_dead_letters/ (exit 1).")
@click.option("--key-format", type=click.Choice(DECODED_FORMATS), default="binary", show_default=True,
              help="Keys decoded as --value-format says for values.")
@click.option("--schemas-from", type=ExistingPath(), metavar="PATH",
              help="The Schema Registry's _schemas partition dir (or a data dir holding it); default: among PATHs.")
@click.option("--reader-schema", metavar="FILE|SUBJECT",
              help="Avro reader schema: an .avsc file or a subject's latest version (default: <topic>-value's).")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="A setting of remote PATHs' filesystem (repeatable): pyarrow.fs.S3FileSystem's (GcsFileSystem's, "
                   "...) keyword arguments, e.g. endpoint_override=http://minio:9000, region=eu-west-1.")
@click.option("--format", "table_format", type=click.Choice(["parquet", "delta", "iceberg"]), default="parquet",
              show_default=True,
              help="parquet: Parquet files; delta: a Delta Lake table (deltalake); iceberg: an Iceberg table "
                   "(pyiceberg; SQL catalog OUTPUT/_kstore_catalog.db, table kstore.export). One commit per export, "
                   "each partition started after the table's highest offset (a rerun adds no row).")
@click.option("--incremental", "state_dir", metavar="STATE_DIR",
              help="Export only what was appended since the last run with this STATE_DIR (a local dir kstore "
                   "keeps; its first run exports everything): each (topic, partition, offset) once in --output, "
                   "even when a run is killed and run again; offsets retention removed before a run could take "
                   "them are reported, exit 1. For cron; docs/cli.md.")
@json_option("Print the summary as one JSON object.")
@click.pass_context
def command(ctx: click.Context, paths, output: str, master: str, topics: Optional[str], starting_offsets: Optional[str],
            ending_offsets: Optional[str], starting_timestamp: Optional[int], ending_timestamp: Optional[int],
            isolation_level: str, include_headers: bool, include_metadata: bool, partition_by: str,
            parquet_compression: str, mode: Optional[str], on_corruption: str, max_bytes_per_partition: Optional[int], writer: str, engine: str,
            jobs: Optional[int], spark_conf, value_format: str, key_format: str, schemas_from: Optional[str],
            reader_schema: Optional[str], storage_options, table_format: str, state_dir: Optional[str],
            as_json: bool) -> None:
    """Export whole topic directories to Parquet with Spark's Kafka source schema.

    PATH is a data directory, a partition directory or a .log file, local or in
    object storage (s3://, gs://, abfs://, hdfs://; --storage-option). Rows are
    key, value, topic, partition, offset, timestamp, timestampType (+ headers, + metadata),
    exactly what spark.read.format("kafka") gives; control records are never exported.
    Offset and timestamp bounds mean what they mean in Spark's Kafka source and are pushed
    down: segments outside them are not read. Runs on an embedded local[*] Spark (Java is
    all it needs); kstore's code is shipped to the executors of any --master. The source is
    also usable in your own jobs: kstore_cli.spark.register(spark), then
    spark.read.format("kstore").load(PATH).

    Every batch's CRC is checked. Internal topics (__consumer_offsets, __*) are exported
    only when named: --topics '__*', or their partition directory as PATH. Exit codes: 0
    exported; 1 a damaged batch (or, with --on-corruption skip, batches skipped), or no
    partition selected, or records that did not decode (--key-format/--value-format: kept in
    OUTPUT/_kstore_dead_letters/ with coordinates, raw bytes and reason); 2 usage (also an existing --output
    without --mode); 3 a file could not be read, no Java 17+, or a missing jar (its class named). Spark's own logs and progress bars are off
    (KSTORE_SPARK_LOG_LEVEL=WARN, --spark-conf spark.ui.showConsoleProgress=true).

    \b
    Example:
      kstore spark-export /var/lib/kafka/data --output /lake/kafka --topics 'orders*'
      kstore spark-export s3://backups/kafka/broker-1 -o s3://lake/kafka --storage-option region=eu-west-1
      kstore spark-export /var/lib/kafka/data/orders-0 -o out --isolation-level read_committed \\
          --starting-offsets '{"orders":{"0":1000}}' --master spark://10.0.0.5:7077
    """
    from kstore_cli.spark.export import ExportRequest, run_export

    request = ExportRequest(
        paths, output, master=master, topics=topics, starting_offsets=starting_offsets,
        ending_offsets=ending_offsets, starting_timestamp=starting_timestamp, ending_timestamp=ending_timestamp,
        isolation_level=isolation_level, include_headers=include_headers, include_metadata=include_metadata,
        partition_by=partition_by, parquet_compression=parquet_compression, mode=mode,
        spark_conf=_spark_conf(spark_conf), max_bytes_per_partition=max_bytes_per_partition,
        writer=writer, on_corruption=on_corruption, key_format=key_format, value_format=value_format,
        schemas_from=schemas_from, reader_schema=reader_schema, engine=engine, jobs=jobs,
        storage_options=_spark_conf(storage_options, "--storage-option"), incremental=state_dir,
        table_format=table_format,
    )
    summary = _run_with_progress(request, run_export, is_tty() and not as_json)
    click.echo(json.dumps(summary.to_dict(), sort_keys=True) if as_json
               else summary.text(size=human_bytes if is_tty() else None))
    problem = _problem_line(summary)
    if problem:
        click.echo(f"kstore: error: {problem}", err=True)
        exit_with(ExitStatus.PROBLEMS)


def _problem_line(summary) -> Optional[str]:
    """The one error line of an export that ran but left something out (exit 1), None when it did not."""
    from kstore_cli.spark.export import SKIPPED_FILE

    if summary.skipped:
        first = summary.skipped[0]
        return (f"{first.log} at byte {first.position}: {first.reason} ({len(summary.skipped)} damaged or "
                f"truncated batches skipped, listed in {summary.output.rstrip('/')}/{SKIPPED_FILE})")
    if summary.gaps:
        return f"{summary.gaps[0].text()} ({len(summary.gaps)} gaps in this incremental run)"
    if summary.dead_letters:
        return (f"{summary.dead_letters} records did not decode: in {summary.output.rstrip('/')}/"
                "_kstore_dead_letters/ with their reasons")
    return None

def _run_with_progress(request, run_export, show: bool):
    """run_export with a transient progress line on a terminal: input bytes, rows, tasks done/total and
    rate (quiet in pipes and cron). Rows are counted per task (-1 while Spark's own writer runs: unknown)."""
    if not show:
        return run_export(request)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    from kstore_cli.commands._render import console

    bar = Progress(TextColumn("exporting"), BarColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn(),
                   TextColumn("{task.fields[rows]} tasks {task.fields[done]}/{task.fields[tasks]}"),
                   TimeRemainingColumn(), console=console(), transient=True)
    task = bar.add_task("exporting", total=None, rows="", done=0, tasks="?")

    def advance(tasks_done: int, tasks_total: int, rows: int, size: int, bytes_total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        elapsed = bar.tasks[0].elapsed or 0.0
        rate = f" ({rows / elapsed:,.0f}/s)" if rows > 0 and elapsed > 0 else ""
        bar.update(task, completed=size, total=bytes_total, done=tasks_done, tasks=tasks_total,
                   rows=f"{rows:,} rows{rate}," if rows >= 0 else "")

    try:
        return run_export(request, advance)
    finally:
        bar.stop()
