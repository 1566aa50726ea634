"""kstore recover's throughput, with 1 and 2 jobs, side by side with Kafka's own startup recovery of the same
data (the oracle's load-log --unclean: LogLoader recovering every segment from offset 0).

    python bench/recover.py [--partitions 4] [--mib-per-partition 128]

Input: PARTITIONS partitions of ~16 KiB v2 batches (128 records of ~125 B), 64 MiB segments, written by
kstore's partition writer, indexes deleted (what an unclean shutdown with unflushed indexes leaves).
kstore: wall time of `kstore recover --jobs N DATA_DIR` minus the interpreter start-up, on a fresh copy each
run, page cache warm, best of --repeat. Kafka: the sum of load_ms (time inside LogLoader, JVM start excluded)
of its per-partition loads (one recovery thread, num.recovery.threads.per.data.dir's default), best of
--repeat. GB/s = input bytes / seconds; per core = GB/s / jobs.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

from inputs import Kind, write_partition  # noqa: E402

KIND = Kind(2, "none", 100, 128)


def _startup() -> float:
    best = None
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kstore_cli", "--version"], capture_output=True, cwd=ROOT, check=True)
        d = time.perf_counter() - t
        best = d if best is None else min(best, d)
    return best


def _fresh(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--mib-per-partition", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kstore-recover-bench-"))
    try:
        src = work / "src"
        total = 0
        for n in range(args.partitions):
            info = write_partition(str(src / f"bench-{n}"), KIND, total_bytes=args.mib_per_partition << 20,
                                   segment_bytes=64 << 20, seed=n + 1)
            total += info["bytes"]
        for f in glob.glob(str(src / "*" / "*index")):
            os.unlink(f)
        startup = _startup()
        print(f"input: {args.partitions} partitions, {total / 1e9:.2f} GB of ~16 KiB v2 batches; "
              f"cpus {os.cpu_count()}; kstore start-up {startup * 1000:.0f} ms (subtracted)")
        for jobs in (1, 2):
            best = None
            for r in range(args.repeat):
                run = work / "run"
                _fresh(src, run)
                t = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "kstore_cli", "recover", "--jobs", str(jobs), str(run)],
                                      cwd=ROOT, capture_output=True, text=True)
                wall = time.perf_counter() - t - startup
                if done.returncode != 0:
                    print(done.stdout[-2000:], done.stderr[-2000:])
                    return 1
                best = wall if best is None else min(best, wall)
            gbs = total / best / 1e9
            print(f"kstore recover --jobs {jobs}: {best:.2f} s, {gbs:.2f} GB/s, {gbs / jobs:.2f} GB/s per core")
        try:
            from tests.oracle import require_oracle
            oracle = require_oracle()
        except Exception as exc:  # noqa: BLE001 - the oracle is optional here
            print(f"Kafka: not measured ({exc})")
            return 0
        best = None
        for r in range(args.repeat):
            run = work / "kafka"
            _fresh(src, run)
            results = oracle.run_many([("load-log", [str(d), "--unclean", "--no-records", "--no-lookup"])
                                       for d in sorted(run.iterdir())], heap="-Xmx2G")
            ms = sum(res.one("summary")["load_ms"] for res in results)
            best = ms if best is None else min(best, ms)
        print(f"Kafka LogLoader (1 recovery thread): {best / 1000:.2f} s, {total / (best / 1000) / 1e9:.2f} GB/s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
