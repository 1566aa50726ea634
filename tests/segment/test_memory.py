"""Memory stays flat however large the segment: no per-batch or per-entry Python objects kept for the
whole scan, and pages of a mapped .log leave the process once walked past.

Bounds are on tracemalloc peaks and on the mapped file pages the process holds (RssFile), never on time;
each one is several times under what the earlier code used on the same input.
"""

from __future__ import annotations

import struct
import tracemalloc

from kstore_cli.segment.builder import RecordSpec, build_v2_batch
from kstore_cli.segment.crc import crc32c
from kstore_cli.segment.recovery import recover_segment

TS0 = 1_700_000_000_000
MiB = 1 << 20


def _segment(batches: int, value_size: int = 60) -> bytes:
    """`batches` one-record v2 batches at offsets 0, 1, ... with increasing timestamps (valid CRCs)."""
    template = bytearray(build_v2_batch([RecordSpec(0, TS0, b"key", b"v" * value_size)]))
    crc_covered = memoryview(template)[21:]
    out = bytearray()
    for n in range(batches):
        struct.pack_into(">q", template, 0, n)  # base offset (not covered by the CRC)
        struct.pack_into(">qq", template, 27, TS0 + n, TS0 + n)  # base and max timestamp
        struct.pack_into(">I", template, 17, crc32c(crc_covered))
        out += template
    return bytes(out)


def test_recovery_keeps_index_entries_packed() -> None:
    # One index entry per batch (interval 0): 40,000 entries in each index. As tuples of ints they took
    # ~10 MB; packed as the files hold them, 20 bytes per entry (0.8 MB) plus the final copy.
    batches = 40_000
    data = _segment(batches)
    tracemalloc.start()
    try:
        result, _ = recover_segment(data, 0, index_interval_bytes=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.problem is None and result.batches == batches
    assert len(result.index_bytes) == 8 * (batches - 1)  # the first batch is never indexed
    assert len(result.timeindex_bytes) == 12 * (batches - 1)
    assert peak < 2 * 20 * batches + MiB, f"recovery peaked at {peak / MiB:.1f} MiB of Python allocations"
