"""Benchmark: rebuild the indexes of a generated v2 segment from page cache (not a test).

    python bench/rebuild_index.py [--size-mb 1024] [--batch-kb 16] [--dir /tmp]

Generates one segment of ~size-mb of uncompressed v2 batches of ~batch-kb each (built
once with kstore's builder, then repeated with patched base offsets and CRCs), reads it
once to warm the page cache, then times recover_segment (what rebuild-index runs per
segment: framing, ensure_valid with CRC-32C over every byte, index building) and a
profile of where the time goes. The target is 1 GB/s.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kstore_cli.segment import decode  # noqa: E402
from kstore_cli.segment.builder import RecordSpec, build_v2_batch  # noqa: E402
from kstore_cli.segment.crc import crc32c  # noqa: E402
from kstore_cli.segment.recovery import recover_segment  # noqa: E402


def generate(path: str, size_mb: int, batch_kb: int) -> int:
    """Write the segment; returns its number of batches."""
    per_record = 200
    n = max(1, batch_kb * 1024 // (per_record + 20))
    template = bytearray(build_v2_batch(
        [RecordSpec(i, 1_700_000_000_000 + i, b"key-%08d" % i, os.urandom(per_record)) for i in range(n)]))
    target = size_mb * 1024 * 1024
    batches = 0
    offset = 0
    with open(path, "wb") as f:
        written = 0
        while written < target:
            struct.pack_into(">q", template, 0, offset)  # baseOffset (not covered by the CRC)
            struct.pack_into(">q", template, 27, 1_700_000_000_000 + batches)  # baseTimestamp
            struct.pack_into(">q", template, 35, 1_700_000_000_000 + batches + n)  # maxTimestamp
            struct.pack_into(">I", template, 17, crc32c(memoryview(template)[21:]))
            f.write(template)
            written += len(template)
            offset += n
            batches += 1
    return batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--batch-kb", type=int, default=16)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    path = os.path.join(args.dir, "kstore-bench", "bench-0", "00000000000000000000.log")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t0 = time.perf_counter()
    batches = generate(path, args.size_mb, args.batch_kb)
    size = os.path.getsize(path)
    print(f"generated {size / 1e9:.3f} GB, {batches} batches of {size // batches} bytes "
          f"in {time.perf_counter() - t0:.1f}s (record decoder: {decode.BACKEND})")
    with open(path, "rb") as f:  # warm the page cache
        while f.read(1 << 24):
            pass
    from kstore_cli.segment.reader import map_file

    view = map_file(path)
    crc_t = time.perf_counter()
    crc32c(view)
    crc_t = time.perf_counter() - crc_t
    view.release()
    best = None
    for _ in range(3):
        t = time.perf_counter()
        result, _state = recover_segment(path, 0, index_interval_bytes=4096)
        t = time.perf_counter() - t
        best = t if best is None else min(best, t)
    assert result.problem is None and result.valid_bytes == size
    print(f"rebuild (recover_segment): best of 3 {best:.3f}s = {size / best / 1e9:.2f} GB/s, "
          f"{batches / best / 1e6:.2f} M batches/s; {len(result.index_bytes) // 8} index entries")
    print(f"  CRC-32C alone over the file (one call): {crc_t:.3f}s = {size / crc_t / 1e9:.2f} GB/s")
    prof = cProfile.Profile()
    prof.enable()
    recover_segment(path, 0, index_interval_bytes=4096)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(8)
    print("where the time goes (cProfile, tottime):")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:3000])
    if not args.keep:
        os.unlink(path)


if __name__ == "__main__":
    main()
