"""The segment writer: bytes copied exactly, indexes by Kafka's append rule (one batch per append),
which equals recovery's rule and, for one-batch appends, Kafka's own index files; rolling; txnindex."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import List

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.errors import CorruptDataError, UsageError
from kstore_cli.log import fileops
from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_v2_batch
from kstore_cli.log.index import SegmentIndexBuilder
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from kstore_cli.log.producer_state import state_at_segment
from kstore_cli.operations.recovery import recover_segment
from kstore_cli.operations.verify import ERROR, verify_partition
from kstore_cli.log.writer import PartitionWriter
from tests.conftest import CORPUS, load_manifest

TS = 1_700_000_000_000
CORPUS_PARTITIONS = sorted(p.name for p in (CORPUS / "logs").iterdir() if p.is_dir())


def interval_of(name: str) -> int:
    return load_manifest()["partitions"][f"logs/{name}"]["topicConfig"]["index.interval.bytes"]


def copy_through_writer(src: Partition, out: Path, interval: int) -> PartitionWriter:
    writer = PartitionWriter(str(out), suffix="", index_interval_bytes=interval,
                             txn_state=lambda: state_at_segment(src, src.segments[0]))
    for seg in src.segments:
        writer.start_segment(seg.base_offset)
        for batch in read_batches(seg.log):
            writer.append(batch)
    writer.close()
    return writer


@pytest.mark.parametrize("name", CORPUS_PARTITIONS)
def test_corpus_copied_byte_for_byte_with_recovery_identical_indexes(name: str, tmp_path: Path) -> None:
    src = Partition(str(CORPUS / "logs" / name))
    interval = interval_of(name)
    copy_through_writer(src, tmp_path, interval)
    state = None
    for seg in src.segments:
        prefix = tmp_path / os.path.basename(seg.log)[: -len(".log")]
        assert Path(str(prefix) + ".log").read_bytes() == Path(seg.log).read_bytes()
        # what rebuild-index (LogSegment.recover) writes for the written segment
        result, state = recover_segment(str(prefix) + ".log", seg.base_offset, index_interval_bytes=interval,
                                        txn_state=(lambda s=state: s) if state is not None else
                                        (lambda sg=seg: state_at_segment(src, sg)))
        assert Path(str(prefix) + ".index").read_bytes() == result.index_bytes
        assert Path(str(prefix) + ".timeindex").read_bytes() == result.timeindex_bytes
        txn = Path(str(prefix) + ".txnindex")
        assert (txn.read_bytes() if txn.exists() else b"") == result.txnindex_bytes
        assert result.problem is None
    findings, _plan = verify_partition(Partition(str(tmp_path)))
    assert [f for f in findings if f.severity == ERROR] == []


@pytest.mark.parametrize("name", [n for n in CORPUS_PARTITIONS if not n.startswith(("legacy", "mixed"))])
def test_v2_corpus_indexes_equal_kafkas_own_files(name: str, tmp_path: Path) -> None:
    """Kafka's broker appended one v2 batch per append here, so its own index files are what
    the writer produces (legacy produce requests append several entries at once: not comparable)."""
    src = Partition(str(CORPUS / "logs" / name))
    copy_through_writer(src, tmp_path, interval_of(name))
    for seg in src.segments:
        for path in (seg.index, seg.timeindex, seg.txnindex):
            if path is not None:
                assert (tmp_path / os.path.basename(path)).read_bytes() == Path(path).read_bytes(), path


@given(st.lists(st.tuples(st.integers(61, 3000), st.integers(-1, 50), st.integers(1, 5)), min_size=1, max_size=60),
       st.integers(0, 4096))
def test_append_rule_with_one_batch_per_append_equals_recovery_rule(batches, interval) -> None:
    append = SegmentIndexBuilder(1000, interval)
    recover = SegmentIndexBuilder(1000, interval)
    position = 0
    offset = 1000
    for size, ts_step, count in batches:
        last = offset + count - 1
        ts = -1 if ts_step < 0 else TS + ts_step
        append.appended(position, size, last, ts, last)
        recover.recovered_batch(position, size, last, ts)
        position += size
        offset = last + 1
    append.finish()
    recover.finish()
    assert append.offset_index_bytes() == recover.offset_index_bytes()
    assert append.time_index_bytes() == recover.time_index_bytes()


def v2(offset: int, n: int, *, ts: int = TS, value_size: int = 50) -> bytes:
    return build_v2_batch([RecordSpec(offset + i, ts + offset + i, b"k%06d" % (offset + i), bytes(value_size)) for i in range(n)])


def test_rolls_at_segment_bytes_like_should_roll(tmp_path: Path) -> None:
    data = [v2(i * 5, 5) for i in range(40)]
    size = len(data[0])
    segment_bytes = size * 7 + size // 2
    writer = PartitionWriter(str(tmp_path), suffix="", segment_bytes=segment_bytes, index_interval_bytes=100)
    for d in data:
        writer.append_bytes(d)
    segments = writer.close()
    assert [s.base_offset for s in segments] == [i * 35 for i in range(6)]
    assert all(s.log_size == 7 * size for s in segments[:-1]) and segments[-1].log_size == 5 * size
    for s in segments:
        assert s.log_size <= segment_bytes
        log = tmp_path / f"{s.base_offset:020d}.log"
        assert log.stat().st_size == s.log_size  # trimmed: nothing after the last batch
        assert (tmp_path / f"{s.base_offset:020d}.index").stat().st_size == 8 * s.index_entries
        assert (tmp_path / f"{s.base_offset:020d}.timeindex").stat().st_size == 12 * s.time_entries
        # the final time-index entry is the segment's max timestamp and the batch that holds it
        tidx = (tmp_path / f"{s.base_offset:020d}.timeindex").read_bytes()
        assert int.from_bytes(tidx[-12:-4], "big") == TS + s.last_offset
        assert int.from_bytes(tidx[-4:], "big") + s.base_offset == s.last_offset
    assert b"".join((tmp_path / f"{s.base_offset:020d}.log").read_bytes() for s in segments) == b"".join(data)
    findings, _ = verify_partition(Partition(str(tmp_path)))
    assert [f for f in findings if f.severity == ERROR] == []


def test_a_batch_larger_than_segment_bytes_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    writer = PartitionWriter(str(tmp_path), suffix="", segment_bytes=100)
    writer.append_bytes(v2(0, 3))
    writer.append_bytes(v2(3, 3))
    assert [s.base_offset for s in writer.close()] == [0, 3]


def test_roll_names_a_legacy_wrapper_segment_by_its_first_inner_offset(tmp_path: Path) -> None:
    recs = [RecordSpec(10 + i, TS, b"k", b"v" * 40) for i in range(4)]
    first = build_legacy_batch(recs[:2], magic=1, codec=1)
    second = build_legacy_batch(recs[2:], magic=1, codec=1)
    writer = PartitionWriter(str(tmp_path), suffix=".cleaned", segment_bytes=len(first))
    writer.append_bytes(first)
    writer.append_bytes(second)
    segments = writer.close()
    assert [s.base_offset for s in segments] == [10, 12]
    assert sorted(os.listdir(tmp_path)) == sorted(
        f"{b:020d}{ext}.cleaned" for b in (10, 12) for ext in (".log", ".index", ".timeindex"))


def test_offsets_must_increase(tmp_path: Path) -> None:
    writer = PartitionWriter(str(tmp_path), suffix="")
    writer.append_bytes(v2(5, 3))
    with pytest.raises(CorruptDataError, match="must increase"):
        writer.append_bytes(v2(6, 3))
    with pytest.raises(UsageError):
        writer.start_segment(7)


def test_dry_run_writes_nothing_and_measures_the_same(tmp_path: Path) -> None:
    data = [v2(i * 5, 5) for i in range(10)]
    real = PartitionWriter(str(tmp_path / "real"), suffix="", segment_bytes=len(data[0]) * 3)
    os.makedirs(tmp_path / "real")
    dry = PartitionWriter(None, segment_bytes=len(data[0]) * 3)
    fileops.arm_crash(None)
    for d in data:
        dry.append_bytes(d)
    dry.close()
    assert fileops.operation_count() == 0
    for d in data:
        real.append_bytes(d)
    real.close()
    assert [(s.base_offset, s.log_size, s.index_bytes, s.timeindex_bytes) for s in dry.segments] == \
        [(s.base_offset, s.log_size, s.index_bytes, s.timeindex_bytes) for s in real.segments]


def test_abort_removes_every_file_written(tmp_path: Path) -> None:
    writer = PartitionWriter(str(tmp_path), segment_bytes=200)
    for i in range(6):
        writer.append_bytes(v2(i * 3, 3))
    assert os.listdir(tmp_path)
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_context_manager_aborts_on_error(tmp_path: Path) -> None:
    with pytest.raises(CorruptDataError):
        with PartitionWriter(str(tmp_path)) as writer:
            writer.append_bytes(v2(5, 3))
            writer.append_bytes(v2(0, 3))
    assert os.listdir(tmp_path) == []


def test_mtime_is_set_on_every_file(tmp_path: Path) -> None:
    writer = PartitionWriter(str(tmp_path), suffix="")
    writer.start_segment(0, mtime=1_600_000_000)
    writer.append_bytes(v2(0, 3))
    writer.close()
    for name in os.listdir(tmp_path):
        assert os.stat(tmp_path / name).st_mtime == 1_600_000_000


def test_file_operations_are_few_and_independent_of_data_size(tmp_path: Path) -> None:
    """Per segment: create+fsync of .log, .index, .timeindex; one directory fsync at the end."""
    fileops.arm_crash(None)
    writer = PartitionWriter(str(tmp_path), suffix="", segment_bytes=2000)
    rnd = random.Random(3)
    offset = 0
    for _ in range(30):
        n = rnd.randint(1, 4)
        writer.append_bytes(v2(offset, n))
        offset += n
    segments = writer.close()
    kinds: List[str] = [k for k, _ in fileops.journal]
    assert kinds.count("create") == 3 * len(segments)
    assert kinds.count("fsync") == 3 * len(segments)
    assert kinds.count("fsync-dir") == 1
    fileops.arm_crash(None)
