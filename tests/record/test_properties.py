"""Property tests (hypothesis): random record sets written by kafka-python read back equal through
kstore; round trips of kstore's own primitives against independent encoders and codec libraries.

Profiles come from tests/conftest.py (HYPOTHESIS_PROFILE=ci|dev|long).
"""

from __future__ import annotations

import gzip as std_gzip
import importlib.util
import struct
import zlib
from typing import List

import lz4.frame
import pytest
import snappy
import zstandard
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kafka import codec as kp_codec
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kstore_cli.codecs import CODEC_NAMES, get_codec
from kstore_cli.errors import CodecError, InvalidRecordError, KstoreError
from kstore_cli.record.reader import read_batches
from kstore_cli.record.batch import increment_sequence
from kstore_cli.record.decode import read_varint, read_varlong, size_of_varint

HAVE_XXHASH = importlib.util.find_spec("xxhash") is not None
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


# --------------------------------------------------------------------------- reference zigzag encoder


def zigzag_encode(value: int, bits: int) -> bytes:
    """Kafka's ByteUtils.writeVarint/writeVarlong: zigzag, then unsigned LEB128."""
    mask = (1 << bits) - 1
    v = ((value << 1) ^ (value >> (bits - 1))) & mask
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_reference_encoder_against_kafka_vectors() -> None:
    """Known encodings (Kafka's ByteUtilsTest) so the reference itself is trusted."""
    assert zigzag_encode(0, 32) == b"\x00"
    assert zigzag_encode(-1, 32) == b"\x01"
    assert zigzag_encode(1, 32) == b"\x02"
    assert zigzag_encode(63, 32) == b"\x7e"
    assert zigzag_encode(-64, 32) == b"\x7f"
    assert zigzag_encode(64, 32) == b"\x80\x01"
    assert zigzag_encode(2**31 - 1, 32) == b"\xfe\xff\xff\xff\x0f"
    assert zigzag_encode(-(2**31), 32) == b"\xff\xff\xff\xff\x0f"
    assert zigzag_encode(2**63 - 1, 64) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert zigzag_encode(-(2**63), 64) == b"\xff" * 9 + b"\x01"


@given(st.integers(*INT32), st.binary(max_size=4), st.binary(max_size=4))
def test_varint_round_trip(value: int, before: bytes, after: bytes) -> None:
    enc = zigzag_encode(value, 32)
    buf = before + enc + after
    assert read_varint(buf, len(before), len(buf)) == (value, len(before) + len(enc))
    assert read_varint(memoryview(buf), len(before), len(buf)) == (value, len(before) + len(enc))
    assert size_of_varint(value) == len(enc)


@given(st.integers(*INT64), st.binary(max_size=4))
def test_varlong_round_trip(value: int, after: bytes) -> None:
    enc = zigzag_encode(value, 64)
    buf = enc + after
    assert read_varlong(buf, 0, len(buf)) == (value, len(enc))


@given(st.lists(st.integers(0, 0x7F), min_size=4, max_size=4), st.integers(0, 0x7F))
def test_varint_fifth_byte_bits_past_31_are_dropped(low: List[int], fifth: int) -> None:
    """Kafka's readVarint keeps only 32 bits of a 5-byte varint (no continuation on the 5th byte)."""
    buf = bytes(b | 0x80 for b in low) + bytes([fifth])
    raw = sum(b << (7 * i) for i, b in enumerate(low)) | (fifth << 28)
    raw &= 0xFFFFFFFF
    assert read_varint(buf, 0, 5) == ((raw >> 1) ^ -(raw & 1), 5)


@given(st.binary(min_size=4, max_size=4), st.integers(0x80, 0xFF))
def test_varint_continuation_on_fifth_byte_is_an_error(low: bytes, fifth: int) -> None:
    buf = bytes(b | 0x80 for b in low) + bytes([fifth]) + b"\x00"
    with pytest.raises(InvalidRecordError):
        read_varint(buf, 0, len(buf))


@given(st.binary(min_size=9, max_size=9), st.integers(0x80, 0xFF))
def test_varlong_continuation_on_tenth_byte_is_an_error(low: bytes, tenth: int) -> None:
    buf = bytes(b | 0x80 for b in low) + bytes([tenth]) + b"\x00"
    with pytest.raises(InvalidRecordError):
        read_varlong(buf, 0, len(buf))


# --------------------------------------------------------------------------- codecs


DATA = st.one_of(
    st.binary(max_size=2048),
    # compressible and multi-block data (LZ4 blocks are 64 KiB, xerial snappy blocks 32 KiB)
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=64), st.integers(1, 3000)),
)


@pytest.mark.parametrize("codec_id", sorted(CODEC_NAMES))
@pytest.mark.parametrize("magic", [0, 1, 2])
@given(data=DATA)
def test_codec_round_trip(codec_id: int, magic: int, data: bytes) -> None:
    codec = get_codec(codec_id)
    if codec_id == 4 and magic < 2:
        with pytest.raises(CodecError):
            codec.compress(data, magic)
        return
    packed = codec.compress(data, magic)
    assert codec.decompress(packed, magic) == data
    assert codec.decompress(memoryview(packed), magic) == data


@given(data=DATA)
def test_lz4_kstore_frames_read_by_lz4_frame(data: bytes) -> None:
    """v1/v2 frames are standard LZ4 frames; v0 frames carry Kafka's broken header checksum."""
    packed = get_codec(3).compress(data, 2)
    assert packed[:7] == bytes.fromhex("04224d18604082")
    assert lz4.frame.decompress(packed) == data
    broken = get_codec(3).compress(data, 0)
    assert broken[:7] == bytes.fromhex("04224d1860401a")
    assert broken[7:] == packed[7:]


@given(
    data=DATA,
    block_size=st.sampled_from([lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB, lz4.frame.BLOCKSIZE_MAX1MB]),
    content_checksum=st.booleans(),
    block_checksum=st.booleans(),
    store_size=st.booleans(),
    level=st.sampled_from([0, 9, 16]),
)
def test_lz4_frame_output_read_by_kstore(data, block_size, content_checksum, block_checksum, store_size, level) -> None:
    compressor = lz4.frame.LZ4FrameCompressor(
        block_size=block_size,
        block_linked=False,  # Kafka reads independent blocks only
        compression_level=level,
        content_checksum=content_checksum,
        block_checksum=block_checksum,
    )
    packed = compressor.begin(len(data) if store_size else 0) + compressor.compress(data) + compressor.flush()
    assert get_codec(3).decompress(packed, 2) == data
    assert get_codec(3).decompress(packed, 1) == data


@given(chunk=st.binary(min_size=1, max_size=100), size=st.integers(70_000, 200_000))
def test_lz4_linked_blocks_are_refused_like_kafka(chunk: bytes, size: int) -> None:
    # LZ4F marks a frame of a single block independent whatever is asked, so span several blocks
    data = (chunk * (size // len(chunk) + 1))[:size]
    packed = lz4.frame.compress(data, block_linked=True)
    assert not packed[4] & 0x20
    with pytest.raises(CodecError, match="dependent blocks"):
        get_codec(3).decompress(packed, 2)


@given(data=DATA)
def test_xerial_snappy_interop(data: bytes) -> None:
    ours = get_codec(2).compress(data, 2)
    assert ours[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    if data:  # kafka-python reads a header-only stream (empty input) as raw snappy and fails; snappy-java does not
        assert kp_codec.snappy_decode(ours) == data
    else:
        assert len(ours) == 16  # the header is written even for empty input (spec §3.2)
    theirs = kp_codec.snappy_encode(data, xerial_compatible=True)
    assert get_codec(2).decompress(theirs, 2) == data
    # snappy-java also reads raw (unframed) snappy and concatenated xerial streams
    assert get_codec(2).decompress(snappy.compress(data), 2) == data
    assert get_codec(2).decompress(theirs + ours, 2) == data + data


@given(data=DATA, mtime=st.integers(0, 2**32 - 1), level=st.integers(0, 9))
def test_gzip_interop(data: bytes, mtime: int, level: int) -> None:
    ours = get_codec(1).compress(data, 2)
    assert ours[:10] == bytes.fromhex("1f8b08000000000000ff")  # the JDK's header
    assert std_gzip.decompress(ours) == data
    theirs = std_gzip.compress(data, compresslevel=level, mtime=mtime)
    assert get_codec(1).decompress(theirs, 2) == data
    assert get_codec(1).decompress(theirs + ours, 2) == data + data  # concatenated members


@given(data=DATA, write_size=st.booleans(), level=st.integers(1, 19))
def test_zstd_interop(data: bytes, write_size: bool, level: int) -> None:
    ours = get_codec(4).compress(data, 2)
    assert zstandard.ZstdDecompressor().decompress(ours, max_output_size=len(data) + 1) == data
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=write_size)
    streamed = cctx.compressobj()
    theirs = streamed.compress(data) + streamed.flush()
    assert get_codec(4).decompress(theirs, 2) == data
    assert get_codec(4).decompress(theirs + ours, 2) == data + data  # several frames


# --------------------------------------------------------------------------- random record sets


HEADER_KEYS = st.text(max_size=8)
VALUES = st.one_of(st.none(), st.binary(max_size=40), st.just(b""))
HEADERS = st.lists(st.tuples(st.sampled_from(["", "a", "a", "trace", "\u2603"]) | HEADER_KEYS, VALUES), max_size=4)


@st.composite
def record_sets(draw):
    """A segment's worth of batches: (magic, codec, batch fields, [(offset, ts, key, value, headers)])."""
    magic = draw(st.sampled_from([0, 1, 2]))
    codecs = [0, 1, 2, 3, 4] if magic == 2 else [0, 1, 2, 3]
    if magic == 0 and not HAVE_XXHASH:
        codecs.remove(3)  # kafka-python writes v0 LZ4 only with xxhash
    offset = draw(st.integers(0, 2**40))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        codec = draw(st.sampled_from(codecs))
        n = draw(st.integers(1, 8))
        records = []
        ts0 = draw(st.integers(-1, 2**45))
        for i in range(n):
            if i:
                offset += 1 + draw(st.integers(0, 3)) * draw(st.booleans())  # gaps as left by compaction
            ts = ts0 + draw(st.integers(-(2**20), 2**20)) if i else ts0
            headers = draw(HEADERS) if magic == 2 else []
            records.append((offset, ts, draw(VALUES), draw(VALUES), headers))
        fields = {"transactional": False, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "log_append_time": None}
        if magic == 2 and draw(st.booleans()):
            fields.update(
                transactional=draw(st.booleans()),
                producer_id=draw(st.integers(0, 2**63 - 1)),
                producer_epoch=draw(st.integers(0, 2**15 - 1)),
                base_sequence=draw(st.integers(0, 2**31 - 1)),
            )
        if magic > 0 and draw(st.booleans()):
            fields["log_append_time"] = draw(st.integers(0, 2**45))
        batches.append((codec, fields, records))
        offset += 1 + draw(st.integers(0, 1000))
    return magic, batches


def write_with_kafka_python(magic: int, batches) -> bytes:
    """Each batch through kafka-python's builders; broker-side fields patched as the broker does."""
    out = []
    for codec, fields, records in batches:
        base = records[0][0]
        lat = fields["log_append_time"]
        if magic == 2:
            b = DefaultRecordBatchBuilder(
                2, codec, fields["transactional"], fields["producer_id"], fields["producer_epoch"],
                fields["base_sequence"], batch_size=1 << 30,
            )
            for offset, ts, key, value, headers in records:
                assert b.append(offset - base, ts, key, value, headers) is not None
            buf = bytearray(b.build())
            struct.pack_into(">q", buf, 0, base)
            if lat is not None:
                struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x08)
                struct.pack_into(">q", buf, 35, lat)
                struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
            out.append(bytes(buf))
            continue
        b = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 30)
        for offset, ts, key, value, _h in records:
            assert b.append(offset - base if (codec and magic == 1) else offset, ts, key, value) is not None
        buf = bytearray(b.build())
        entries = [0]
        if codec:
            struct.pack_into(">q", buf, 0, records[-1][0])  # wrapper offset = last inner offset
        else:
            pos = 0
            entries = []
            while pos < len(buf):
                entries.append(pos)
                pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
        if magic == 1 and (lat is not None or codec):
            for pos in entries:
                if lat is not None:
                    buf[pos + 17] |= 0x08
                    struct.pack_into(">q", buf, pos + 18, lat)
                else:
                    struct.pack_into(">q", buf, pos + 18, max(r[1] for r in records))
                size = struct.unpack_from(">i", buf, pos + 8)[0]
                struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : pos + 12 + size])))
        out.append(bytes(buf))
    return b"".join(out)


@given(record_sets())
def test_random_record_sets_written_by_kafka_python(record_set) -> None:
    magic, batches = record_set
    data = write_with_kafka_python(magic, batches)
    want = []
    for _codec, fields, records in batches:
        for offset, ts, key, value, headers in records:
            if magic == 0:
                ts = -1
            elif fields["log_append_time"] is not None:
                ts = fields["log_append_time"]
            want.append((offset, ts, key, value, [(k, v) for k, v in headers]))
    got = []
    ks = list(read_batches(data))
    for b in ks:
        b.ensure_valid()
        for r in b.records():
            got.append((r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]))
    assert got == want
    if magic == 2:
        assert len(ks) == len(batches)
        for b, (codec, fields, records) in zip(ks, batches):
            assert b.is_transactional == fields["transactional"]
            assert (b.producer_id, b.producer_epoch, b.base_sequence) == (
                fields["producer_id"], fields["producer_epoch"], fields["base_sequence"],
            )
            assert b.last_offset == records[-1][0] and b.count == len(records)
            assert b.compression in (0, codec)  # the builder keeps data uncompressed when that is smaller
            seqs = [r.sequence for r in b.records()]
            if fields["base_sequence"] < 0:
                assert set(seqs) == {-1}
            else:
                assert seqs == [increment_sequence(fields["base_sequence"], r[0] - records[0][0]) for r in records]
    elif any(codec for codec, _f, _r in batches):
        assert [b.last_offset for b in ks if b.compression] == [r[-1][0] for c, _f, r in batches if c]


@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_kstore_errors(data: bytes) -> None:
    """The shortest fuzz there is: random bytes (with a plausible prefix now and then) through every reader path."""
    try:
        for b in read_batches(data):
            b.is_valid
            try:
                b.ensure_valid()
            except KstoreError:
                pass
            for r in b.records():
                r.key, r.value, r.headers
    except KstoreError:
        pass


@pytest.mark.parametrize("size", [65536, 4 * 1024 * 1024])
def test_lz4_maximally_compressed_blocks_still_decompress(size: int) -> None:
    """The decompression buffer is capped at 255x the block (LZ4's ceiling): all-zero blocks reach it."""
    packed = lz4.frame.compress(b"\x00" * size, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False)
    assert get_codec(3).decompress(packed, 2) == b"\x00" * size
