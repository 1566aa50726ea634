"""Benchmark: spark-export of a generated data dir on local[1] and local[2], against a
single-process pyarrow writer over the same core (not a test).

    python bench/spark_export.py [--records 5000000] [--partitions 4] [--dir /tmp] [--keep]

Generates a data dir (v2 batches of 50 records, ~100-byte values, no compression, kstore's
builder and Kafka's index rule), then times:

* baseline: plan_read + read_task (the same planner, reader and ColumnBuilder the source
  uses) in this process, each Arrow batch written by one pyarrow ParquetWriter (snappy);
* Spark local[1] and local[2]: export_with on a fresh session (session start reported
  apart), Parquet snappy, partitioned by topic,partition;
* a profile of the baseline's reading path: where the time goes.

Rows/s and MB/s (log bytes in per second) for each. The issue's target is >= 1 M rows/s per
core once a native columnar decoder exists; this measures the pure-Python path.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.spark.datagen import write_data_dir  # noqa: E402


def baseline(data_dir: str, out: str) -> tuple:
    import pyarrow.parquet as pq

    from kstore_cli.spark.columns import arrow_schema
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read
    from kstore_cli.spark.read import read_task

    started = time.perf_counter()
    plan = plan_read(ReadOptions({"path": data_dir}))
    rows = 0
    with pq.ParquetWriter(out, arrow_schema(), compression="snappy") as writer:
        for task in plan.tasks:
            for batch in read_task(task):
                writer.write_batch(batch)
                rows += batch.num_rows
    return rows, time.perf_counter() - started, plan.bytes_in


def profile_read(data_dir: str, limit_tasks: int = 2) -> str:
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read
    from kstore_cli.spark.read import read_task

    plan = plan_read(ReadOptions({"path": data_dir, "maxBytesPerPartition": str(32 * 1024 * 1024)}))
    prof = cProfile.Profile()
    prof.enable()
    for task in plan.tasks[:limit_tasks]:
        for _batch in read_task(task):
            pass
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    return buf.getvalue()


def spark_run(data_dir: str, out: str, master: str) -> tuple:
    from kstore_cli.spark.export import ExportRequest, build_session, export_with

    t0 = time.perf_counter()
    spark = build_session(master, {"spark.driver.memory": "3g"})
    t1 = time.perf_counter()
    try:
        summary = export_with(spark, ExportRequest([data_dir], out))
    finally:
        spark.stop()
    return summary.records, summary.seconds, summary.bytes_in, t1 - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--masters", default="local[1],local[2]")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kstore-bench-spark-", dir=args.dir)
    try:
        data = os.path.join(work, "data")
        t = time.perf_counter()
        counts = write_data_dir(data, {"bench": (args.partitions, args.records // args.partitions)}, seed=1,
                                codecs=(0,), headers=False, segment_bytes=128 * 1024 * 1024,
                                index_interval=4096, value_size=100)
        print(f"generated {counts['records']:,} records, {counts['log_bytes'] / 1e6:.1f} MB in "
              f"{counts['segments']} segments, {time.perf_counter() - t:.1f} s", flush=True)
        mb = counts["log_bytes"] / 1e6
        rows, secs, _ = baseline(data, os.path.join(work, "baseline.parquet"))
        print(f"baseline (1 process, pyarrow writer): {rows:,} rows in {secs:.1f} s = {rows / secs:,.0f} rows/s, "
              f"{mb / secs:.1f} MB/s", flush=True)
        for master in args.masters.split(","):
            out = os.path.join(work, "out-" + master.replace("[", "").replace("]", ""))
            rows, secs, _bytes, start = spark_run(data, out, master)
            print(f"spark {master}: {rows:,} rows in {secs:.1f} s = {rows / secs:,.0f} rows/s, {mb / secs:.1f} MB/s "
                  f"(session start {start:.1f} s, not included)", flush=True)
        print("profile of the reading path (2 tasks of 32 MiB):")
        print(profile_read(data))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
