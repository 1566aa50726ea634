"""spark-export's rows/s per core on the three ways it runs, on the same data in one run:

* ``--engine arrow --jobs N`` (forked local processes, no JVM);
* ``--master local[N]`` (an embedded Spark, the arrow writer);
* ``--master spark://127.0.0.1:PORT``: a standalone master and N workers of one core each, started here
  from the pyspark installation (``bin/spark-class``, loopback only) and stopped by PID afterwards.

    python bench/spark_cluster.py [--mib 64] [--cores 2] [--repeat 2] [--json FILE]

Each mode runs the CLI as a subprocess (``python -m kstore_cli spark-export ... --json``); the figure is the
best of `--repeat` runs: wall seconds, records, rows/s, rows/s per core, and the ratio of each mode to the
arrow engine. Spark's fixed start-up (JVM, context, first Python worker) is inside the wall time, as an
operator sees it; the summary's own ``seconds`` is printed beside it.
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
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.inputs import Kind, write_partition  # noqa: E402


def _export(data: str, out: str, extra: List[str], env: Dict[str, str]) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "kstore_cli", "spark-export", data, "-o", out, "--json", *extra]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr[-1500:]}")
    summary = json.loads(done.stdout.splitlines()[0])
    return {"wall": wall, "seconds": summary["seconds"], "records": summary["records"]}


def _best(runs: List[dict], cores: int) -> dict:
    best = min(runs, key=lambda r: r["wall"])
    rate = best["records"] / best["wall"]
    return {"wall_s": round(best["wall"], 2), "summary_s": round(best["seconds"], 2), "records": best["records"],
            "rows_per_s": round(rate), "rows_per_s_per_core": round(rate / cores), "cores": cores}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="MiB per partition (4 partitions)")
    parser.add_argument("--cores", type=int, default=2, help="cores per mode: --jobs, local[N], N workers")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    from tests.spark.test_cluster import Cluster

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    figures: Dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kstore-bench-cluster-") as tmp:
        data = os.path.join(tmp, "data")
        for p in range(4):
            write_partition(os.path.join(data, f"bench-{p}"), Kind(2, "lz4", 512, 100),
                            total_bytes=args.mib << 20, segment_bytes=64 << 20, seed=p)
        out = os.path.join(tmp, "out")
        modes = {"arrow engine": ["--engine", "arrow", "--jobs", str(args.cores)],
                 f"local[{args.cores}]": ["--master", f"local[{args.cores}]"]}
        for name, extra in modes.items():
            figures[name] = _best([_export(data, out, extra, env) for _ in range(args.repeat)], args.cores)
        cluster = Cluster(Path(tmp), workers=args.cores)
        try:
            extra = ["--master", f"spark://127.0.0.1:{cluster.port}", "--spark-conf", "spark.driver.host=127.0.0.1",
                     "--spark-conf", "spark.executor.memory=768m", "--spark-conf", f"spark.cores.max={args.cores}",
                     "--spark-conf", "spark.executor.cores=1"]
            figures["standalone"] = _best([_export(data, out, extra, cluster.env) for _ in range(args.repeat)],
                                          args.cores)
        finally:
            cluster.stop()
    base = figures["arrow engine"]["rows_per_s"]
    for name, f in figures.items():
        f["x_arrow_engine"] = round(f["rows_per_s"] / base, 2)
        print(f"{name:14} {f['wall_s']:7.2f} s wall ({f['summary_s']:.2f} s in the summary)  {f['records']:,} records  "
              f"{f['rows_per_s']:>10,} rows/s  {f['rows_per_s_per_core']:>9,} rows/s/core  "
              f"{f['x_arrow_engine']:.2f}x the arrow engine")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
