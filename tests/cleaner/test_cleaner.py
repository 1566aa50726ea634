"""The cleaner core: segment grouping, and a hypothesis property test on generated partitions (latest
record per key survives, tombstones go after their horizon, nothing beyond the cleaned range changes,
offsets never change, kafka-python reads the result); the offset map's tests are tests/record/test_offset_map.py. The Kafka-written cases are in tests/commands/test_compact.py."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.cleaner.cleaner import compact_partition, group_segments_by_size
from kstore_cli.log.log_segment import LogSegment
from kstore_cli.log.config import CleanerSettings, ConfigResolver
from kstore_cli.log.logdir import Partition, Segment
from kstore_cli.log.names import filename_prefix
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.retention import DataDirState

T = 1_700_000_000_000


# --------------------------------------------------------------------------- grouping


class _Seg(LogSegment):
    def __init__(self, base: int, size: int, index: int = 0) -> None:  # no files needed
        self.base_offset, self.size, self.index_bytes, self.timeindex_bytes = base, size, index, index


def test_group_segments_by_size_follows_kafkas_limits() -> None:
    segs = [_Seg(0, 100), _Seg(10, 100), _Seg(20, 50), _Seg(30, 0), _Seg(40, 300)]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(segs, 250, 1000, 50)] == [[0, 10, 20, 30], [40]]
    # the index limit is checked separately
    assert [[s.base_offset for s in g] for g in group_segments_by_size(
        [_Seg(0, 1, 8), _Seg(5, 1, 8), _Seg(9, 1, 8)], 1000, 16, 12)] == [[0, 5], [9]]
    # an offset range that would not fit a segment's int32 relative offsets starts a new group
    far = [_Seg(0, 10), _Seg(1 << 31, 10)]
    assert len(group_segments_by_size(far, 1000, 1000, (1 << 31) + 5)) == 2


# --------------------------------------------------------------------------- property test

KEYS = [b"a", b"b", b"c", b"d", None]
CODECS = [0, 0, 1, 3, 4]  # none, gzip, lz4, zstd

batch_st = st.tuples(st.sampled_from(CODECS),
                     st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
                                        st.booleans()), min_size=1, max_size=4))
partition_st = st.lists(st.lists(batch_st, min_size=1, max_size=4), min_size=1, max_size=4)


def write(part: Path, segments) -> List[tuple]:
    """Segments of batches (codec, [(key, value, with_header)]) and an empty active segment."""
    part.mkdir(parents=True)
    offset = 0
    for i, batches in enumerate(segments):
        base = offset
        data = b""
        for codec, recs in batches:
            specs = []
            for key, value, header in recs:
                specs.append(RecordSpec(offset, T + offset, key, value, [("h", b"x")] if header else ()))
                offset += 1
            data += build_v2_batch(specs, codec=codec, partition_leader_epoch=0)
        log = part / f"{filename_prefix(base)}.log"
        log.write_bytes(data)
        os.utime(log, ns=((T + i) * 1_000_000,) * 2)
    (part / f"{filename_prefix(offset)}.log").write_bytes(b"")
    return read_all(part)


def read_all(part: Path) -> List[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers], b.delete_horizon_ms)
            for s in Partition(str(part)).segments for b in read_batches(s.log) for r in b.records()]


def kafka_python_records(part: Path) -> List[tuple]:
    out = []
    for s in Partition(str(part)).segments:
        records = MemoryRecords(Path(s.log).read_bytes())
        while True:
            batch = records.next_batch()
            if batch is None:
                break
            out += [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
    return out


def one_pass(part: Path, now: int, dedupe: int):
    config = ConfigResolver(flags={"delete.retention.ms": (1000, "test")}).for_topic("t")
    return compact_partition(Partition(str(part)), config, DataDirState(str(part.parent)), now=now,
                             settings=CleanerSettings(dedupe_buffer_bytes=dedupe), force_clean=True)


@given(partition_st, st.sampled_from([1 << 20, 24 * 3, 24 * 6]))
@settings(max_examples=60, deadline=None)
def test_a_pass_keeps_the_latest_record_per_key_and_a_later_pass_drops_expired_tombstones(
        tmp_path_factory, segments, dedupe) -> None:
    root = tmp_path_factory.mktemp("p")
    part = root / "t-0"
    before = write(part, segments)
    untouched = {p.name: p.read_bytes() for p in part.iterdir()}
    now = T + 100_000
    result = one_pass(part, now, dedupe)
    assert result.cleaned
    end = result.end_offset
    latest: Dict[bytes, int] = {}
    for r in before:
        if r[2] is not None and r[0] < end:
            latest[r[2]] = r[0]
    expected = [r[:5] for r in before if r[0] >= end or (r[2] is not None and latest[r[2]] == r[0])]
    after = read_all(part)
    assert [r[:5] for r in after] == expected  # same offsets, timestamps, keys, values, headers
    # Tombstones kept by this pass carry its delete horizon.
    assert all(r[5] == now + 1000 for r in after if r[3] is None and r[0] < end)
    # Beyond the cleaned range nothing changed.
    for seg in Partition(str(part)).segments:
        if seg.base_offset >= end:
            assert Path(seg.log).read_bytes() == untouched[os.path.basename(seg.log)]
    assert kafka_python_records(part) == [r[:5] for r in after]

    # A later pass over the whole log after the horizon: tombstones with a passed horizon go.
    os.unlink(root / "cleaner-offset-checkpoint")
    later = now + 1001
    second = one_pass(part, later, 1 << 20)
    latest2: Dict[bytes, int] = {}
    for r in after:
        if r[2] is not None and r[0] < second.end_offset:
            latest2[r[2]] = r[0]
    expected2 = [r[:5] for r in after
                 if r[0] >= second.end_offset
                 or (r[2] is not None and latest2[r[2]] == r[0] and (r[3] is not None or r[5] is None or later < r[5]))]
    final = read_all(part)
    assert [r[:5] for r in final] == expected2
    assert kafka_python_records(part) == expected2


def test_a_completed_swap_leaves_only_the_old_segments_the_intent_names(tmp_path: Path) -> None:
    """After a crash mid-swap, LogLoader keeps a group's later old segments when the new segment
    ends before them (and orphans their indexes when the renames stopped midway): those, unchanged
    in size, are the swap's leftovers; one of another size is not ours and makes the intent stale."""
    from kstore_cli.cleaner.compact_intent import PassIntent, file_identity

    part = tmp_path / "orders-0"
    part.mkdir()
    new_log = part / "00000000000000000000.log"
    new_log.write_bytes(b"")  # the group cleaned to nothing
    (part / "00000000000000000000.txnindex").write_bytes(b"x" * 34)  # the old base's, not in the new set
    (part / "00000000000000000012.index").write_bytes(b"")  # its .log already renamed away
    old = part / "00000000000000000024.log"
    old.write_bytes(b"y" * 60)
    (part / "00000000000000000024.snapshot").write_bytes(b"s")
    (part / "00000000000000000036.log").write_bytes(b"z" * 70)  # the next group: not this swap's
    intent = PassIntent({"groups": [[[0, 100], [12, 50], [24, 60]], [[36, 70]]], "current": 0,
                         "newFiles": {".log": file_identity(str(new_log))}})
    assert intent.swap_completed(str(part))
    leftovers, stale = intent.swap_leftovers(str(part))
    assert stale is None
    assert [os.path.basename(p) for p in leftovers] == [
        "00000000000000000000.txnindex", "00000000000000000012.index", "00000000000000000024.log",
        "00000000000000000024.snapshot"]
    old.write_bytes(b"y" * 61)
    assert intent.swap_leftovers(str(part)) == ([], "segment 24 changed since")
    new_log.write_bytes(b"other")
    assert not intent.swap_completed(str(part))



# --------------------------------------------------------------------------- why a log is not cleaned


def _plain(first: int, n: int) -> bytes:
    return build_v2_batch([RecordSpec(first + i, T + first + i, b"k%d" % i, b"v") for i in range(n)])


def _log(part: Path, base: int, data: bytes) -> None:
    part.mkdir(parents=True, exist_ok=True)
    (part / f"{filename_prefix(base)}.log").write_bytes(data)


def _not_cleaned(part: Path) -> dict:
    row = one_pass(part, T + 100_000, 1 << 20).to_dict()
    assert not row["cleaned"] and row["cleanable_bytes"] == 0 and row["clean_bytes"] == 0
    return row


def test_a_log_held_back_by_an_open_transaction_says_so(tmp_path: Path) -> None:
    """Offsets 0-2 plain, then producer 7's transaction opens at 3 and never ends: the last stable offset
    is 3, inside the first segment, so no whole segment lies below it. The log is not empty."""
    part = tmp_path / "t-0"
    txn = build_v2_batch([RecordSpec(3, T + 3, b"a", b"x"), RecordSpec(4, T + 4, b"b", b"y")],
                         producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    _log(part, 0, _plain(0, 3) + txn)
    _log(part, 5, _plain(5, 5))
    _log(part, 10, b"")
    row = _not_cleaned(part)
    assert row["last_stable_offset"] == 3
    assert row["reason"] == ("cleaning stops at the first unstable offset 3, where producer 7's transaction is "
                             "still open, and nothing below it is cleanable")


def test_a_log_in_its_active_segment_only_says_so(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    _log(part, 0, _plain(0, 4))
    row = _not_cleaned(part)
    assert row["reason"] == ("cleaning stops at the active segment, which starts at offset 0 and is never "
                             "cleaned, and nothing below it is cleanable")


def test_an_empty_log_is_called_empty(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    _log(part, 0, b"")
    assert _not_cleaned(part)["reason"] == "the log is empty"
