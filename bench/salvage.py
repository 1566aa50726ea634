"""What salvage keeps of damaged partitions, against what Kafka's own recovery keeps of the same inputs.

    python bench/salvage.py [--seeds 100]
    python bench/salvage.py --garbage [--sizes 1,4,64]


Each seed damages a copy of fixtures/kafka-written/leader-4.0 (Kafka-written: 250 batches, lz4 and
uncompressed, transactions) in 1 to 5 places (bit flips, zeroed ranges, batches cut short, garbage
inserted: tests/operations/test_salvage.py's generator), then counts the batches and records kept by
`kstore salvage` and by Kafka's LogLoader (the oracle's load-log --unclean, which truncates at the first
invalid batch and deletes the later segments), and the intact batches (those whose bytes are still whole
in the damaged files). Needs ../shared/kafka-oracle.

--garbage times the resync scan alone (plan_salvage) over a segment of N MiB of garbage between two
intact batches: random bytes, and crafted bytes (a v2 header every 64 bytes claiming to run to the end of
the file, its CRC wrong: what made the scan quadratic before issue 29, 4 MiB in 12 s).
"""

from __future__ import annotations

import argparse
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kstore_cli.log.logdir import Partition  # noqa: E402
from kstore_cli.operations.salvage import plan_salvage, salvage_to  # noqa: E402
from tests.oracle import require_oracle  # noqa: E402
from tests.operations.test_salvage import SOURCE, _batches, _intact, damage  # noqa: E402


def garbage(size: int, crafted: bool) -> bytes:
    """`size` bytes of seeded random garbage; crafted: a header every 64 bytes claiming the rest of the file."""
    data = bytearray(random.Random(size).randbytes(size))
    if crafted:
        for p in range(0, size - 61, 64):
            data[p:p + 17] = struct.pack(">qiib", 1 + p, size - p - 12, 0, 2)
    return bytes(data)


def garbage_rows(sizes_mib: list) -> None:
    """plan_salvage over one segment: an intact batch, N MiB of garbage, an intact batch."""
    batches = _batches(sorted((SOURCE / "t-0").glob("*.log"))[0])
    first, last = batches[0][4], batches[-1][4]
    work = Path(tempfile.mkdtemp(prefix="kstore-salvage-garbage-"))
    try:
        print(f"{'garbage':>8} {'MiB':>4} {'seconds':>8} {'MB/s':>7}  kept  gaps")
        for mib in sizes_mib:
            for crafted in (False, True):
                part = work / "t-0"
                shutil.rmtree(part, ignore_errors=True)
                part.mkdir()
                (part / f"{0:020d}.log").write_bytes(first + garbage(mib << 20, crafted) + last)
                start = time.perf_counter()
                plan = plan_salvage(Partition(str(part)))
                took = time.perf_counter() - start
                print(f"{'crafted' if crafted else 'random':>8} {mib:>4} {took:>8.2f} {(mib << 20) / took / 1e6:>7.1f}  "
                      f"{plan.batches_kept:>4}  {len(plan.damaged):>4}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--garbage", action="store_true", help="time the resync scan over garbage instead")
    parser.add_argument("--sizes", default="1,4,64", help="--garbage sizes in MiB (default 1,4,64)")
    args = parser.parse_args()
    if args.garbage:
        garbage_rows([int(s) for s in args.sizes.split(",")])
        return 0
    oracle = require_oracle()
    total = sum(len(_batches(log)) for log in (SOURCE / "t-0").glob("*.log"))
    work = Path(tempfile.mkdtemp(prefix="kstore-salvage-bench-"))
    try:
        rows, calls = [], []
        for seed in range(args.seeds):
            data = work / f"s{seed}"
            shutil.copytree(SOURCE, data / "in")
            damage(data / "in" / "t-0", seed)
            intact = len(_intact(data / "in" / "t-0"))
            report = salvage_to(plan_salvage(Partition(str(data / "in" / "t-0"))), str(data / "out"))
            kept = sum(len(_batches(log)) for log in Path(report.destination).glob("*.log"))
            shutil.copytree(data / "in" / "t-0", data / "kafka" / "t-0")
            calls.append(("load-log", [str(data / "kafka" / "t-0"), "--unclean", "--no-lookup"]))
            rows.append([seed, intact, kept])
        for row, result in zip(rows, oracle.run_many(calls)):
            row.append(len(result.of_type("batch")))
        sums = [sum(r[i] for r in rows) for i in (1, 2, 3)]
        print(f"{args.seeds} damaged copies of a {total}-batch Kafka-written partition")
        print(f"intact batches (bytes still whole): {sums[0]} ({sums[0] / (total * args.seeds):.1%} of all)")
        print(f"kept by kstore salvage:             {sums[1]} ({sums[1] / max(sums[0], 1):.1%} of the intact ones)")
        print(f"kept by Kafka's recovery:           {sums[2]} ({sums[2] / max(sums[0], 1):.1%} of the intact ones)")
        worst = min(rows, key=lambda r: r[3] / max(r[1], 1))
        print(f"worst case for Kafka: seed {worst[0]}: Kafka kept {worst[3]} of {worst[1]} intact batches, "
              f"salvage {worst[2]}")
        return 0 if all(r[2] >= r[1] for r in rows) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
