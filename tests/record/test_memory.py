"""Memory stays flat however large the segment: no per-batch or per-entry Python objects kept for the
whole scan, and pages of a mapped .log leave the process once walked past.

Bounds are on tracemalloc peaks and on the mapped file pages the process holds (RssFile), never on time;
each one is several times under what the earlier code used on the same input.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
from pathlib import Path
from array import array
from typing import List, Optional, Tuple

import pytest

from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.record.crc import crc32c
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.recovery import ZERO_TAIL, is_zero, recover_segment
from kstore_cli.operations.verify import _BatchesAtEntries, verify_partition

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


def _rss_file_kib() -> Optional[int]:
    """Pages of mapped files this process holds (Linux), in KiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssFile:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


needs_rss_file = pytest.mark.skipif(_rss_file_kib() is None, reason="needs Linux's /proc/self/status RssFile")


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


@needs_rss_file
@pytest.mark.parametrize("value_size", [120, 8000])
def test_scan_releases_mapped_pages_as_it_goes(tmp_path: Path, value_size: int) -> None:
    # 48 MiB of ~16 KiB or ~1 MiB batches. The reader used to release the mapping every 64 MiB, so all of
    # it was held; and 64 batches of 1 MiB framed in one call would hold 64 MiB however often it released.
    batch = build_v2_batch([RecordSpec(n, TS0, b"key", b"v" * value_size) for n in range(128)])
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch * (48 * MiB // len(batch)))
    before = _rss_file_kib()
    held = 0
    for b in read_batches(str(path), check_crc=True):
        assert b.is_valid
        held = max(held, _rss_file_kib() - before)
    assert held < 16 * 1024, f"the scan held {held} KiB of the mapped file"


@needs_rss_file
def test_zero_tail_check_releases_mapped_pages(tmp_path: Path) -> None:
    # A preallocated segment: a few batches, then zeros (sparse here) to 48 MiB. Checking the zeros used to
    # map every page of them into the process.
    data = _segment(100)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    os.truncate(path, 48 * MiB)
    before = _rss_file_kib()
    result, _ = recover_segment(str(path), 0)
    held = _rss_file_kib() - before
    assert result.problem is not None and result.problem.kind == ZERO_TAIL
    assert result.problem.position == len(data)
    assert held < 16 * 1024, f"recovery held {held} KiB of the mapped file"


def test_is_zero_finds_a_byte_anywhere() -> None:
    buf = bytearray(3 * MiB + 5)
    assert is_zero(memoryview(buf), 0, len(buf))
    for at in (0, MiB - 1, MiB, 3 * MiB + 4):
        buf[at] = 1
        assert not is_zero(memoryview(buf), 0, len(buf))
        assert is_zero(memoryview(buf), at + 1, len(buf))
        buf[at] = 0


def test_verify_keeps_nothing_per_batch(tmp_path: Path) -> None:
    # 40,000 batches, ~1,200 index entries: verification used to keep an object per batch and two dicts
    # keyed by batch (~16 MB here); it now keeps what the indexes' entries need.
    batches = 40_000
    data = _segment(batches)
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(data)
    result, _ = recover_segment(data, 0)
    (part / "00000000000000000000.index").write_bytes(result.index_bytes)
    (part / "00000000000000000000.timeindex").write_bytes(result.timeindex_bytes)
    tracemalloc.start()
    try:
        findings, plan = verify_partition(Partition(str(part)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert findings == [] and plan.segments[0].result.batches == batches
    assert peak < 2 * MiB, f"verification peaked at {peak / MiB:.1f} MiB of Python allocations"


_batch_runs = st.lists(
    st.tuples(st.integers(1, 50), st.one_of(st.none(), st.integers(0, 60)), st.integers(-5, 60), st.integers(-3, 30)),
    max_size=40,
)


@given(_batch_runs, st.sets(st.integers(-5, 1500)), st.sets(st.integers(-10, 70)), st.integers(0, 3))
def test_batches_at_entries_equal_a_lookup_over_every_batch(runs, positions, offsets, base_offset) -> None:
    # What verification used to compute from every batch kept in a list (damaged data included: last
    # offsets that go back, repeat, or sit below a batch's base), against the one-pass watcher.
    batches: List[Tuple[int, Optional[int], int, int]] = []
    position = 0
    for gap, batch_base, last, max_ts in runs:
        batches.append((position, batch_base, last, max_ts))
        position += gap
    positions |= {b[0] for b in batches[::3]}
    offsets |= {b[2] for b in batches[1::3]}
    watcher = _BatchesAtEntries(array("q", sorted(positions)), array("q", sorted(offsets)), base_offset)
    for batch in batches:
        watcher.sink(*batch)
    by_position = {b[0]: k for k, b in enumerate(batches)}
    for p in positions | {-1, 10_000}:
        k = by_position.get(p)
        want = None if k is None else (batches[k - 1][2] if k else base_offset - 1, batches[k][1])
        assert watcher.at_position(p) == want

    def landing(o: int) -> Optional[Tuple[int, int, int]]:
        # Kafka's translateOffset: the first batch whose last offset reaches o; with the running maximum
        # timestamp of every batch before it.
        before = -1
        for _, _, last, max_ts in batches:
            if last >= o:
                return max_ts, last, before
            before = max(before, max_ts)
        return None

    for o in offsets | {-100, 10_000}:
        assert watcher.at_offset(o) == (landing(o) if o in offsets else None)
