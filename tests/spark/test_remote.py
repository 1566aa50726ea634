"""spark-export from ``s3://`` (a real S3-compatible server, moto on 127.0.0.1, the data dirs uploaded
with boto3): the same rows as the local export, on the shared local session; ranged reads no larger
than the read-ahead (traced by the executors); a connection dropped mid-read retried; a permanent
fault one error line naming the object and the byte range, exit 3; a missing bucket that line at once.
The arrow writer's output to ``s3://`` (from a local data dir and from ``s3://``): the local export's
rows, ``_SUCCESS``, a rerun refused, throttled writes retried; ``--incremental`` with its state dir local."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from kstore_cli.record import storage  # noqa: E402
from tests.s3server import AWS_ENV, BUCKET, FaultProxy, s3_server  # noqa: E402
from tests.spark.conftest import CORPUS_LOGS, arrow_rows, by_key, core_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(gen_dir):
    with s3_server() as srv:
        srv.gen_uri = srv.upload(gen_dir, "gen")
        srv.corpus_uri = srv.upload(CORPUS_LOGS, "corpus")
        yield srv


def _rows(path: Path, headers: bool = True):
    import pyarrow.dataset as pads

    return by_key(arrow_rows(pads.dataset(str(path), format="parquet", partitioning="hive").to_table(),
                             headers=headers))


def test_export_from_s3_equals_the_local_export(spark, server, gen_dir, tmp_path):
    from kstore_cli.spark.export import ExportRequest, export_with

    expected = by_key(core_rows([gen_dir], headers=True))
    out = tmp_path / "arrow"
    summary = export_with(spark, ExportRequest([server.gen_uri], str(out), include_headers=True,
                                               storage_options=server.options()))
    assert summary.records == len(expected) and summary.writer == "arrow"
    assert _rows(out) == expected
    # Spark's writer through the data source, with the executors tracing their ranged reads.
    trace = tmp_path / "trace"
    trace.mkdir()
    out = tmp_path / "spark"
    export_with(spark, ExportRequest([server.corpus_uri], str(out), include_headers=True, writer="spark",
                                     storage_options=server.options(), max_bytes_per_partition=64 * 1024,
                                     extra_options={"traceDir": str(trace)}))
    assert _rows(out) == by_key(core_rows([CORPUS_LOGS], headers=True))
    traces = [json.loads(line) for f in trace.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert traces and all(t["log"].startswith(server.corpus_uri + "/") for t in traces)
    assert all(t["remoteReads"] >= 1 and 0 < t["largestRead"] <= storage.READ_AHEAD for t in traces)
    # Every slice read once, in ranged reads: nothing past its end asked for beyond one read-ahead.
    assert all(t["remoteReads"] <= 2 + (t["end"] - t["start"]) // storage.READ_AHEAD + 1 for t in traces)


def test_the_data_source_reads_s3_with_storage_options(spark, server, gen_dir):
    df = (spark.read.format("kstore").option("storage.endpoint_override", server.endpoint)
          .option("storage.region", "us-east-1").option("storage.scheme", "http")
          .option("storage.access_key", "testing").option("storage.secret_key", "testing")
          .option("topics", "orders").load(server.gen_uri))
    got = sorted((r.partition, r.offset, r.value) for r in df.select("partition", "offset", "value").collect())
    local = sorted((r["partition"], r["offset"], r["value"]) for r in core_rows([gen_dir]) if r["topic"] == "orders")
    assert got and got == local


def test_dropped_connections_are_retried_by_the_tasks(spark, server, tmp_path):
    from kstore_cli.spark.export import ExportRequest, export_with

    proxy = FaultProxy(server.port, faults=3)
    try:
        out = tmp_path / "out"
        export_with(spark, ExportRequest([server.corpus_uri], str(out), include_headers=True,
                                         storage_options=server.options(proxy.endpoint)))
        assert proxy.dropped == 3
    finally:
        proxy.close()
    assert _rows(out) == by_key(core_rows([CORPUS_LOGS], headers=True))


def _cli(server, *args: str, endpoint=None) -> subprocess.CompletedProcess:
    """kstore spark-export ARGS with the storage options that reach `endpoint` (the server by default)."""
    options = [f"--storage-option={k}={v}" for k, v in server.options(endpoint).items()]
    return subprocess.run([sys.executable, "-m", "kstore_cli", "spark-export", *args, *options], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **AWS_ENV})


def test_a_permanent_fault_is_one_line_naming_object_and_range(server, tmp_path):
    proxy = FaultProxy(server.port, faults=None)
    try:
        done = _cli(server, server.corpus_uri + "/v2-none-0", "-o", str(tmp_path / "out"), endpoint=proxy.endpoint)
    finally:
        proxy.close()
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"kstore: error: {server.corpus_uri}/v2-none-0/0000000000000000")
    assert f"failed after {storage.ATTEMPTS} attempts" in lines[0] and "read of bytes 0-" in lines[0]
    assert proxy.dropped == storage.ATTEMPTS


def test_a_missing_bucket_is_one_line_at_once(server, tmp_path):
    proxy = FaultProxy(server.port)
    try:
        done = _cli(server, "s3://no-such-bucket/kafka", "--engine", "arrow", "-o", str(tmp_path / "out"),
                    endpoint=proxy.endpoint)
        assert proxy.requests == 1  # one listing, not retried
        out = _cli(server, server.gen_uri, "--engine", "arrow", "-o", "s3://no-such-bucket/out")
    finally:
        proxy.close()
    assert done.returncode == 3 and done.stderr.strip().splitlines() == [
        "kstore: error: s3://no-such-bucket/kafka: listing failed: AWS Error NO_SUCH_BUCKET during ListObjectsV2 "
        + done.stderr.split("ListObjectsV2 ", 1)[1].strip()]
    assert "The specified bucket does not exist" in done.stderr
    # An output in a missing bucket: before any task runs (pyarrow's writers would fail in each task).
    assert out.returncode == 3 and out.stderr.strip().splitlines() == [
        "kstore: error: s3://no-such-bucket/out: no such bucket: no-such-bucket (kstore creates no bucket)"], out.stderr
    assert not (tmp_path / "out").exists()


def _s3_rows(server, prefix: str):
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(**{k: v for k, v in server.options().items()})
    assert fs.get_file_info(f"{BUCKET}/{prefix}/_SUCCESS").type == pafs.FileType.File
    assert fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}/_temporary", allow_not_found=True)) == []
    table = pads.dataset(f"{BUCKET}/{prefix}", filesystem=fs, format="parquet", partitioning="hive").to_table()
    return by_key(arrow_rows(table, headers=True))


def test_the_arrow_writer_writes_s3(server, gen_dir, tmp_path):
    local = _cli(server, str(gen_dir), "--engine", "arrow", "--include-headers", "-o", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    expected = _rows(tmp_path / "local")
    assert expected == by_key(core_rows([gen_dir], headers=True))
    for source, prefix in ((str(gen_dir), "out-from-local"), (server.gen_uri, "out-from-s3")):
        done = _cli(server, source, "--engine", "arrow", "--include-headers", "-o", f"s3://{BUCKET}/{prefix}")
        assert done.returncode == 0, done.stderr
        assert _s3_rows(server, prefix) == expected, source
    again = _cli(server, str(gen_dir), "--engine", "arrow", "-o", f"s3://{BUCKET}/out-from-local")
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"kstore: error: s3://{BUCKET}/out-from-local already exists: use --mode overwrite to replace it, "
        "or --mode append to add to it"]


def test_throttled_writes_are_retried(server, gen_dir, tmp_path):
    proxy = FaultProxy(server.port, faults=3, answer=(503, "SlowDown"), method=b"PUT")
    try:
        done = _cli(server, str(gen_dir), "--engine", "arrow", "--include-headers", "-o", f"s3://{BUCKET}/throttled",
                    endpoint=proxy.endpoint)
    finally:
        proxy.close()
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert proxy.dropped == 3 and proxy.ranged > 3
    assert _s3_rows(server, "throttled") == by_key(core_rows([gen_dir], headers=True))


def test_incremental_runs_into_s3(server, gen_dir, tmp_path):
    state, output = str(tmp_path / "state"), f"s3://{BUCKET}/incremental"
    first = _cli(server, str(gen_dir), "--engine", "arrow", "--include-headers", "--incremental", state, "-o", output)
    assert first.returncode == 0, first.stderr
    second = _cli(server, str(gen_dir), "--engine", "arrow", "--include-headers", "--incremental", state, "-o",
                  output, "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["records"] == 0
    assert _s3_rows(server, "incremental") == by_key(core_rows([gen_dir], headers=True))


def test_the_arrow_engine_reads_s3_without_a_jvm(server, gen_dir, tmp_path):
    """--engine arrow (forked local processes) from s3://: the storage options reach each process, rows as local."""
    from kstore_cli.spark.engines import LocalEngine
    from kstore_cli.spark.export import ExportRequest, export_on

    out = tmp_path / "local-engine"
    request = ExportRequest([server.gen_uri], str(out), include_headers=True, engine="arrow", jobs=2,
                            storage_options=server.options())
    summary = export_on(LocalEngine(2), request)
    assert summary.engine == "arrow" and summary.tasks >= 2
    assert _rows(out) == by_key(core_rows([gen_dir], headers=True))
