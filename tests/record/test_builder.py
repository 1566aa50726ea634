"""Batch builders: the spec's test vectors, round trips through kstore's reader, and
kafka-python / aiokafka reading what kstore writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.record.reader import read_batches
from kstore_cli.record.builder import (
    RecordSpec,
    build_control_batch,
    build_legacy_batch,
    build_legacy_entry,
    build_v2_batch,
)

TS = 1700000000000


def test_spec_vector_1_single_record() -> None:
    data = build_v2_batch([RecordSpec(0, TS, b"k", b"v")], partition_leader_epoch=0)
    assert data.hex() == (
        "0000000000000000" "0000003a" "00000000" "02" "e99b8dd8" "0000" "00000000" "0000018bcfe56800"
        "0000018bcfe56800" "ffffffffffffffff" "ffff" "ffffffff" "00000001" "1000000002" "6b02" "7600"
    )


def test_spec_vector_2_producer_and_headers() -> None:
    data = build_v2_batch(
        [RecordSpec(100, TS, b"a", b"xyz", [("h1", b"\x01")]), RecordSpec(101, TS + 5, b"b", None)],
        partition_leader_epoch=5, producer_id=4000, producer_epoch=2, base_sequence=10,
    )
    assert len(data) == 85
    assert next(read_batches(data)).crc == 659553160


def test_spec_vector_3_commit_marker() -> None:
    data = build_control_batch(10, TS, commit=True, coordinator_epoch=100, producer_id=98323,
                               producer_epoch=99, partition_leader_epoch=7)
    assert data.hex() == (
        "000000000000000a" "00000042" "00000007" "02" "7a94e469" "0030" "00000000" "0000018bcfe56800"
        "0000018bcfe56800" "0000000000018013" "0063" "ffffffff" "00000001" "2000000008" "00000001" "0c"
        "0000" "00000064" "00"
    )
    control = next(read_batches(data)).records()[0].control
    assert (control.type_name, control.coordinator_epoch) == ("COMMIT", 100)


def test_spec_vector_4_empty_batch() -> None:
    data = build_v2_batch([], base_offset=5, last_offset_delta=4, producer_id=1000, producer_epoch=0,
                          base_sequence=20, max_timestamp=TS, partition_leader_epoch=0)
    assert len(data) == 61
    batch = next(read_batches(data))
    assert (batch.crc, batch.count, batch.last_offset, batch.is_valid) == (2819855087, 0, 9, True)


def test_spec_vectors_5_and_6_legacy() -> None:
    assert build_legacy_entry(0, 1, 0, TS, b"k", b"v").hex() == (
        "0000000000000000" "00000018" "39268c33" "01" "00" "0000018bcfe56800" "00000001" "6b" "00000001" "76"
    )
    assert build_legacy_entry(0, 0, 0, -1, b"k", b"v").hex() == (
        "0000000000000000" "00000010" "1fecd70a" "00" "00" "00000001" "6b" "00000001" "76"
    )


_bytes = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3)


@st.composite
def record_sets(draw, magic: int):
    n = draw(st.integers(1, 12))
    start = draw(st.integers(0, 2**40))
    gaps = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    offsets = []
    o = start
    for g in gaps:
        offsets.append(o)
        o += g if magic != 1 else 1
    ts0 = draw(st.integers(0, 2**41))
    return [
        RecordSpec(off, ts0 + draw(st.integers(-1000, 1000)), draw(_bytes), draw(_bytes),
                   draw(_headers) if magic == 2 else ())
        for off in offsets
    ]


@given(record_sets(2), st.sampled_from([0, 1, 2, 3, 4]), st.integers(-1, 2**31 - 1))
def test_v2_round_trip(records, codec, epoch) -> None:
    data = build_v2_batch(records, codec=codec, partition_leader_epoch=epoch)
    (batch,) = list(read_batches(data))
    assert batch.is_valid and batch.compression == codec
    got = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records
    ]


@given(st.sampled_from([0, 1]), st.sampled_from([0, 1, 2, 3]), st.data())
def test_legacy_round_trip(magic, codec, data) -> None:
    records = data.draw(record_sets(magic))
    raw = build_legacy_batch(records, magic=magic, codec=codec)
    batches = list(read_batches(raw))
    got = [r for b in batches for r in b.records()]
    assert all(b.is_valid for b in batches)
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in records]
    want_ts = [-1] * len(records) if magic == 0 else [r.timestamp for r in records]
    assert [r.timestamp for r in got] == want_ts


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_kafka_python_reads_what_kstore_writes(codec) -> None:
    from kafka.record.memory_records import MemoryRecords

    records = [RecordSpec(7 + i, TS + i, b"key-%d" % i, None if i == 3 else b"value" * i, [("h", b"x")]) for i in range(6)]
    data = build_v2_batch(records, codec=codec, producer_id=5, producer_epoch=1, base_sequence=0)
    data += build_control_batch(13, TS + 10, commit=False, coordinator_epoch=3, producer_id=5, producer_epoch=1)
    mr = MemoryRecords(data)
    seen = []
    while mr.has_next():
        batch = mr.next_batch()
        for r in batch:
            seen.append((r.offset, r.timestamp, r.key, r.value))
    assert seen[:6] == [(r.offset, r.timestamp, r.key, r.value) for r in records]
    assert seen[6][0] == 13


@pytest.mark.parametrize("magic,codec", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)])
def test_kafka_python_reads_kstore_legacy(magic, codec) -> None:
    from kafka.record.memory_records import MemoryRecords

    records = [RecordSpec(20 + i, TS + i, b"k%d" % i, b"v%d" % i) for i in range(4)]
    mr = MemoryRecords(build_legacy_batch(records, magic=magic, codec=codec))
    seen = []
    while mr.has_next():
        for r in mr.next_batch():
            seen.append((r.offset, r.key, r.value))
    assert seen == [(r.offset, r.key, r.value) for r in records]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_aiokafka_reads_what_kstore_writes(codec) -> None:
    from aiokafka.record.memory_records import MemoryRecords

    records = [RecordSpec(i, TS + i, b"k%d" % i, b"v" * i, [("a", None)]) for i in range(5)]
    mr = MemoryRecords(build_v2_batch(records, codec=codec))
    seen = []
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        for r in batch:
            seen.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    assert seen == [(r.offset, r.timestamp, r.key, r.value, [("a", None)]) for r in records]
