"""Format conversion: every corpus and generated partition to every legal (magic, codec) target
reads back -- through kstore, kafka-python and aiokafka -- as the same offsets, timestamps, keys,
values (and headers where kept); indexes are what rebuild-index writes; losses are counted."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from kstore_cli.codecs import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.record.builder import (
    RecordSpec,
    build_control_batch,
    build_legacy_batch,
    build_legacy_entry,
    build_v2_batch,
)
from kstore_cli.log.checkpoint import format_leader_epoch_checkpoint, read_leader_epoch_checkpoint
from kstore_cli.operations.convert import (
    ConvertOptions,
    ConvertStats,
    LossyConversionError,
    convert_batches,
    convert_partition,
)
from kstore_cli.log.logdir import Partition, Target
from kstore_cli.record.reader import RELEASE_EVERY, read_batches
from kstore_cli.operations.recovery import plan_partition
from kstore_cli.operations.verify import ERROR, verify_partition
from kstore_cli.log.snapshot import read_snapshot
from kstore_cli.log.writer import PartitionWriter
from tests.conftest import CORPUS, load_manifest
from tests.record.test_interop import IMPLS, lib_batches

TS = 1_700_000_000_000
TARGETS = [(m, c) for m in (0, 1) for c in (NONE, GZIP, SNAPPY, LZ4)] + [(2, c) for c in (NONE, GZIP, SNAPPY, LZ4, ZSTD)]

Rec = Tuple[int, int, Optional[bytes], Optional[bytes], List[Tuple[str, Optional[bytes]]]]


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """fsync makes no difference to what these tests read back (crash tests keep it); it costs
    most of their time on slow disks."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


# --------------------------------------------------------------------------- generated partitions


def _write(directory: Path, segments: List[Tuple[int, List[bytes]]]) -> None:
    directory.mkdir(parents=True)
    writer = PartitionWriter(str(directory), suffix="", index_interval_bytes=100)
    for base, batches in segments:
        writer.start_segment(base)
        for data in batches:
            writer.append_bytes(data)
    writer.close()


def make_v2_partition(directory: Path) -> Path:
    """Headers, idempotent and transactional producers (ABORT and COMMIT), a compacted batch with gaps,
    an empty batch, LogAppendTime, a delete horizon, and a partition ending with a marker."""
    def recs(first, n, *, step=1, headers=True, ts=TS):
        return [RecordSpec(first + i * step, ts + first + i, b"key-%d" % (first + i * step),
                           None if (first + i) % 7 == 3 else b"value-%d" % (first + i) * 3,
                           [("h", b"%d" % i), ("n", None)] if headers and i % 2 == 0 else [])
                for i in range(n)]
    seg0 = [
        build_v2_batch(recs(0, 5), partition_leader_epoch=0),
        build_v2_batch(recs(5, 5), codec=GZIP, producer_id=7, producer_epoch=1, base_sequence=0, partition_leader_epoch=0),
        build_v2_batch(recs(10, 3), codec=SNAPPY, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True,
                       partition_leader_epoch=0),
        build_control_batch(13, TS + 13, commit=False, coordinator_epoch=3, producer_id=9, producer_epoch=0,
                            partition_leader_epoch=0),
        build_v2_batch(recs(14, 2), producer_id=9, producer_epoch=0, base_sequence=3, is_transactional=True,
                       partition_leader_epoch=0),
        build_control_batch(16, TS + 16, commit=True, coordinator_epoch=3, producer_id=9, producer_epoch=0,
                            partition_leader_epoch=0),
        build_v2_batch(recs(18, 2, step=2), base_offset=17, last_offset_delta=5, codec=ZSTD, partition_leader_epoch=1),
        build_v2_batch([], base_offset=23, last_offset_delta=2, max_timestamp=TS + 25, producer_id=8, producer_epoch=0,
                       base_sequence=4, partition_leader_epoch=1),
    ]
    seg1 = [
        build_v2_batch(recs(26, 3), codec=LZ4, timestamp_type=1, log_append_time=TS + 500, partition_leader_epoch=1),
        build_v2_batch(recs(29, 2, headers=False), delete_horizon_ms=TS + 9999, partition_leader_epoch=1),
        build_v2_batch(recs(31, 2), producer_id=11, producer_epoch=2, base_sequence=0, is_transactional=True,
                       partition_leader_epoch=2),
        build_control_batch(33, TS + 33, commit=True, coordinator_epoch=4, producer_id=11, producer_epoch=2,
                            partition_leader_epoch=2),
    ]
    _write(directory, [(0, seg0), (26, seg1)])
    (directory / "leader-epoch-checkpoint").write_text(format_leader_epoch_checkpoint([(0, 0), (1, 17), (2, 31)]))
    return directory


def make_legacy_partition(directory: Path) -> Path:
    """v0 and v1 entries, plain and wrapped, with offset gaps inside and between wrappers, and
    v1 LogAppendTime wrappers with different append times."""
    def recs(offsets, ts=TS):
        return [RecordSpec(o, ts + o, None if o % 5 == 0 else b"k%d" % o, b"legacy-%d" % o * 4) for o in offsets]
    seg0 = [
        build_legacy_batch(recs([0, 1, 2]), magic=1),
        build_legacy_batch(recs([5, 7, 8]), magic=1, codec=GZIP),
        build_legacy_batch(recs([9, 10]), magic=0, codec=SNAPPY),
        build_legacy_batch(recs([12]), magic=0),
    ]
    seg1 = [
        build_legacy_batch(recs([20, 21, 22]), magic=1, codec=GZIP, timestamp_type=1, log_append_time=TS + 777),
        build_legacy_batch(recs([23, 24]), magic=1, codec=LZ4, timestamp_type=1, log_append_time=TS + 888),
        build_legacy_batch(recs([25]), magic=1, timestamp_type=1, log_append_time=TS + 999),
        build_legacy_batch(recs([30, 31, 40]), magic=0, codec=LZ4),
    ]
    _write(directory, [(0, seg0), (20, seg1)])
    return directory


GENERATED = {"gen-v2-0": make_v2_partition, "gen-legacy-0": make_legacy_partition}
CORPUS_PARTITIONS = sorted(p.name for p in (CORPUS / "logs").iterdir() if p.is_dir())


def interval_of(name: str) -> int:
    entry = load_manifest()["partitions"].get(f"logs/{name}")
    return 100 if entry is None else entry["topicConfig"]["index.interval.bytes"]


def source_partition(name: str, tmp_path: Path) -> Path:
    if name in GENERATED:
        return GENERATED[name](tmp_path / "src" / name)
    dst = tmp_path / "src" / name
    shutil.copytree(CORPUS / "logs" / name, dst)
    return dst


# --------------------------------------------------------------------------- reading back


def kstore_records(part: Path, with_control: bool = True) -> List[Rec]:
    out = []
    for seg in Partition(str(part)).segments:
        for batch in read_batches(seg.log):
            if batch.is_control and not with_control:
                continue
            for r in batch.records():
                out.append((r.offset, r.timestamp, r.key, r.value, [] if r.is_legacy else [(h.key, h.value) for h in r.headers]))
    return out


def expected_after(src: List[Tuple[Rec, bool]], magic: int) -> List[Rec]:
    """What a target magic keeps of the source records (record, is_control)."""
    out = []
    for (offset, ts, key, value, headers), control in src:
        if magic < 2 and control:
            continue
        out.append((offset, -1 if magic == 0 else ts, key, value, headers if magic == 2 else []))
    return out


def source_records(part: Path) -> List[Tuple[Rec, bool]]:
    out = []
    for seg in Partition(str(part)).segments:
        for batch in read_batches(seg.log):
            for r in batch.records():
                out.append(((r.offset, r.timestamp, r.key, r.value,
                             [] if r.is_legacy else [(h.key, h.value) for h in r.headers]), batch.is_control))
    return out


def library_records(impl, part: Path) -> List[Rec]:
    out = []
    for seg in Partition(str(part)).segments:
        data = Path(seg.log).read_bytes()
        if not data:
            continue
        for b in lib_batches(impl, data):
            if getattr(b, "is_control_batch", False):
                continue
            for r in b:
                headers = [(k, None if v is None else bytes(v)) for k, v in (r.headers or [])]
                out.append((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value, headers))
    return out


def assert_indexes_are_what_rebuild_index_writes(part: Path, interval: int) -> None:
    findings, _ = verify_partition(Partition(str(part)))
    assert [f for f in findings if f.severity == ERROR] == []
    plan = plan_partition(Partition(str(part)), index_interval_bytes=interval)
    assert not plan.has_problems
    changed = [(c.path, c.action) for s in plan.segments for c in s.changes if c.action != "unchanged"]
    assert changed == []


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("name", CORPUS_PARTITIONS + sorted(GENERATED))
def test_every_target_reads_back_the_same_everywhere(name: str, tmp_path: Path) -> None:
    src = source_partition(name, tmp_path)
    source = source_records(src)
    partition = Partition(str(src))
    has_zstd = any(b.compression == ZSTD for s in partition.segments for b in read_batches(s.log))
    interval = interval_of(name)
    for magic, codec in TARGETS:
        out_root = tmp_path / f"out-{magic}-{codec}"
        result = convert_partition(Target(Partition(str(src))), ConvertOptions(magic, codec, index_interval_bytes=interval),
                                   output_root=str(out_root))
        out = out_root / name
        want = expected_after(source, magic)
        assert kstore_records(out) == want, (magic, codec)
        assert result.stats.records_out == len(want)
        want_data = expected_after([s for s in source if not s[1]], magic)
        for impl in IMPLS:
            if magic == 0 and codec == LZ4 and not impl.can_v0_lz4:
                continue
            assert library_records(impl, out) == want_data, (impl.name, magic, codec)
        # every output batch has the target magic and codec (markers and empty batches stay uncompressed)
        for seg in Partition(str(out)).segments:
            for b in read_batches(seg.log):
                assert b.magic == magic
                if not (b.magic == 2 and (b.is_control or b.count == 0)):
                    assert b.compression == codec
        assert_indexes_are_what_rebuild_index_writes(out, interval)
        # the log end offset is kept (an empty segment carries it when trailing markers were dropped)
        assert _log_end(out) == _log_end(src)
    # keeping each batch's codec: refused for zstd data going to v0/v1, else fine
    for magic in (0, 1):
        opts = ConvertOptions(magic)
        if has_zstd:
            with pytest.raises(UsageError, match="zstd"):
                convert_partition(Target(Partition(str(src))), opts, dry_run=True)
        else:
            result = convert_partition(Target(Partition(str(src))), opts, dry_run=True)
            assert result.status == "would convert"


def _log_end(part: Path) -> int:
    segs = Partition(str(part)).segments
    nxt = segs[-1].base_offset
    for b in read_batches(segs[-1].log):
        nxt = b.last_offset + 1
    return nxt


# --------------------------------------------------------------------------- semantics


def test_unchanged_batches_are_copied_byte_for_byte(tmp_path: Path) -> None:
    """Mixed magics to v2 keeping codecs: every v2 batch (data, markers, empty) is copied as is;
    recompressing to zstd still copies markers and empty batches untouched."""
    for name, opts in (("mixed-magic-0", ConvertOptions(2)), ("gen-v2-0", ConvertOptions(2, ZSTD)),
                       ("transactional-0", ConvertOptions(2, GZIP))):
        src = source_partition(name, tmp_path / name)
        out_root = tmp_path / name / "out"
        result = convert_partition(Target(Partition(str(src))), opts, output_root=str(out_root))
        out_bytes = b"".join(Path(s.log).read_bytes() for s in Partition(str(out_root / name)).segments)
        expected_copies = 0
        for seg in Partition(str(src)).segments:
            for b in read_batches(seg.log):
                if b.magic == 2 and (b.is_control or b.count == 0 or b.compression == (opts.codec if opts.codec is not None else b.compression)):
                    expected_copies += 1
                    assert bytes(b.buffer) in out_bytes
        assert result.stats.unchanged_batches == expected_copies > 0


def test_same_format_conversion_is_a_byte_identical_copy(tmp_path: Path) -> None:
    for name, magic in (("v2-snappy-0", 2), ("legacy-v1-0", 1), ("legacy-v0-0", 0)):
        src = CORPUS / "logs" / name
        out_root = tmp_path / name
        result = convert_partition(Target(Partition(str(src))), ConvertOptions(magic), output_root=str(out_root))
        assert result.stats.unchanged_batches == result.stats.batches_in
        for seg in Partition(str(src)).segments:
            assert (out_root / name / os.path.basename(seg.log)).read_bytes() == Path(seg.log).read_bytes()


def test_v2_to_v2_recompression_keeps_every_batch_field(tmp_path: Path) -> None:
    src = make_v2_partition(tmp_path / "src" / "gen-v2-0")
    convert_partition(Target(Partition(str(src))), ConvertOptions(2, LZ4), output_root=str(tmp_path / "out"))
    fields = ("base_offset", "last_offset", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
              "is_transactional", "is_control", "timestamp_type", "max_timestamp", "delete_horizon_ms", "count")

    def batch_fields(part):
        return [tuple(getattr(b, f) for f in fields) for s in Partition(str(part)).segments for b in read_batches(s.log)]

    assert batch_fields(tmp_path / "out" / "gen-v2-0") == batch_fields(src)
    # the transaction index is regenerated: the ABORT marker at 13 of producer 9's transaction from 10
    txn = (tmp_path / "out" / "gen-v2-0" / "00000000000000000000.txnindex").read_bytes()
    assert struct.unpack(">hqqqq", txn) == (0, 9, 10, 13, 14)


def test_v2_to_v1_to_v2_loses_only_what_v1_cannot_hold(tmp_path: Path) -> None:
    src = make_v2_partition(tmp_path / "src" / "gen-v2-0")
    v1 = convert_partition(Target(Partition(str(src))), ConvertOptions(1, GZIP), output_root=str(tmp_path / "v1"))
    back = convert_partition(Target(Partition(str(tmp_path / "v1" / "gen-v2-0"))), ConvertOptions(2),
                             output_root=str(tmp_path / "v2"))
    got = kstore_records(tmp_path / "v2" / "gen-v2-0")
    assert got == expected_after(source_records(src), 1)  # offsets, timestamps, keys, values; no headers, no markers
    losses = v1.stats.losses
    assert losses["control_batches"] == 3 and losses["abort_markers"] == 1 and losses["empty_batches"] == 1
    assert losses["headers"] == sum(1 for (r, c) in source_records(src) if r[4] and not c)
    assert losses["transactional"] == 3 and losses["producer_fields"] == 4 and losses["delete_horizons"] == 1
    assert losses["offset_ranges"] == 1 and losses["leader_epochs"] == 8
    assert "timestamps" not in losses
    assert not back.stats.lossy
    # the log end (34, after the final COMMIT marker) survives as an empty segment at 34
    assert v1.empty_tail_segment == 34 and _log_end(tmp_path / "v2" / "gen-v2-0") == 34
    # LogAppendTime survives v1: the batch's records carry the append time
    lat = [r for r in got if 26 <= r[0] <= 28]
    assert {r[1] for r in lat} == {TS + 500}


def test_up_conversion_groups_legacy_entries_up_to_batch_bytes(tmp_path: Path) -> None:
    src = CORPUS / "logs" / "legacy-v1-0"
    before = source_records(src)
    for batch_bytes, expect_max in ((None, 16384), (600, 600)):
        out_root = tmp_path / f"out-{batch_bytes}"
        result = convert_partition(Target(Partition(str(src))), ConvertOptions(2, batch_bytes=batch_bytes),
                                   output_root=str(out_root))
        batches = [b for s in Partition(str(out_root / "legacy-v1-0")).segments for b in read_batches(s.log)]
        assert len(batches) == result.stats.batches_out < result.stats.batches_in
        assert all(b.size <= expect_max for b in batches if b.count > 1)
        assert kstore_records(out_root / "legacy-v1-0") == [r for r, _ in before]
    small = tmp_path / "out-600" / "legacy-v1-0"
    big = tmp_path / "out-None" / "legacy-v1-0"
    assert sum(1 for s in Partition(str(small)).segments for _ in read_batches(s.log)) > \
        sum(1 for s in Partition(str(big)).segments for _ in read_batches(s.log))


def test_up_conversion_keeps_gaps_and_append_times(tmp_path: Path) -> None:
    src = make_legacy_partition(tmp_path / "src" / "gen-legacy-0")
    convert_partition(Target(Partition(str(src))), ConvertOptions(2, GZIP), output_root=str(tmp_path / "out"))
    out = tmp_path / "out" / "gen-legacy-0"
    batches = [b for s in Partition(str(out)).segments for b in read_batches(s.log)]
    # segment 0: CreateTime entries of v1 and v0 together; segment 1: one batch per append time, then CreateTime
    assert [(b.base_offset, b.last_offset, b.timestamp_type) for b in batches] == [
        (0, 12, 0), (20, 22, 1), (23, 24, 1), (25, 25, 1), (30, 40, 0)]
    assert [b.max_timestamp for b in batches[1:4]] == [TS + 777, TS + 888, TS + 999]
    got = kstore_records(out)
    assert [r[0] for r in got] == [0, 1, 2, 5, 7, 8, 9, 10, 12, 20, 21, 22, 23, 24, 25, 30, 31, 40]
    assert [r[1] for r in got if r[0] in (9, 10, 12, 30)] == [-1, -1, -1, -1]  # v0 records keep -1


def test_regrouping_v2_merges_only_whole_plain_batches(tmp_path: Path) -> None:
    src = tmp_path / "src" / "p-0"
    plain = [build_v2_batch([RecordSpec(o, TS + o, b"k", b"v" * 30)]) for o in range(6)]
    idem = build_v2_batch([RecordSpec(6, TS, b"k", b"v"), RecordSpec(7, TS, b"k", b"v")], producer_id=3,
                          producer_epoch=0, base_sequence=0)
    compacted = build_v2_batch([RecordSpec(9, TS + 9, b"k", b"v")], base_offset=8, last_offset_delta=3)
    _write(src, [(0, plain + [idem, compacted])])
    convert_partition(Target(Partition(str(src))), ConvertOptions(2, GZIP, batch_bytes=200), output_root=str(tmp_path / "o"))
    batches = list(read_batches(tmp_path / "o" / "p-0" / "00000000000000000000.log"))
    ranges = [(b.base_offset, b.last_offset, b.producer_id) for b in batches]
    assert ranges[-2:] == [(6, 7, 3), (8, 11, -1)]  # producer batch alone; the compacted range kept
    assert len(ranges) > 3 and ranges[0][0] == 0 and all(b.size <= 200 for b in batches)
    assert [r[0] for r in kstore_records(tmp_path / "o" / "p-0")] == [0, 1, 2, 3, 4, 5, 6, 7, 9]


def test_v0_target_loses_timestamps_and_counts_them(tmp_path: Path) -> None:
    stats = ConvertStats()
    batches = list(read_batches(build_legacy_batch([RecordSpec(0, TS, b"k", b"v"), RecordSpec(1, -1, b"k", b"v")], magic=1)))
    out = list(convert_batches(batches, ConvertOptions(0), stats))
    assert stats.losses["timestamps"] == 1
    entries = list(read_batches(b"".join(d for d, _, _ in out)))
    assert [e.magic for e in entries] == [0, 0] and [r.timestamp for e in entries for r in e.records()] == [-1, -1]


def test_strict_refuses_lossy_conversions_and_writes_nothing(tmp_path: Path) -> None:
    src = make_v2_partition(tmp_path / "src" / "gen-v2-0")
    before = {n: (src / n).read_bytes() for n in os.listdir(src)}
    with pytest.raises(LossyConversionError, match="headers"):
        convert_partition(Target(Partition(str(src))), ConvertOptions(1, strict=True))
    with pytest.raises(LossyConversionError):
        convert_partition(Target(Partition(str(src))), ConvertOptions(1, strict=True), output_root=str(tmp_path / "o"))
    assert {n: (src / n).read_bytes() for n in os.listdir(src)} == before
    assert not (tmp_path / "o" / "gen-v2-0").exists()  # refused: not even the partition directory is left
    # lossless conversions pass --strict
    legacy = make_legacy_partition(tmp_path / "src" / "gen-legacy-0")
    r = convert_partition(Target(Partition(str(legacy))), ConvertOptions(2, ZSTD, strict=True), output_root=str(tmp_path / "o2"))
    assert not r.stats.lossy


def test_option_checks() -> None:
    with pytest.raises(UsageError, match="zstd"):
        ConvertOptions(1, ZSTD)
    with pytest.raises(UsageError, match="needs --compression"):
        ConvertOptions(2, level=3)
    with pytest.raises(UsageError, match="level"):
        ConvertOptions(2, GZIP, level=12)
    with pytest.raises(UsageError, match="no compression level"):
        ConvertOptions(2, SNAPPY, level=1)
    with pytest.raises(UsageError):
        ConvertOptions(3)


def test_in_place_down_conversion_keeps_checkpoints_and_empties_snapshots(tmp_path: Path) -> None:
    src = source_partition("transactional-0", tmp_path)
    epochs = read_leader_epoch_checkpoint(src / "leader-epoch-checkpoint")
    snapshots = sorted(n for n in os.listdir(src) if n.endswith(".snapshot"))
    assert any(read_snapshot(src / n).producers for n in snapshots)
    result = convert_partition(Target(Partition(str(src))), ConvertOptions(1, GZIP))
    assert result.status == "converted" and result.empty_tail_segment == 481
    assert read_leader_epoch_checkpoint(src / "leader-epoch-checkpoint") == epochs
    assert sorted(n for n in os.listdir(src) if n.endswith(".snapshot")) == snapshots
    assert all(not read_snapshot(src / n).producers for n in snapshots)
    assert not [n for n in os.listdir(src) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert _log_end(src) == 481
    assert_indexes_are_what_rebuild_index_writes(src, 4096)
    # a rerun finds nothing to do
    again = convert_partition(Target(Partition(str(src))), ConvertOptions(1, GZIP))
    assert again.status == "unchanged" and again.stats.unchanged_batches == again.stats.batches_in


def test_segment_bytes_rolls_and_keeps_the_first_base_offset(tmp_path: Path) -> None:
    src = source_partition("v2-compact-0", tmp_path)
    before = kstore_records(src)
    result = convert_partition(Target(Partition(str(src))), ConvertOptions(2, segment_bytes=20000))
    segs = Partition(str(src)).segments
    assert segs[0].base_offset == 0 and 1 < len(segs) < result.stats.segments_in
    assert all(os.path.getsize(s.log) <= 20000 for s in segs)
    assert kstore_records(src) == before
    assert_indexes_are_what_rebuild_index_writes(src, 4096)


def test_one_segment_path_converts_only_that_segment(tmp_path: Path) -> None:
    src = source_partition("legacy-v1-0", tmp_path)
    p = Partition(str(src))
    other = {s.log: Path(s.log).read_bytes() for s in p.segments[1:]}
    convert_partition(Target(p, p.segments[0].base_offset), ConvertOptions(2, ZSTD))
    p = Partition(str(src))
    assert {b.magic for b in read_batches(p.segments[0].log)} == {2}
    assert {s.log: Path(s.log).read_bytes() for s in p.segments[1:]} == other
    plan = plan_partition(p, only=p.segments[0].base_offset, index_interval_bytes=700)
    assert not plan.has_problems and all(c.action == "unchanged" for c in plan.segments[0].changes)


# --------------------------------------------------------------------------- the codec thread pool


def _many_wrappers(directory: Path, n: int = 60, bad: Tuple[int, ...] = ()) -> Path:
    """v1 gzip wrappers of 40 records each over two segments (enough to fill the pool's queues several
    times over); the wrappers at the indexes in `bad` hold garbage in place of gzip, under a valid CRC."""
    def wrapper(i: int) -> bytes:
        recs = [RecordSpec(40 * i + j, TS + j, b"k%d" % j, os.urandom(8).hex().encode() * (j % 7)) for j in range(40)]
        if i in bad:
            return build_legacy_entry(40 * i + 39, 1, GZIP, TS, None, b"\x1f\x8b not gzip %d" % i)
        return build_legacy_batch(recs, magic=1, codec=GZIP)
    half = n // 2
    _write(directory, [(0, [wrapper(i) for i in range(half)]), (40 * half, [wrapper(i) for i in range(half, n)])])
    return directory


@pytest.fixture
def pool_every_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every codec job to the pool, however small (these tests' batches are far below POOL_MIN_BYTES), and
    output batches compressed there a few at a time (chunks of ~2.5 KB: two or three 1000-byte batches)."""
    from kstore_cli.operations import convert_batches

    monkeypatch.setattr(convert_batches, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(convert_batches, "COMPRESS_CHUNK_BYTES", 2500)


class _CountingPool:
    """A ThreadPoolExecutor stand-in that runs jobs at once and counts them by function name."""

    def __init__(self, workers: int, *args, **kwargs) -> None:
        self.jobs: List[str] = []
        self.workers = workers
        _CountingPool.last = self

    def submit(self, fn, *args):
        from concurrent.futures import Future

        self.jobs.append(getattr(fn, "__name__", "?"))
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed back through the future, as the pool does
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def test_codec_jobs_reach_the_pool_large_or_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v2 output batches go to the pool in chunks of about COMPRESS_CHUNK_BYTES, one task each (here each
    segment's outputs, far below a chunk, make one task, submitted when its first batch is written). A
    source batch the regular path reads goes to the pool only when it has POOL_MIN_BYTES or more (an lz4
    wrapper here); gzip and uncompressed legacy entries, whatever their size, are inflated by the fast
    path in this thread. The bytes are the same either way."""
    from kstore_cli.operations import convert, convert_batches

    monkeypatch.setattr(convert, "ThreadPoolExecutor", _CountingPool)
    small = Partition(str(_many_wrappers(tmp_path / "small" / "p-0")))
    out = {}
    for jobs in (1, 2):
        out[jobs] = tmp_path / f"small-out{jobs}"
        result = convert_partition(Target(small, None), ConvertOptions(2, codec=ZSTD, jobs=jobs),
                                   output_root=str(out[jobs]))
    assert len(small.segments) == 2 and result.stats.batches_out > 2
    assert _CountingPool.last.jobs == ["_finish_v2_chunk"] * 2
    assert _CountingPool.last.workers == 1  # the converting thread is the other job
    assert all((out[1] / "p-0" / f.name).read_bytes() == f.read_bytes() for f in (out[2] / "p-0").iterdir())

    for codec, inflated_here in ((LZ4, False), (GZIP, True)):
        def big(i: int) -> bytes:  # ~40 KiB compressed: random hex does not shrink much
            recs = [RecordSpec(100 * i + j, TS + j, b"k%d" % j, os.urandom(400).hex().encode()) for j in range(100)]
            return build_legacy_batch(recs, magic=1, codec=codec)
        _write(tmp_path / f"big{codec}" / "p-0", [(0, [big(i) for i in range(4)])])
        large = Partition(str(tmp_path / f"big{codec}" / "p-0"))
        assert all(b.size >= convert_batches.POOL_MIN_BYTES for b in read_batches(large.segments[0].log))
        convert_partition(Target(large, None), ConvertOptions(2, codec=ZSTD, jobs=2, batch_bytes=64 * 1024),
                          output_root=str(tmp_path / f"big{codec}-out"))
        jobs = _CountingPool.last.jobs
        assert jobs.count("record_table") == (0 if inflated_here else 4) and jobs.count("_finish_v2_chunk") >= 1
        assert len(jobs) == jobs.count("record_table") + jobs.count("_finish_v2_chunk")


@pytest.mark.parametrize("write_behind", [0, 1, 3])
def test_an_output_wanted_before_its_chunk_is_full(write_behind: int, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With a short write-behind queue, a batch is written while its compression chunk is still filling:
    the chunk is submitted then, and the next batches start a new chunk (same bytes as one thread)."""
    from kstore_cli.operations import convert

    real_init = convert._SegmentCopier.__init__

    def short_queue(self, *args, **kwargs) -> None:
        real_init(self, *args, **kwargs)
        self.write_behind = write_behind

    monkeypatch.setattr(convert._SegmentCopier, "__init__", short_queue)
    src = Partition(str(_many_wrappers(tmp_path / "src" / "p-0")))
    outputs = {}
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}"
        convert_partition(Target(src, None), ConvertOptions(2, codec=ZSTD, jobs=jobs, batch_bytes=1000),
                          output_root=str(out))
        outputs[jobs] = {f.name: f.read_bytes() for f in sorted((out / "p-0").iterdir())}
    assert outputs[2] == outputs[1]


@pytest.mark.usefixtures("pool_every_job")
@pytest.mark.parametrize("magic, codec", [(2, ZSTD), (2, GZIP), (2, NONE), (1, LZ4), (0, GZIP)])
def test_codec_threads_change_no_byte(magic: int, codec: int, tmp_path: Path) -> None:
    """jobs > 1 (tables decompressed and batches compressed on a pool) writes exactly jobs=1's bytes and
    counts the same, whatever the target."""
    src = Partition(str(_many_wrappers(tmp_path / "src" / "p-0")))
    outputs = {}
    for jobs in (1, 2, 3):
        out = tmp_path / f"out{jobs}"
        result = convert_partition(Target(src, None), ConvertOptions(magic, codec=codec, jobs=jobs, batch_bytes=1000),
                                   output_root=str(out))
        files = sorted((out / "p-0").iterdir())
        outputs[jobs] = ({f.name: f.read_bytes() for f in files}, result.stats.to_dict())
    assert outputs[1][1]["batches_out"] > 60
    assert outputs[2] == outputs[1] and outputs[3] == outputs[1]


@pytest.mark.usefixtures("pool_every_job")
def test_with_codec_threads_the_first_bad_batch_in_file_order_is_reported(tmp_path: Path) -> None:
    """A wrapper that fails to decompress while later ones are being decompressed ahead: the error is the
    one a single thread reports (the first bad wrapper, by file and byte), and nothing is left behind."""
    src = Partition(str(_many_wrappers(tmp_path / "src" / "p-0", bad=(7, 9, 45))))
    first_bad = [b.position for b in read_batches(src.segments[0].log)][7]
    messages = []
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}"
        with pytest.raises(KstoreError) as info:
            convert_partition(Target(src, None), ConvertOptions(2, codec=ZSTD, jobs=jobs), output_root=str(out))
        assert info.value.position == first_bad and info.value.path == src.segments[0].log
        messages.append(str(info.value))
        assert not (out / "p-0").exists()  # nothing left behind, not even the partition directory
    assert messages[0] == messages[1] and "\n" not in messages[0]


def test_jobs_must_be_positive() -> None:
    with pytest.raises(UsageError):
        ConvertOptions(2, jobs=0)
    assert ConvertOptions(2).jobs == max(1, min(2, len(os.sched_getaffinity(0))))


@pytest.mark.parametrize("codec", [LZ4, GZIP])
def test_with_codec_threads_pages_are_released_only_behind_the_batch_converted(codec: int, tmp_path: Path,
                                                                               monkeypatch) -> None:
    """Read-ahead keeps the framing from dropping pages of queued batches (a pool thread would fault them
    back in for good, the resident set growing with the segment): pages are released here, behind the
    batch being converted (lz4: the regular path; gzip: the fast path), and all the way through."""
    from kstore_cli.operations import convert as convert_mod
    from kstore_cli.record import encode as encode_mod

    wrappers = [build_legacy_batch([RecordSpec(10 * i + j, TS, None, os.urandom(12000)) for j in range(10)],
                                   magic=1, codec=codec) for i in range(120)]
    src = tmp_path / "src" / "p-0"
    _write(src, [(0, wrappers)])
    calls: List[Tuple[int, int, int]] = []  # (start, end, source bytes converted by then)
    fed = [0]
    real_feed, real_release = convert_mod.BatchConverter.feed, convert_mod.release_pages

    def feed(self, batch, table=None):
        fed[0] = batch.position + batch.size  # converted up to here
        return real_feed(self, batch, table)

    def release(buf, start, end):
        calls.append((start, end, fed[0]))
        real_release(buf, start, end)

    real_run = encode_mod.legacy_to_v2

    def run(buf, pos, *args):
        fed[0] = pos  # converted up to where the run starts; then up to where it stops
        result = real_run(buf, pos, *args)
        fed[0] = result[1]
        return result

    monkeypatch.setattr(convert_mod.BatchConverter, "feed", feed)
    monkeypatch.setattr(encode_mod, "legacy_to_v2", run)
    monkeypatch.setattr(convert_mod, "release_pages", release)
    part = Partition(str(src))
    convert_partition(Target(part, None), ConvertOptions(2, codec=ZSTD, jobs=2), output_root=str(tmp_path / "out"))
    size = os.path.getsize(part.segments[0].log)
    assert size > 3 * RELEASE_EVERY
    assert calls and all(end <= done for _start, end, done in calls)
    assert calls[0][0] == 0 and all(a[1] == b[0] for a, b in zip(calls, calls[1:]))
    assert calls[-1][1] >= size - 2 * RELEASE_EVERY


@pytest.mark.parametrize("fast", [True, False])
def test_legacy_records_joining_a_whole_v2_batch_count_in_its_max_timestamp(fast: bool, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Regrouping keeps a whole v2 batch's own max timestamp; legacy records that join its group (same
    timestamp type, leader epoch -1) raise it to theirs, or the time index and time retention would
    see the batch as older than its newest record."""
    from kstore_cli.operations import convert as convert_mod

    if not fast:
        monkeypatch.setattr(convert_mod.BatchConverter, "runs_legacy", property(lambda self: False))
    v2 = build_v2_batch([RecordSpec(i, TS + i, b"k", b"v") for i in range(3)])
    legacy = build_legacy_batch([RecordSpec(3 + i, TS + 1000 + i, b"k", b"v") for i in range(3)], magic=1, codec=GZIP)
    src = tmp_path / "src" / "t-0"
    src.mkdir(parents=True)
    (src / "00000000000000000000.log").write_bytes(v2 + legacy)
    convert_partition(Target(Partition(str(src)), None), ConvertOptions(2, codec=ZSTD, batch_bytes=16384, jobs=1),
                      output_root=str(tmp_path / "out"))
    [batch] = list(read_batches(str(tmp_path / "out" / "t-0" / "00000000000000000000.log")))
    assert (batch.base_offset, batch.last_offset, batch.max_timestamp) == (0, 5, TS + 1002)
