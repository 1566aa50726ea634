"""The ``kstore`` data source and the export on a real local[2] Spark session."""

from __future__ import annotations

import glob
import json
import os

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kstore_cli.errors import CorruptRecordError  # noqa: E402
from kstore_cli.log.logdir import Partition, resolve  # noqa: E402
from kstore_cli.spark.export import ExportRequest, SparkJobError, export_with  # noqa: E402

from tests.spark.conftest import (  # noqa: E402
    CORPUS_LOGS,
    TXN_PARTITION,
    arrow_rows,
    by_key,
    core_rows,
    transaction_outcomes,
)

# Spark's Kafka source schema (KafkaRecordToRowConverter), written out independently.
KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])
HEADERS_FIELD = StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                             StructField("value", BinaryType())])))


def load(spark, path, **options):
    reader = spark.read.format("kstore")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(path))


def spark_rows(df, headers=False):
    return arrow_rows(df.toArrow(), headers=headers)


def read_parquet(out, partitioning="hive"):
    return pads.dataset(str(out), format="parquet", partitioning=partitioning).to_table()


def test_schema_is_sparks_kafka_source_schema(spark):
    assert load(spark, CORPUS_LOGS).schema == KAFKA_SCHEMA
    assert load(spark, CORPUS_LOGS, includeHeaders="true").schema == StructType(KAFKA_SCHEMA.fields + [HEADERS_FIELD])
    meta = load(spark, TXN_PARTITION, includeMetadata="true").schema
    assert meta.fields[:7] == KAFKA_SCHEMA.fields
    assert [(f.name, f.dataType) for f in meta.fields[7:]] == [
        ("leaderEpoch", IntegerType()), ("producerId", LongType()), ("producerEpoch", ShortType()),
        ("sequence", IntegerType()), ("isTransactional", BooleanType()), ("batchBaseOffset", LongType()),
        ("compression", StringType())]


def test_corpus_export_to_parquet_matches_the_core_row_for_row(spark, tmp_path):
    out = tmp_path / "corpus"
    summary = export_with(spark, ExportRequest([str(CORPUS_LOGS)], str(out), include_headers=True))
    expected = by_key(core_rows([CORPUS_LOGS], headers=True))
    assert summary.records == len(expected) > 6000
    # Internal topics are left out unless named, and said so.
    assert summary.kafka_partitions == len(resolve([str(CORPUS_LOGS)])) - 2 == 18
    assert summary.internal_left_out == ["__consumer_offsets-0", "__transaction_state-0"]
    assert "not exported: 2 partitions of internal topics (__consumer_offsets, __transaction_state)" in summary.text()
    table = read_parquet(out)
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("key").type == pa.binary()
    assert by_key(arrow_rows(table, headers=True)) == expected
    # and read back by Spark
    back = spark.read.parquet(str(out))
    assert by_key(spark_rows(back, headers=True)) == expected


def test_generated_multi_topic_dir_with_byte_range_splits(spark, gen_dir):
    expected = by_key(core_rows([gen_dir], headers=True))
    whole = load(spark, gen_dir, includeHeaders="true")
    split = load(spark, gen_dir, includeHeaders="true", maxBytesPerPartition="4096")
    assert split.rdd.getNumPartitions() > 3 * whole.rdd.getNumPartitions()
    assert by_key(spark_rows(whole, headers=True)) == expected
    assert by_key(spark_rows(split, headers=True)) == expected


def test_one_segment_as_byte_ranges_gives_the_rows_of_one_split(spark, gen_dir):
    log = sorted(glob.glob(str(gen_dir / "orders-1" / "*.log")))[1]
    one = load(spark, log)
    many = load(spark, log, maxBytesPerPartition="2048")
    assert one.rdd.getNumPartitions() == 1 and many.rdd.getNumPartitions() >= 5
    assert spark_rows(many) == spark_rows(one) == core_rows([log])


def test_read_committed_differs_exactly_by_aborted_and_open_transactions(spark):
    outcome = transaction_outcomes(str(TXN_PARTITION))
    uncommitted = spark_rows(load(spark, TXN_PARTITION))
    committed = spark_rows(load(spark, TXN_PARTITION, **{"kafka.isolation.level": "read_committed"}))
    assert by_key(uncommitted) == by_key(core_rows([TXN_PARTITION]))
    dropped = {r["offset"] for r in uncommitted} - {r["offset"] for r in committed}
    assert dropped == outcome["aborted"] | outcome["open"]
    assert len(outcome["aborted"]) > 20
    assert by_key(committed) == by_key([r for r in uncommitted if r["offset"] not in dropped])


def _trace(path):
    out = []
    for name in glob.glob(os.path.join(path, "*.jsonl")):
        with open(name) as f:
            out.extend(json.loads(line) for line in f)
    return out


def test_offset_range_reads_only_segments_inside_it(spark, gen_dir, tmp_path):
    part = Partition(str(gen_dir / "orders-0"))
    lo, hi = part.segments[1].base_offset + 137, part.segments[3].base_offset + 20
    trace = tmp_path / "trace"
    trace.mkdir()
    df = load(spark, part.path, startingOffsets=json.dumps({"orders": {"0": lo}}),
              endingOffsets=json.dumps({"orders": {"0": hi}}), traceDir=str(trace))
    assert [r["offset"] for r in spark_rows(df)] == list(range(lo, hi))
    touched = _trace(str(trace))
    logs = {t["log"] for t in touched}
    assert logs == {s.log for s in part.segments[1:4]}
    read = sum(t["bytesRead"] for t in touched)
    assert read < sum(os.path.getsize(s.log) for s in part.segments[1:4])
    # Executors read with the driver's record decoder (test_cluster checks it from the shipped zip).
    from kstore_cli.record import decode

    assert {t["decoder"] for t in touched} == {decode.BACKEND}


def test_timestamp_options_select_from_kafkas_offset_for_time(spark, gen_dir):
    rows = core_rows([gen_dir / "clicks-0"])
    t0, t1 = rows[300]["timestamp"] // 1000, rows[1200]["timestamp"] // 1000
    df = load(spark, gen_dir, topics="clicks", startingTimestamp=str(t0), endingTimestamp=str(t1))
    got = spark_rows(df)
    for p in range(3):
        mine = core_rows([gen_dir / f"clicks-{p}"])
        start = next(r["offset"] for r in mine if r["timestamp"] >= t0 * 1000)
        end = next((r["offset"] for r in mine if r["timestamp"] >= t1 * 1000), mine[-1]["offset"] + 1)
        assert [r["offset"] for r in got if r["partition"] == p] == list(range(start, end))


def test_filter_pushdown_prunes_partitions_and_segments(spark, gen_dir, tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    df = load(spark, gen_dir, filterPushdown="true", traceDir=str(trace))
    got = spark_rows(df.where("topic = 'clicks' AND partition = 1 AND offset >= 1000 AND offset < 1100"))
    assert [(r["topic"], r["partition"], r["offset"]) for r in got] == [("clicks", 1, o) for o in range(1000, 1100)]
    logs = {t["log"] for t in _trace(str(trace))}
    part = Partition(str(gen_dir / "clicks-1"))
    holding = [s.log for s, nxt in zip(part.segments, part.segments[1:] + [None])
               if s.base_offset < 1100 and (nxt is None or nxt.base_offset > 1000)]
    assert logs == set(holding) and len(holding) < len(part.segments)


def test_timestamp_filter_pushdown_is_exact(spark, gen_dir):
    rows = core_rows([gen_dir / "orders-1"])
    lo_us, hi_us = rows[500]["timestamp"] + 1, rows[2000]["timestamp"]
    df = load(spark, gen_dir / "orders-1", filterPushdown="true")
    cond = (f"timestamp > timestamp_micros({lo_us}) AND timestamp <= timestamp_micros({hi_us})")
    got = spark_rows(df.where(cond))
    assert got == [r for r in rows if lo_us < r["timestamp"] <= hi_us]


def test_metadata_columns(spark):
    df = load(spark, TXN_PARTITION, includeMetadata="true")
    table = df.toArrow()
    codecs = set(table.column("compression").to_pylist())
    assert {"gzip", "lz4", "zstd", "snappy", "none"} <= codecs
    pids = set(table.column("producerId").to_pylist())
    assert {5000, 5001, 5002, 6000} <= pids
    offsets = table.column("offset").to_pylist()
    bases = table.column("batchBaseOffset").to_pylist()
    assert all(b <= o for b, o in zip(bases, offsets))


def test_parquet_options_partitioning_and_modes(spark, tmp_path):
    out = tmp_path / "by-date"
    req = ExportRequest([str(TXN_PARTITION)], str(out), partition_by="date", parquet_compression="zstd")
    first = export_with(spark, req)
    assert [os.path.basename(d) for d in glob.glob(str(out / "date=*"))] == ["date=2023-11-14"]
    files = glob.glob(str(out / "**" / "*.parquet"), recursive=True)
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "ZSTD"
    with pytest.raises(SparkJobError, match="already exists"):
        export_with(spark, req)
    export_with(spark, ExportRequest([str(TXN_PARTITION)], str(out), partition_by="date", mode="append"))
    assert read_parquet(out).num_rows == 2 * first.records
    flat = tmp_path / "flat"
    export_with(spark, ExportRequest([str(TXN_PARTITION)], str(flat), partition_by="none"))
    table = read_parquet(flat, partitioning=None)
    assert table.schema.names == [f.name for f in KAFKA_SCHEMA.fields]
    assert by_key(arrow_rows(table)) == by_key(core_rows([TXN_PARTITION]))


@pytest.mark.parametrize("partition_by", ["topic,partition", "none", "date"])
def test_arrow_writer_writes_what_sparks_writer_writes(spark, tmp_path, partition_by):
    """--writer arrow (each task writes its files with pyarrow): same directories, file count, Spark
    schema and rows as Spark's writer, read back by Spark and by pyarrow; the modes behave alike."""
    outs = {}
    for writer in ("spark", "arrow"):
        out = tmp_path / writer
        req = ExportRequest([str(CORPUS_LOGS)], str(out), include_headers=True, include_metadata=True,
                            partition_by=partition_by, writer=writer)
        summary = export_with(spark, req)
        files = sorted(glob.glob(str(out / "**" / "*.parquet"), recursive=True))
        df = spark.read.parquet(str(out))
        table = read_parquet(out, partitioning=None if partition_by == "none" else "hive")
        outs[writer] = (summary.records, summary.parquet_files, sorted(os.path.relpath(os.path.dirname(f), out)
                                                                       for f in files),
                        df.schema, sorted(map(str, df.collect())),
                        sorted(map(str, table.to_pylist())), os.path.exists(out / "_SUCCESS"))
        if writer == "arrow":
            with pytest.raises(SparkJobError, match="already exists"):
                export_with(spark, req)
            export_with(spark, ExportRequest([str(TXN_PARTITION)], str(out), partition_by=partition_by,
                                             writer=writer, include_headers=True, include_metadata=True, mode="append"))
            assert spark.read.parquet(str(out)).count() == summary.records + len(core_rows([TXN_PARTITION]))
            export_with(spark, ExportRequest([str(TXN_PARTITION)], str(out), partition_by=partition_by,
                                             writer=writer, include_headers=True, include_metadata=True,
                                             mode="overwrite"))
            assert spark.read.parquet(str(out)).count() == len(core_rows([TXN_PARTITION]))
        assert not os.path.exists(out / "_temporary")
    assert outs["arrow"] == outs["spark"]
    assert outs["arrow"][0] == len(core_rows([CORPUS_LOGS]))


def test_a_failed_arrow_export_leaves_no_partial_output(spark, tmp_path):
    """A task that fails (a damaged segment) fails the job; the tasks that did commit are not left
    behind as Parquet files a reader would take for the whole export (Spark's committer neither)."""
    import shutil
    import struct

    data = tmp_path / "data"
    shutil.copytree(TXN_PARTITION, data / "good-0")
    shutil.copytree(TXN_PARTITION, data / "broken-0")
    last = sorted((data / "broken-0").glob("*.log"))[-1]
    with open(last, "r+b") as f:
        f.seek(8)
        f.write(struct.pack(">i", 5))  # a batch size below Kafka's minimum: CorruptRecordError
    out = tmp_path / "out"
    with pytest.raises(CorruptRecordError, match=f"^{last} at byte 0: Found record size 5 smaller than minimum"):
        export_with(spark, ExportRequest([str(data)], str(out), writer="arrow", max_bytes_per_partition=4096))
    # The output did not exist: nothing of it is left, so the same command runs again once the input is mended.
    assert not out.exists()
    # An output that existed (mode append) keeps what it had, and gets nothing of the failed job.
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(CorruptRecordError):
        export_with(spark, ExportRequest([str(data)], str(out), writer="arrow", max_bytes_per_partition=4096,
                                         mode="append"))
    assert sorted(os.listdir(out)) == ["keep.txt"]


def test_the_arrow_writer_leaves_the_callers_job_group_alone(spark, tmp_path):
    sc = spark.sparkContext
    sc.setJobGroup("mine", "my description")
    try:
        export_with(spark, ExportRequest([str(TXN_PARTITION)], str(tmp_path / "out"), writer="arrow"))
        assert sc.getLocalProperty("spark.jobGroup.id") == "mine"
        assert sc.getLocalProperty("spark.job.description") == "my description"
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)
    export_with(spark, ExportRequest([str(TXN_PARTITION)], str(tmp_path / "out2"), writer="arrow"))
    assert sc.getLocalProperty("spark.jobGroup.id") is None


# --------------------------------------------------------------------------- damaged and truncated batches


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """orders-0 with a flipped byte inside a record (segment 1) and 100 bytes cut from the end of
    segment 2 (not the last); clicks-0 intact. Returns (data dir, expected rows, [(log, position)])."""
    from kstore_cli.record.reader import read_batches

    from tests.spark.datagen import write_partition

    root = tmp_path_factory.mktemp("damaged")
    for topic, seed in (("orders", 1), ("clicks", 2)):
        write_partition(str(root / f"{topic}-0"), 600, seed=seed, segment_bytes=8 * 1024, index_interval=1024,
                        batch_records=20, codecs=(0, 4))
    before = core_rows([root])
    logs = sorted(glob.glob(str(root / "orders-0" / "*.log")))
    flipped = next(b for b in read_batches(logs[1]) if b.position <= 3000 < b.position + b.size)
    with open(logs[1], "r+b") as f:
        f.seek(flipped.position + flipped.size - 10)
        byte = f.read(1)[0]
        f.seek(flipped.position + flipped.size - 10)
        f.write(bytes([byte ^ 0x40]))
    cut = list(read_batches(logs[2]))[-1]
    os.truncate(logs[2], os.path.getsize(logs[2]) - 100)
    lost = {("orders", o) for b in (flipped, cut) for o in range(b.base_offset, b.last_offset + 1)}
    expected = by_key([r for r in before if (r["topic"], r["offset"]) not in lost])
    return root, expected, [(logs[1], flipped.position), (logs[2], cut.position)]


def test_the_source_fails_on_a_damaged_batch_and_skips_it_when_asked(spark, damaged):
    from kstore_cli.spark.source import skipped_accumulator

    root, expected, where = damaged
    with pytest.raises(Exception) as info:
        load(spark, root).collect()
    assert f"kstore_cli.errors.CorruptRecordError: {where[0][0]} at byte {where[0][1]}: Record is corrupt" in str(
        info.value)
    acc = skipped_accumulator(spark)
    df = load(spark, root, onCorruption="skip", skippedAccumulator=str(acc.aid))
    assert by_key(spark_rows(df)) == expected
    assert sorted((d["file"], d["position"]) for d in acc.value) == where


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_export_fails_with_file_and_byte_or_skips_and_lists(spark, damaged, tmp_path, writer):
    from kstore_cli.spark.export import SKIPPED_FILE

    root, expected, where = damaged
    out = tmp_path / "out"
    with pytest.raises(CorruptRecordError) as info:
        export_with(spark, ExportRequest([str(root)], str(out), writer=writer))
    assert str(info.value).startswith(f"{where[0][0]} at byte {where[0][1]}: Record is corrupt (stored crc = ")
    assert str(info.value).endswith("; --on-corruption skip exports the other batches and lists this one")
    assert not out.exists()  # so that the same command runs again (without --mode) once the input is mended
    summary = export_with(spark, ExportRequest([str(root)], str(out), writer=writer, on_corruption="skip"))
    assert [(b.log, b.position) for b in summary.skipped] == where
    assert summary.records == len(expected)
    assert by_key(arrow_rows(read_parquet(out))) == expected
    assert {"_SUCCESS", SKIPPED_FILE} <= set(os.listdir(out))
    listed = json.loads((out / SKIPPED_FILE).read_text())["skippedBatches"]
    assert listed == [b.to_dict() for b in summary.skipped]
    assert summary.to_dict()["skipped_batches"] == [b.to_dict(snake_case=True) for b in summary.skipped]
    assert f"skipped 2 damaged or truncated batches (listed in {out}/{SKIPPED_FILE}):" in summary.text()
    # Appending keeps what earlier exports skipped.
    export_with(spark, ExportRequest([str(root)], str(out), writer=writer, on_corruption="skip", mode="append"))
    assert len(json.loads((out / SKIPPED_FILE).read_text())["skippedBatches"]) == 4


def test_the_command_lists_skipped_batches_exits_1_and_keeps_sparks_logs_off(damaged, tmp_path):
    """One real run: the summary lists what was skipped, stderr has kstore's one line and nothing of
    Spark's (no log4j lines, no JVM warnings, no stage progress bars)."""
    import subprocess
    import sys

    from kstore_cli.spark.export import SKIPPED_FILE

    root, expected, where = damaged
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "KSTORE_SPARK_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "kstore_cli", "spark-export", str(root), "--output", str(out),
                           "--master", "local[1]", "--on-corruption", "skip"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"exported {len(expected)} records from 2 Kafka partitions")
    assert lines[1] == f"skipped 2 damaged or truncated batches (listed in {out}/{SKIPPED_FILE}):"
    assert [line.split(":")[0] for line in lines[2:]] == [f"  {log} at byte {pos}" for log, pos in where]
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kstore: error: {where[0][0]} at byte {where[0][1]}: Record is corrupt")
    assert done.stderr.rstrip().endswith(f"(2 damaged or truncated batches skipped, listed in {out}/{SKIPPED_FILE})")
    assert (out / "_SUCCESS").exists() and (out / SKIPPED_FILE).exists()
