"""spark-export --incremental under random kills: a real `kstore spark-export --engine arrow --incremental`
subprocess SIGKILLed at a random moment, then run again to completion; after each round every
(topic, partition, offset) appended so far is in the output exactly once.

    python bench/incremental_kills.py [--rounds 25] [--records 20000] [--seed 1]

Each round appends `records` records (spread over 3 partitions, some rolling a new segment) and runs the
export once with a kill after a random delay in [0, the previous clean run's time * 1.5), then once clean.
Prints per round whether the kill landed before the run ended, and the totals; exits 1 on any duplicate
or missing row.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.spark.test_incremental import append  # noqa: E402


def _cmd(data: Path, out: Path, state: Path) -> List[str]:
    return [sys.executable, "-m", "kstore_cli", "spark-export", str(data), "-o", str(out), "--engine", "arrow",
            "--jobs", "2", "--incremental", str(state), "--json"]


def _rows(out: Path) -> Counter:
    import pyarrow.dataset as pads

    if not out.exists():
        return Counter()
    table = pads.dataset(str(out), format="parquet", partitioning="hive",
                         ignore_prefixes=["_", "."]).to_table(columns=["topic", "partition", "offset"])
    return Counter(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                       table.column("offset").to_pylist()))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rnd = random.Random(args.seed)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="kstore-bench-incr-") as tmp:
        data, out, state = Path(tmp) / "data", Path(tmp) / "out", Path(tmp) / "state"
        ends = {p: 0 for p in range(3)}
        clean_time, killed, bad = 1.0, 0, 0
        for r in range(args.rounds):
            for p in range(3):
                n = args.records // 3
                append(data, f"events-{p}", ends[p], n, new_segment=rnd.random() < 0.3)
                ends[p] += n
            proc = subprocess.Popen(_cmd(data, out, state), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            delay = rnd.uniform(0, clean_time * 1.5)
            time.sleep(delay)
            landed = proc.poll() is None
            if landed:
                proc.send_signal(signal.SIGKILL)
                killed += 1
            proc.wait()
            started = time.perf_counter()
            done = subprocess.run(_cmd(data, out, state), cwd=ROOT, env=env, capture_output=True, text=True)
            clean_time = time.perf_counter() - started
            rows = _rows(out)
            want = {("events", p, o) for p in range(3) for o in range(ends[p])}
            dupes = sum(1 for c in rows.values() if c > 1)
            missing = len(want - set(rows))
            ok = done.returncode == 0 and dupes == 0 and missing == 0 and set(rows) == want
            bad += not ok
            print(f"round {r + 1:2}: kill after {delay:5.2f} s {'landed' if landed else 'too late'}; rerun exit "
                  f"{done.returncode} in {clean_time:.2f} s; {len(rows)} rows, {dupes} duplicated, {missing} missing"
                  + ("" if ok else f"  FAILED {done.stderr.strip()[-300:]}"))
    print(f"{args.rounds} rounds, {killed} runs killed mid-way, {bad} rounds with a duplicate or missing row")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
