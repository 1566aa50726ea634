"""Where spark-export's start-up goes, and time to the first task: Spark engine vs arrow engine.

    python bench/spark_startup.py                 # 2 records and a larger export (--records), each engine
    python bench/spark_startup.py --phases        # also the Spark start-up phases, one fresh interpreter each

Each run is a fresh interpreter (a fresh JVM for the Spark engine), as `kstore spark-export` is.
"first task" is the time from the interpreter's start until the first planned task has written its
files (the progress callback's first count); "total" until the export returned. The phases: import
pyspark, the JVM started with its py4j gateway (launch_gateway), the SparkContext (the arrow writer
builds no session), shipping kstore (zip + addPyFile), planning, and the first job's first task (its Python worker's start).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_EXPORT = r"""
import json, os, sys, time
started = float(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from kstore_cli.spark.export import ExportRequest, run_export
first = []
def progress(done, total, rows, size, size_total):
    if done and not first:
        first.append(time.time() - started)
req = ExportRequest([sys.argv[3]], sys.argv[4], engine=sys.argv[5], writer="arrow")
summary = run_export(req, progress=progress)
print(json.dumps({"first_task": first[0] if first else None, "total": time.time() - started,
                  "records": summary.records}))
"""

def _run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, repr(time.time()), ROOT, *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    if done.returncode:
        raise SystemExit(f"failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def phases(data: str) -> dict:
    """The Spark engine's start-up phases (seconds since the interpreter started, cumulative)."""
    code = r"""
import json, os, sys, tempfile, time
started = float(sys.argv[1])
sys.path.insert(0, sys.argv[2])
marks = {}
def mark(name):
    marks[name] = round(time.time() - started, 2)
from kstore_cli.spark.export import ExportRequest
from kstore_cli.spark.session import build_session
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import plan_read
mark("python + kstore imports")
import pyspark.context, pyspark.sql
mark("import pyspark")
real = pyspark.context.launch_gateway
def timed(*a, **k):
    g = real(*a, **k)
    mark("JVM started, py4j gateway up")
    return g
pyspark.context.launch_gateway = timed
spark = build_session("local[*]", None, False, "arrow", tempfile.mkdtemp(), context_only=True)
mark("SparkContext built (no session: arrow writer)")
from kstore_cli.spark.engines import SparkEngine
SparkEngine(spark).prepare(source=False)
mark("kstore shipped (addPyFile)")
req = ExportRequest([sys.argv[3]], tempfile.mkdtemp() + "/out", writer="arrow")
plan = plan_read(ReadOptions(req.reader_options(min_partitions=spark.defaultParallelism)))
mark("planned")
spark.parallelize([1], 1).map(lambda x: x).collect()
mark("first task done (Python worker started)")
spark.parallelize([1], 1).map(lambda x: x).collect()
mark("second job done")
spark.stop()
mark("session stopped")
print(json.dumps(marks))
"""
    return _run(code, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000, help="records of the larger export")
    parser.add_argument("--phases", action="store_true", help="also print the Spark start-up phases")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from tests.spark.datagen import write_data_dir

    work = tempfile.mkdtemp(prefix="kstore-startup-")
    small, large = os.path.join(work, "small"), os.path.join(work, "large")
    write_data_dir(small, {"tiny": (1, 2)}, seed=1)
    write_data_dir(large, {"orders": (4, args.records // 4)}, seed=2, segment_bytes=64 * 1024 * 1024)
    try:
        if args.phases:
            previous = 0.0
            for name, at in phases(os.path.join(small, "tiny-0")).items():
                print(f"  {name:<48} {at:6.2f} s  (+{at - previous:.2f})")
                previous = at
        _compare(args, work, small, large)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compare(args: argparse.Namespace, work: str, small: str, large: str) -> None:
    results = {}
    for label, data in (("2 records", small), (f"{args.records} records", large)):
        for engine in ("spark", "arrow"):
            out = os.path.join(work, f"out-{engine}-{len(results)}")
            results[(label, engine)] = r = _run(_EXPORT, data, out, engine)
            print(f"{label:>16} {engine:>5} engine: first task {r['first_task']:6.2f} s, total {r['total']:6.2f} s, "
                  f"{r['records']} records")
        s, a = results[(label, "spark")], results[(label, "arrow")]
        print(f"{label:>16} spark/arrow: first task {s['first_task'] / a['first_task']:.1f}x, "
              f"total {s['total'] / a['total']:.1f}x")


if __name__ == "__main__":
    main()
