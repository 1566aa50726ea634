"""Long mutation-fuzzing run of the segment core, with the mutators of tests/segment/test_fuzz.py.

    python bench/fuzz_long.py 100000                 # 100k inputs, spread over every file kind
    python bench/fuzz_long.py 50000 --kind log --seed 7 --no-memory

Prints how many inputs were tried per kind and every failure (a non-KstoreError exception, a hang
past the per-input budget, or a peak allocation over the bound); exits 1 when there was any.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.segment import test_fuzz as fz  # noqa: E402  (the same mutators and harness as CI)

# Share of the inputs per kind (segments get most: they have the most code behind them).
SHARES = {"log": 0.6, "index": 0.07, "timeindex": 0.07, "txnindex": 0.06, "snapshot": 0.08, "checkpoint": 0.12}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="number of inputs in total")
    parser.add_argument("--kind", choices=fz.KINDS, action="append", help="only these kinds (repeatable)")
    parser.add_argument("--seed", type=int, default=1, help="RNG seed (CI uses 20240601)")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc bound (about 2x faster)")
    parser.add_argument("--show", type=int, default=50, help="failures to print per kind")
    args = parser.parse_args(argv)

    kinds = args.kind or list(fz.KINDS)
    total_share = sum(SHARES[k] for k in kinds)
    failures = 0
    tried = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kstore-fuzz-") as tmp:
        for kind in kinds:
            n = max(1, round(args.n * SHARES[kind] / total_share))
            t0 = time.perf_counter()
            report = fz.fuzz(kind, args.seed, n, Path(tmp), check_memory=not args.no_memory)
            tried += report.tried
            failures += len(report.failures)
            print(
                f"{kind:10} tried {report.tried:7d}  failures {len(report.failures):4d}  "
                f"{time.perf_counter() - t0:7.1f} s  slowest {report.max_seconds * 1000:7.1f} ms  "
                f"peak {report.max_peak:9d} B ({report.max_peak_ratio:.0%} of bound)",
                flush=True,
            )
            for f in report.failures[: args.show]:
                print(f"  FAIL {f}", flush=True)
    print(f"total: tried {tried} inputs in {time.perf_counter() - started:.1f} s, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
