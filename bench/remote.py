"""spark-export's remote inputs: the same data read from ``s3://`` (moto in server mode on 127.0.0.1, and
bench/s3files.py's endpoint over the same files: ranges sent by the kernel, as an object store serves them
without reading the whole object) and from local disk, on the same machine.

    python bench/remote.py                 # 4 partitions x 32 MiB, 2 task processes
    python bench/remote.py --mib 64 --spark  # also the whole export on a local[2] Spark session

Figures printed (and with --json, written):

* throughput of the planned tasks (every task read into Arrow in its own process, ``--jobs`` at a
  time, the way executors run them; bytes over the tasks' own read time): local MB/s, remote MB/s,
  remote/local ratio (goal >= 0.7);
* peak memory per task: growth of a task process's RSS (VmHWM over VmRSS before) while it reads one task, local
  and remote, and the largest single ranged read (the read-ahead bounds it);
* time to first task: from the start of planning to a task's first Arrow batch;
* with --spark: the whole export (export_with, arrow writer) local vs remote, seconds and ratio.

moto is a Python server that reads a whole object for each ranged GET: its throughput is a floor for the
remote figure, not an object store's. ``--server files`` leaves out the server's own cost as far as a
server on the same cores can.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.inputs import Kind, write_partition  # noqa: E402
from bench.s3files import FileS3  # noqa: E402
from tests.s3server import AWS_ENV, S3Server  # noqa: E402


def _status(field: str) -> int:
    """A /proc/self/status memory figure, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _read_task(args: Tuple[object, Dict[str, str]]) -> Tuple[int, int, float, int]:
    """One task read in this process: (rows, bytes, seconds, RSS growth in bytes, largest ranged read)."""
    from kstore_cli.record import storage
    from kstore_cli.spark.read import read_task

    task, options, read_ahead = args
    storage.configure(options)
    storage.READ_AHEAD = read_ahead
    storage.ReadStats.largest = 0
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from here
    started = time.perf_counter()
    rows = sum(b.num_rows for b in read_task(task, include_headers=True))
    seconds = time.perf_counter() - started
    grown = _status("VmHWM") - before
    return rows, task.size, seconds, grown, storage.ReadStats.largest


def _plan(path: str, options: Dict[str, str], jobs: int):
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read

    opts = {"paths": json.dumps([path]), "includeHeaders": "true", "minPartitions": str(jobs),
            "maxBytesPerPartition": str(32 << 20)}
    opts.update({f"storage.{k}": v for k, v in options.items()})
    return plan_read(ReadOptions(opts))


def measure(path: str, options: Dict[str, str], jobs: int, read_ahead: int) -> dict:
    """Plan, first batch, and every task read in `jobs` fresh processes (one task each)."""
    from kstore_cli.spark.read import read_task

    started = time.perf_counter()
    plan = _plan(path, options, jobs)
    planned = time.perf_counter() - started
    next(iter(read_task(plan.tasks[0], include_headers=True)))
    first = time.perf_counter() - started
    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with ctx.Pool(jobs, maxtasksperchild=1) as pool:
        results = pool.map(_read_task, [(t, options, read_ahead) for t in plan.tasks], chunksize=1)
    seconds = time.perf_counter() - started
    rows = sum(r[0] for r in results)
    size = sum(r[1] for r in results)
    busy = sum(r[2] for r in results)  # the tasks' own read time (process start-up left out)
    return {"rows": rows, "bytes": size, "tasks": len(plan.tasks), "wall_seconds": round(seconds, 3),
            "mb_per_s": round(size / busy / 1e6, 1), "rows_per_s": round(rows / busy),
            "plan_seconds": round(planned, 3), "first_task_seconds": round(first, 3),
            "peak_task_rss_growth_mb": round(max(r[3] for r in results) / 1e6, 1),
            "largest_read_mb": round(max(r[4] for r in results) / 1e6, 2)}


def spark_export(local: str, remote: str, options: Dict[str, str], out: str) -> dict:
    from kstore_cli.spark.export import ExportRequest, export_with
    from kstore_cli.spark.session import build_session

    spark = build_session("local[2]", writer="arrow")
    try:
        figures = {}
        # A first, untimed export: the JVM's JIT and the Python workers warm for both timed ones.
        export_with(spark, ExportRequest([local], os.path.join(out, "warm-up")))
        for name, path, opts in (("local", local, {}), ("remote", remote, options)):
            started = time.perf_counter()
            summary = export_with(spark, ExportRequest([path], os.path.join(out, name), storage_options=opts))
            figures[name] = {"seconds": round(time.perf_counter() - started, 2), "records": summary.records}
        figures["ratio"] = round(figures["local"]["seconds"] / figures["remote"]["seconds"], 2)
        return figures
    finally:
        spark.stop()


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="MiB per partition (4 partitions)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--read-ahead-mib", type=int, default=0, help="the tasks' read-ahead (default: storage's)")
    parser.add_argument("--spark", action="store_true", help="also the whole export on local[2] Spark")
    parser.add_argument("--server", choices=["moto", "files", "both"], default="both",
                        help="the S3 endpoint: moto's server, bench/s3files.py's (ranges sent by the kernel), or both")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    os.environ.update(AWS_ENV)
    with tempfile.TemporaryDirectory(prefix="kstore-bench-remote-") as tmp:
        data = os.path.join(tmp, "data")
        for p in range(4):
            write_partition(os.path.join(data, f"bench-{p}"), Kind(2, "lz4", 1024, 100),
                            total_bytes=args.mib << 20, segment_bytes=64 << 20, seed=p)
        from kstore_cli.record import storage

        read_ahead = (args.read_ahead_mib << 20) or storage.READ_AHEAD
        figures = {"local": measure(data, {}, args.jobs, read_ahead)}
        for name in (["moto", "files"] if args.server == "both" else [args.server]):
            server = S3Server() if name == "moto" else FileS3(data).__enter__()
            try:
                uri = server.upload(Path(data), "bench") if name == "moto" else server.uri()
                options = server.options()
                figures[name] = measure(uri, options, args.jobs, read_ahead)
                figures[f"ratio_{name}"] = round(figures[name]["mb_per_s"] / figures["local"]["mb_per_s"], 2)
                if args.spark:
                    figures[f"spark_export_{name}"] = spark_export(data, uri, options, os.path.join(tmp, "out", name))
            finally:
                server.stop() if name == "moto" else server.__exit__(None, None, None)
    for name in [n for n in ("local", "moto", "files") if n in figures]:
        f = figures[name]
        print(f"{name:6}  {f['mb_per_s']:8.1f} MB/s  {f['rows_per_s']:>10,} rows/s per task  {f['tasks']} tasks  "
              f"plan {f['plan_seconds']:.2f} s  first task {f['first_task_seconds']:.2f} s  "
              f"peak task RSS +{f['peak_task_rss_growth_mb']} MB  largest read {f['largest_read_mb']} MB")
    for name in ("moto", "files"):
        if f"ratio_{name}" in figures:
            print(f"remote ({name})/local throughput: {figures[f'ratio_{name}']} (goal >= 0.7)")
        if f"spark_export_{name}" in figures:
            s = figures[f"spark_export_{name}"]
            print(f"spark-export local[2] ({name}): local {s['local']['seconds']} s, remote {s['remote']['seconds']} s, "
                  f"ratio {s['ratio']} ({s['local']['records']} records)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
