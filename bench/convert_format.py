"""Throughput and peak memory of ``kstore convert-format`` on a generated v1-gzip partition (benchmark, not a test).

Generates a partition of ~size-mb of magic v1 gzip wrappers (100 records of ~1 KiB text-like values
each, about 2:1 compressible) in segments of --segment-mb, then converts it to v2-zstd into an
output dir in a child process (``python -m kstore_cli convert-format --to-magic 2 --compression zstd
--output-dir ...``) and reports wall time, MB/s of input, records/s and the child's peak RSS
(``os.wait4`` rusage). Run it at two sizes to see that memory stays flat.

    python bench/convert_format.py                       # 1 GiB under $TMPDIR, deleted afterwards
    python bench/convert_format.py --size-mb 128 --json out.json

Wrappers are built once from a pool of templates; copies only get a new wrapper offset, which
the CRC does not cover (v1 inner offsets are relative), so generating 1 GiB takes seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kstore_cli.codecs import GZIP  # noqa: E402
from kstore_cli.segment.builder import RecordSpec, build_legacy_batch  # noqa: E402

TS = 1_700_000_000_000
WORDS = [("".join(random.Random(i).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3 + i % 9))).encode()
         for i in range(4000)]


def template(seed: int, records: int) -> bytes:
    rnd = random.Random(seed)
    recs = []
    for i in range(records):
        value = b" ".join(rnd.choice(WORDS) for _ in range(120))[:1024] + os.urandom(96).hex().encode()[:64]
        recs.append(RecordSpec(i, TS + seed * 1000 + i, b"key-%08d" % rnd.randrange(10**8), value))
    return build_legacy_batch(recs, magic=1, codec=GZIP)


def generate(part: Path, size_mb: int, segment_mb: int, records_per_wrapper: int = 100) -> int:
    """Write the partition; returns the number of records."""
    part.mkdir(parents=True)
    pool = [bytearray(template(s, records_per_wrapper)) for s in range(32)]
    target = size_mb * 1024 * 1024
    seg_limit = segment_mb * 1024 * 1024
    written = 0
    offset = 0
    f = None
    seg_size = 0
    n = 0
    while written < target:
        if f is None or seg_size + len(pool[0]) > seg_limit:
            if f is not None:
                f.close()
            f = open(part / f"{offset:020d}.log", "wb")
            seg_size = 0
        wrapper = pool[n % len(pool)]
        struct.pack_into(">q", wrapper, 0, offset + records_per_wrapper - 1)  # wrapper offset = last inner
        f.write(wrapper)
        seg_size += len(wrapper)
        written += len(wrapper)
        offset += records_per_wrapper
        n += 1
    f.close()
    return offset


def run_child(args):
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, elapsed, usage.ru_maxrss * 1024, out, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--segment-mb", type=int, default=256)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", help="also write the figures here")
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kstore-convert-bench-", dir=opts.dir))
    try:
        part = work / "data" / "bench-0"
        t0 = time.perf_counter()
        records = generate(part, opts.size_mb, opts.segment_mb)
        gen_s = time.perf_counter() - t0
        size_in = sum(p.stat().st_size for p in part.glob("*.log"))
        print(f"generated {size_in / 2**20:.0f} MiB, {records} records in {gen_s:.1f}s", flush=True)
        rc, elapsed, rss, out, err = run_child([sys.executable, "-m", "kstore_cli", "convert-format", "--to-magic", "2",
                                                "--compression", "zstd", "--json", "--output-dir", str(work / "out"),
                                                str(part)])
        if rc != 0:
            raise SystemExit(f"convert-format failed ({rc}): {err}")
        summary = json.loads(out.splitlines()[-1])
        figures = {
            "inputMiB": round(size_in / 2**20, 1),
            "outputMiB": round(summary["bytesOut"] / 2**20, 1),
            "records": summary["recordsOut"],
            "batchesIn": summary["batchesIn"],
            "batchesOut": summary["batchesOut"],
            "seconds": round(elapsed, 1),
            "inputMiBPerSecond": round(size_in / 2**20 / elapsed, 1),
            "recordsPerSecond": round(summary["recordsOut"] / elapsed),
            "peakRssMiB": round(rss / 2**20, 1),
        }
        assert summary["recordsIn"] == summary["recordsOut"] == records
        print(json.dumps(figures, indent=2))
        if opts.json:
            Path(opts.json).write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
