"""Compressed batches streamed record by record (segment/recstream.py) give exactly the records and the
errors of whole-batch decoding, and hold nothing over the bound (KSTORE_MAX_RECORD_BYTES)."""

from __future__ import annotations

import pytest

from kstore_cli import codecs
from kstore_cli.codecs import GZIP, LZ4, SNAPPY, ZSTD, get_codec
from kstore_cli.errors import CodecError, InvalidRecordError, RecordTooLargeError, UsageError
from kstore_cli.record import recstream
from kstore_cli.record.batch import RecordBatch
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.record.reader import read_batches
from tests import bombs

TS0 = 1_700_000_000_000


def _fields(records):
    return [(r.offset, r.timestamp, r.sequence, r.size_in_bytes, r.key, r.value,
             [(h.key, h.value) for h in r.headers]) for r in records]


def _batch(raw: bytes) -> RecordBatch:
    (batch,) = list(read_batches(raw))
    return batch


def _specs(n: int):
    return [RecordSpec(100 + i, TS0 + i, None if i % 3 == 0 else b"k%d" % i, None if i % 5 == 4 else b"v" * (i * 37),
                       headers=[("h", b"x" * i), ("n", None)] if i % 2 else []) for i in range(n)]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_streamed_records_equal_whole_batch(codec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = build_v2_batch(_specs(40), codec=codec, producer_id=7, producer_epoch=1, base_sequence=0x7FFFFFF0)
    whole = _fields(_batch(raw).records())
    monkeypatch.setattr("kstore_cli.record.batch.WHOLE_BATCH_BYTES", 0)  # stream every compressed batch
    it = iter(_batch(raw))
    assert not isinstance(it, type(iter([])))  # a generator, not a list
    assert _fields(it) == whole
    assert _fields(_batch(raw).records()) == whole


def test_record_over_bound_is_refused_with_file_and_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = bombs.many_records_bomb(ZSTD, 3, 5000)
    monkeypatch.setattr("kstore_cli.record.batch.WHOLE_BATCH_BYTES", 0)
    monkeypatch.setattr(codecs, "max_record_bytes", 4096)
    (batch,) = list(read_batches(raw, path="x.log"))
    with pytest.raises(RecordTooLargeError) as info:
        list(batch)
    assert info.value.path == "x.log" and info.value.position == 0
    assert "the record at offset 0 is 50" in info.value.message and "bound of 4096 bytes" in info.value.message
    assert info.value.exit_status == 3


def test_records_list_is_bounded_in_total(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = bombs.many_records_bomb(LZ4, 20, 1000)
    monkeypatch.setattr("kstore_cli.record.batch.WHOLE_BATCH_BYTES", 0)
    monkeypatch.setattr(codecs, "max_record_bytes", 8192)
    assert len(list(_batch(raw))) == 20  # streamed: one record at a time is within the bound
    with pytest.raises(RecordTooLargeError, match="the batch's records"):
        _batch(raw).records()


def test_whole_decompress_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(100_000)
    for codec in (GZIP, SNAPPY, LZ4, ZSTD):
        packed = get_codec(codec).compress(data, 2)
        assert get_codec(codec).decompress(packed, 2) == data
        with pytest.raises(RecordTooLargeError):
            get_codec(codec).decompress(packed, 2, limit=99_999)


def _plain(specs) -> bytes:
    return bytes(memoryview(build_v2_batch(specs))[61:])


@pytest.mark.parametrize("codec", [GZIP, ZSTD])
def test_stream_errors_are_kafkas(codec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kstore_cli.record.batch.WHOLE_BATCH_BYTES", 0)
    section = _plain([RecordSpec(0, TS0, b"k", b"v" * 100), RecordSpec(1, TS0, b"k", b"v")])
    c = get_codec(codec)
    short = bombs.v2_batch(codec, c.compress(section, 2), 3)  # declares 3 records, holds 2
    with pytest.raises(InvalidRecordError, match="premature EOF reached"):
        list(_batch(short))
    long = bombs.v2_batch(codec, c.compress(section, 2), 1)  # declares 1 record, holds 2
    with pytest.raises(InvalidRecordError, match="records still remaining"):
        list(_batch(long))
    cut = bombs.v2_batch(codec, c.compress(section[:50], 2), 2)  # the first record cut short
    with pytest.raises(InvalidRecordError, match=r"expected \d+ bytes in record payload, but instead the buffer has only 4\d remaining"):
        list(_batch(cut))


def test_snappy_raw_length_header_is_checked_before_inflating(monkeypatch: pytest.MonkeyPatch) -> None:
    import snappy

    raw = snappy.compress(bytes(200_000))  # a raw block (no xerial magic), declared length 200000
    monkeypatch.setattr(codecs, "max_record_bytes", 100_000)
    with pytest.raises(RecordTooLargeError, match="200000"):
        get_codec(SNAPPY).stream(raw, 2).read(10)
    lying = b"\xff\xff\xff\xff\x07" + raw[3:]  # declares 2 GiB from a few KB: damage, not a large record
    with pytest.raises(CodecError, match="more than its"):
        get_codec(SNAPPY).stream(lying, 2).read(10)


def test_gzip_stream_reads_concatenated_members_in_pieces() -> None:
    one, two = get_codec(GZIP).compress(b"a" * 5000, 2), get_codec(GZIP).compress(b"b" * 3000, 2)
    s = get_codec(GZIP).stream(one + two, 2)
    got = b""
    while True:
        piece = s.read(700)
        assert len(piece) <= 700
        if not piece:
            break
        got += piece
    assert got == b"a" * 5000 + b"b" * 3000
    with pytest.raises(CodecError, match="ended prematurely"):
        get_codec(GZIP).stream(one[:-20], 2).read_upto(10_000)


def test_parse_size() -> None:
    assert codecs.parse_size("64M") == 64 << 20 and codecs.parse_size("1GiB") == 1 << 30
    assert codecs.parse_size("123") == 123 and codecs.parse_size("2k") == 2048
    for bad in ("", "x", "-5", "0", "5T"):
        with pytest.raises(UsageError):
            codecs.parse_size(bad)
    assert recstream.WHOLE_BATCH_BYTES < codecs.DEFAULT_MAX_RECORD_BYTES
