"""Damaged and truncated batches in what the Spark source reads (no Spark: the planner and the
reader the executors run). Every batch's CRC is checked; a damaged batch or a segment cut short
fails the read with the file and byte, or with onCorruption=skip is left out and listed."""

from __future__ import annotations

import glob
import json
import os
import shutil
import struct

import pyarrow as pa
import pytest

from kstore_cli.errors import CorruptDataError, CorruptRecordError, UsageError
from kstore_cli.record.reader import read_batches
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import plan_read, select_partitions
from kstore_cli.spark.read import SkippedBatch, read_task

from tests.spark.conftest import CORPUS_LOGS, arrow_rows, by_key, core_rows
from tests.spark.datagen import write_partition


def read_all(path, **options):
    """(rows, skipped) of a read of `path` the way the source reads it."""
    opts = ReadOptions({"path": str(path), **options})
    plan = plan_read(opts)
    skipped = [] if opts.on_corruption == "skip" else None
    batches = [b for t in plan.tasks for b in read_task(t, include_headers=opts.include_headers, skipped=skipped)]
    rows = arrow_rows(pa.Table.from_batches(batches), headers=opts.include_headers) if batches else []
    return rows, skipped


def batch_holding(log, position):
    """The batch whose bytes hold `position` (read before the damage)."""
    return next(b for b in read_batches(log) if b.position <= position < b.position + b.size)


def flip(log, position):
    with open(log, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x40]))


@pytest.fixture
def partition(tmp_path, request):
    """A generated partition of several segments (codec by the test's parameter)."""
    codecs = getattr(request, "param", (0,))
    path = tmp_path / "orders-0"
    write_partition(str(path), 600, seed=5, segment_bytes=8 * 1024, index_interval=1024, batch_records=20,
                    codecs=codecs)
    return path


def without(rows, batch):
    return [r for r in rows if not batch.base_offset <= r["offset"] <= batch.last_offset]


READS = [
    pytest.param({}, id="columns"),                               # runs decoded in bulk (read_columns)
    pytest.param({"includeHeaders": "true"}, id="records"),      # batch by batch, records decoded
    pytest.param({"startingOffsets": '{"orders":{"0":5}}'}, id="offset-bound"),
]


@pytest.mark.parametrize("partition", [(0,), (4,), (1, 2, 3)], indirect=True, ids=["none", "zstd", "codecs"])
@pytest.mark.parametrize("options", READS)
def test_a_flipped_byte_inside_a_record_fails_the_read_naming_file_and_byte(partition, options):
    before, _ = read_all(partition, **options)
    log = sorted(glob.glob(str(partition / "*.log")))[1]
    victim = batch_holding(log, 3000)
    flip(log, victim.position + victim.size - 10)  # inside the last record: the header still reads right
    with pytest.raises(CorruptRecordError) as info:
        read_all(partition, **options)
    assert (info.value.path, info.value.position) == (log, victim.position)
    assert f"{log} at byte {victim.position}: Record is corrupt (stored crc = " in str(info.value)
    rows, skipped = read_all(partition, onCorruption="skip", **options)
    assert [s.to_dict() for s in skipped] == [{
        "topic": "orders", "partition": 0, "file": log, "position": victim.position, "bytes": victim.size,
        "baseOffset": victim.base_offset, "lastOffset": victim.last_offset, "reason": info.value.message}]
    assert rows == without(before, victim) and len(rows) < len(before)


@pytest.mark.parametrize("options", READS)
def test_bytes_cut_from_the_end_of_a_segment_fail_the_read(partition, options):
    before, _ = read_all(partition, **options)
    logs = sorted(glob.glob(str(partition / "*.log")))
    log = logs[2]  # not the last segment: the reader used to go on with the next one
    last = list(read_batches(log))[-1]
    os.truncate(log, os.path.getsize(log) - 100)
    with pytest.raises(CorruptRecordError) as info:
        read_all(partition, **options)
    assert (info.value.path, info.value.position) == (log, last.position)
    assert (f"truncated batch: expected a whole batch, found the batch here is {last.size} bytes but the "
            f"segment ends after {last.size - 100}") in str(info.value)
    rows, skipped = read_all(partition, onCorruption="skip", **options)
    assert [(s.log, s.position, s.size, s.base_offset, s.last_offset) for s in skipped] == [
        (log, last.position, last.size - 100, last.base_offset, last.last_offset)]
    assert rows == without(before, last)


def test_a_few_stray_bytes_after_the_last_batch_are_no_whole_batch(partition):
    log = sorted(glob.glob(str(partition / "*.log")))[-1]
    size = os.path.getsize(log)
    with open(log, "ab") as f:
        f.write(b"\x00" * 9)  # too short even for a batch's offset and size
    with pytest.raises(CorruptRecordError, match=f"at byte {size}: truncated batch: expected a whole batch, "
                                                 f"found 9 bytes that are no whole batch"):
        read_all(partition)
    _rows, skipped = read_all(partition, onCorruption="skip")
    assert [(s.position, s.size, s.base_offset) for s in skipped] == [(size, 9, None)]
    assert "offsets unknown" in skipped[0].text()


def test_a_size_below_kafkas_minimum_loses_the_rest_of_the_segment_and_says_so(partition):
    before, _ = read_all(partition)
    log = sorted(glob.glob(str(partition / "*.log")))[1]
    batches = list(read_batches(log))
    victim = batches[1]
    with open(log, "r+b") as f:
        f.seek(victim.position + 8)
        f.write(struct.pack(">i", 5))  # no framing goes past it (Kafka's CorruptRecordException)
    with pytest.raises(CorruptRecordError) as info:
        read_all(partition)
    assert (info.value.path, info.value.position) == (log, victim.position)
    rows, skipped = read_all(partition, onCorruption="skip")
    rest = os.path.getsize(log) - victim.position
    assert [(s.position, s.size, s.base_offset) for s in skipped] == [(victim.position, rest, victim.base_offset)]
    lost = {o for b in batches[1:] for o in range(b.base_offset, b.last_offset + 1)}
    assert rows == [r for r in before if r["offset"] not in lost]


def test_a_damaged_legacy_message_fails_the_read(tmp_path):
    path = tmp_path / "legacy-v0-0"
    shutil.copytree(CORPUS_LOGS / "legacy-v0-0", path)
    log = sorted(glob.glob(str(path / "*.log")))[0]
    victim = list(read_batches(log))[3]
    flip(log, victim.position + victim.size - 1)
    with pytest.raises(CorruptRecordError) as info:
        read_all(path)
    assert (info.value.path, info.value.position) == (log, victim.position)
    rows, skipped = read_all(path, onCorruption="skip")
    # A compressed wrapper's first offset is inside its (damaged) data: only its last is known.
    assert victim.compression
    assert [(s.position, s.base_offset, s.last_offset) for s in skipped] == [(victim.position, None, victim.offset)]
    inner = {r.offset for r in batch_holding(CORPUS_LOGS / "legacy-v0-0" / os.path.basename(log), victim.position)}
    assert rows == [r for r in core_rows([CORPUS_LOGS / "legacy-v0-0"]) if r["offset"] not in inner]


def test_a_damaged_index_entry_is_no_false_alarm_and_loses_nothing(partition):
    """Byte ranges come from the .index; an entry that points inside a batch is not used (the
    slice would start or end inside a batch, which reads as a damaged or cut-off batch)."""
    log = sorted(glob.glob(str(partition / "*.log")))[1]
    index = log[:-4] + ".index"
    entries = [struct.unpack_from(">ii", open(index, "rb").read(), i) for i in range(0, os.path.getsize(index), 8)]
    assert len(entries) >= 3
    with open(index, "r+b") as f:
        for n in range(len(entries)):
            f.seek(n * 8 + 4)
            f.write(struct.pack(">i", entries[n][1] + 7))
    base = int(os.path.basename(log)[:-4])
    lo, hi = base + entries[1][0], base + entries[2][0] + 1
    rows, _ = read_all(partition, startingOffsets=json.dumps({"orders": {"0": lo}}),
                       endingOffsets=json.dumps({"orders": {"0": hi}}))
    assert [r["offset"] for r in rows] == list(range(lo, hi))


def test_the_kafka_written_corpus_reads_with_crcs_checked_and_nothing_skipped():
    rows, skipped = read_all(CORPUS_LOGS, onCorruption="skip", topics="*,__*", includeHeaders="true")
    assert skipped == []
    assert by_key(rows) == by_key(core_rows([CORPUS_LOGS], headers=True, internal=True))


def test_on_corruption_is_fail_or_skip():
    assert ReadOptions({"path": "x"}).on_corruption == "fail"
    assert ReadOptions({"path": "x", "onCorruption": "SKIP"}).on_corruption == "skip"
    with pytest.raises(UsageError, match="option onCorruption must be fail or skip, not 'ignore'"):
        ReadOptions({"path": "x", "onCorruption": "ignore"})


def test_skipped_batches_round_trip_through_dicts():
    b = SkippedBatch("t", 1, "/d/t-1/0.log", 61, 100, 5, 9, "Record is corrupt")
    assert SkippedBatch.from_dict(json.loads(json.dumps(b.to_dict()))).to_dict() == b.to_dict()
    assert b.text() == "/d/t-1/0.log at byte 61: 100 bytes skipped, offsets 5..9 (as its header says): Record is corrupt"
    assert issubclass(CorruptRecordError, CorruptDataError)


# --------------------------------------------------------------------------- internal topics


def _topics(**options):
    opts = ReadOptions({"path": str(options.pop("path", CORPUS_LOGS)), **options})
    return sorted({t.partition.topic for t in select_partitions(opts)})


def test_internal_topics_of_a_data_dir_are_read_only_when_named():
    every = _topics()
    assert "__consumer_offsets" not in every and "__transaction_state" not in every and len(every) == 18
    assert _topics(topics="*") == every
    assert _topics(topics="__*") == ["__consumer_offsets", "__transaction_state"]
    assert _topics(topics="*,__*") == sorted(every + ["__consumer_offsets", "__transaction_state"])
    assert _topics(topics="__consumer_offsets,v2-none") == ["__consumer_offsets", "v2-none"]
    assert _topics(topics="*offsets") == []  # a glob that does not start with __ does not name them
    assert _topics(subscribe="__transaction_state,v2-lz4") == ["__transaction_state", "v2-lz4"]
    assert _topics(subscribePattern="__.*") == ["__consumer_offsets", "__transaction_state"]
    assert "__consumer_offsets" not in _topics(subscribePattern=".*")
    # A PATH that is the partition directory or one of its segments names it.
    assert _topics(path=CORPUS_LOGS / "__consumer_offsets-0") == ["__consumer_offsets"]
    log = sorted(glob.glob(str(CORPUS_LOGS / "__consumer_offsets-0" / "*.log")))[0]
    assert _topics(path=log) == ["__consumer_offsets"]


def test_the_plan_says_which_internal_partitions_it_left_out():
    plan = plan_read(ReadOptions({"path": str(CORPUS_LOGS)}))
    assert plan.internal_left_out == ["__consumer_offsets-0", "__transaction_state-0"]
    assert plan_read(ReadOptions({"path": str(CORPUS_LOGS), "topics": "__*"})).internal_left_out == []
    assert plan_read(ReadOptions({"path": str(CORPUS_LOGS), "topics": "v2-*"})).internal_left_out == []


def test_a_source_read_without_an_accumulator_says_what_it_skipped_on_stderr(partition, capsys):
    pytest.importorskip("pyspark")
    from kstore_cli.spark.source import _reporting_skips

    log = sorted(glob.glob(str(partition / "*.log")))[1]
    victim = batch_holding(log, 3000)
    flip(log, victim.position + victim.size - 10)
    opts = ReadOptions({"path": str(partition), "onCorruption": "skip"})
    rows = sum(b.num_rows for t in plan_read(opts).tasks for b in _reporting_skips(t, opts))
    assert rows == 600 - victim.count
    err = capsys.readouterr().err.splitlines()
    assert err == [f"kstore: skipped {log} at byte {victim.position}: {victim.size} bytes skipped, offsets "
                   f"{victim.base_offset}..{victim.last_offset} (as its header says): Record is corrupt "
                   f"(stored crc = {victim.crc}, computed crc = {err[0].rsplit('= ', 1)[1][:-1]})"]


def test_a_partial_batch_at_the_end_of_a_running_brokers_active_segment_is_an_append_in_progress(tmp_path):
    """With the data dir's .lock held (a running broker), the bytes after the active segment's last
    whole batch are being written: read up to there, as Kafka's readers do. Anywhere else, and in a
    log nobody holds, they are a truncated batch."""
    from tests.conftest import lock_held

    data = tmp_path / "data"
    write_partition(str(data / "orders-0"), 600, seed=5, segment_bytes=8 * 1024, index_interval=1024,
                    batch_records=20, codecs=(0,))
    before, _ = read_all(data)
    logs = sorted(glob.glob(str(data / "orders-0" / "*.log")))
    first = next(read_batches(logs[0]))
    with open(logs[-1], "ab") as f:
        f.write(bytes(first.buffer[:first.size // 2]))  # half of a batch
    (data / ".lock").touch()
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        read_all(data)
    with lock_held(data):
        rows, _ = read_all(data)
        assert rows == before
        os.truncate(logs[1], os.path.getsize(logs[1]) - 100)  # a closed segment cut short: still an error
        with pytest.raises(CorruptRecordError, match=f"^{logs[1]} at byte \\d+: truncated batch"):
            read_all(data)
