"""Interoperability with independent implementations of Kafka's record formats.

Direction 1: segments written by kafka-python (``kafka.record``) and aiokafka
(``aiokafka.record``, both its Cython extension and its pure-Python twin) are
built here, in the tests, and must decode through kstore to exactly what the
library itself reads back -- and to what was put in.

Direction 2: the Kafka-written corpus (``fixtures/kafka-corpus/logs``) must
read through the libraries' own readers to the records kstore reads.

Neither library writes control batches, LogAppendTime or real base offsets /
leader epochs (those are the broker's job), so the tests patch those fields
after building, recomputing the CRC where Kafka's format covers the field,
and build transaction markers by hand following spec §2.6 (the hand builder
is checked against the spec's test vector §2.10 #3).

"kstore writes, they read" waits for kstore's writer.
"""

from __future__ import annotations

import importlib.util
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
from crc32c import crc32c

from kafka.record import MemoryRecords as KafkaPythonMemoryRecords
from kafka.record import MemoryRecordsBuilder as KafkaPythonMemoryRecordsBuilder
from kafka.record import default_records as kp_default
from kafka.record import legacy_records as kp_legacy

from aiokafka.record import default_records as aio_default
from aiokafka.record import legacy_records as aio_legacy
from aiokafka.record import memory_records as aio_memory

from kstore_cli.record.reader import read_batches
from kstore_cli.record.batch import increment_sequence
from tests.conftest import CORPUS

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODEC_IDS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
TS = 1_700_000_000_000
MAX_INT32 = 0x7FFFFFFF
HAVE_XXHASH = importlib.util.find_spec("xxhash") is not None
XXHASH_REASON = "kafka-python needs the optional 'xxhash' package for magic v0 LZ4 (Kafka's broken frame checksum)"


# --------------------------------------------------------------------------- the libraries


@dataclass(frozen=True)
class Impl:
    """One independent implementation: how it builds and how it reads."""

    name: str
    default_builder: type
    legacy_builder: type
    default_batch: type
    legacy_batch: type
    #: The library's own MemoryRecords (framing + dispatch), or None when the
    #: implementation has no MemoryRecords of its own that uses its batch classes.
    memory_records: Optional[type]
    #: aiokafka's Cython MemoryRecords reads the magic of the first entry only and
    #: parses every later entry as that magic, so a buffer must hold one magic.
    one_magic_per_buffer: bool = False
    can_v0_lz4: bool = True
    v0_lz4_reason: str = ""


def _aiokafka_cython_available() -> bool:
    return aio_default.DefaultRecordBatchBuilder is not aio_default._DefaultRecordBatchBuilderPy


IMPLS = [
    Impl(
        "kafka-python",
        kp_default.DefaultRecordBatchBuilder,
        kp_legacy.LegacyRecordBatchBuilder,
        kp_default.DefaultRecordBatch,
        kp_legacy.LegacyRecordBatch,
        KafkaPythonMemoryRecords,
        can_v0_lz4=HAVE_XXHASH,
        v0_lz4_reason=XXHASH_REASON,
    ),
    Impl(
        "aiokafka-python",
        aio_default._DefaultRecordBatchBuilderPy,
        aio_legacy._LegacyRecordBatchBuilderPy,
        aio_default._DefaultRecordBatchPy,
        aio_legacy._LegacyRecordBatchPy,
        None,  # _MemoryRecordsPy dispatches to the Cython batch classes when they exist
        can_v0_lz4=False,
        v0_lz4_reason="aiokafka does not support LZ4 for magic v0 (UnsupportedCodecError)",
    ),
]
if _aiokafka_cython_available():
    IMPLS.append(
        Impl(
            "aiokafka-cython",
            aio_default.DefaultRecordBatchBuilder,
            aio_legacy.LegacyRecordBatchBuilder,
            aio_default.DefaultRecordBatch,
            aio_legacy.LegacyRecordBatch,
            aio_memory.MemoryRecords,
            one_magic_per_buffer=True,
            can_v0_lz4=False,
            v0_lz4_reason="aiokafka does not support LZ4 for magic v0 (UnsupportedCodecError)",
        )
    )
IMPL_IDS = [i.name for i in IMPLS]


def test_both_aiokafka_implementations_are_exercised() -> None:
    """The pure-Python twin always; the Cython one whenever the wheel ships it (it does on CPython x86-64)."""
    names = {i.name for i in IMPLS}
    assert {"kafka-python", "aiokafka-python"} <= names
    if importlib.util.find_spec("aiokafka.record._crecords.default_records") is not None:
        assert "aiokafka-cython" in names


# --------------------------------------------------------------------------- building


@dataclass
class Rec:
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]] = field(default_factory=list)


@dataclass
class BatchSpec:
    magic: int
    codec: int
    records: List[Rec]
    transactional: bool = False
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    log_append_time: Optional[int] = None
    leader_epoch: int = 0

    @property
    def base_offset(self) -> int:
        return self.records[0].offset


V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # DefaultRecordBatch header, 61 bytes
V2_CRC_START = 21
LEGACY_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


def _patch_v2(buf: bytearray, spec: BatchSpec) -> bytearray:
    """What the broker does on append: base offset, leader epoch, LogAppendTime (CRC recomputed)."""
    struct.pack_into(">q", buf, 0, spec.base_offset)  # not covered by the CRC
    struct.pack_into(">i", buf, 12, spec.leader_epoch)  # not covered by the CRC
    if spec.log_append_time is not None:
        (attributes,) = struct.unpack_from(">h", buf, 21)
        struct.pack_into(">h", buf, 21, attributes | 0x08)
        struct.pack_into(">q", buf, 35, spec.log_append_time)
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[V2_CRC_START:])))
    return buf


def _legacy_recrc(buf: bytearray, pos: int) -> None:
    _offset, size = struct.unpack_from(">qi", buf, pos)
    struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : pos + 12 + size])))


def _patch_legacy(buf: bytearray, spec: BatchSpec) -> bytearray:
    """Broker-side fields of legacy entries: wrapper offset and timestamp, LogAppendTime."""
    lat = spec.log_append_time
    if spec.codec == NONE:
        if lat is not None:
            pos = 0
            while pos < len(buf):
                _o, size, _crc, _magic, attributes = LEGACY_HEADER.unpack_from(buf, pos)
                struct.pack_into(">b", buf, pos + 17, attributes | 0x08)
                struct.pack_into(">q", buf, pos + 18, lat)
                _legacy_recrc(buf, pos)
                pos += 12 + size
        return buf
    # One compressed wrapper: its offset is the absolute offset of the last inner message.
    struct.pack_into(">q", buf, 0, spec.records[-1].offset)
    if spec.magic == 1:
        if lat is not None:
            struct.pack_into(">b", buf, 17, buf[17] | 0x08)
            struct.pack_into(">q", buf, 18, lat)
        else:
            struct.pack_into(">q", buf, 18, max(r.timestamp for r in spec.records))
        _legacy_recrc(buf, 0)
    return buf


def build_batch(impl: Impl, spec: BatchSpec) -> bytes:
    """One batch (v2) or entry run (v0/v1) written by the library, broker fields patched in."""
    base = spec.base_offset
    if spec.magic == 2:
        builder = impl.default_builder(
            magic=2,
            compression_type=spec.codec,
            is_transactional=spec.transactional,
            producer_id=spec.producer_id,
            producer_epoch=spec.producer_epoch,
            base_sequence=spec.base_sequence,
            batch_size=1 << 30,
        )
        for r in spec.records:
            assert builder.append(r.offset - base, r.timestamp, r.key, r.value, list(r.headers)) is not None
        return bytes(_patch_v2(bytearray(builder.build()), spec))
    builder = impl.legacy_builder(magic=spec.magic, compression_type=spec.codec, batch_size=1 << 30)
    for r in spec.records:
        # Uncompressed and v0 wrappers carry absolute offsets, v1 wrappers relative ones.
        offset = r.offset - base if (spec.codec and spec.magic == 1) else r.offset
        assert builder.append(offset, r.timestamp, r.key, r.value) is not None
    return bytes(_patch_legacy(bytearray(builder.build()), spec))


def control_batch(
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int,
    leader_epoch: int = 0,
) -> bytes:
    """A transaction marker batch exactly as MemoryRecords.withEndTransactionMarker writes it (§2.6)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = b"\x00" + b"\x00" + b"\x00" + bytes([len(key) << 1]) + key + bytes([len(value) << 1]) + value + b"\x00"
    record = bytes([len(body) << 1]) + body
    attributes = 0x10 | 0x20  # transactional | control, codec none, CreateTime
    after_crc = struct.pack(">hiqqqhii", attributes, 0, timestamp, timestamp, producer_id, producer_epoch, -1, 1) + record
    return (
        struct.pack(">qiib", base_offset, 4 + 1 + 4 + len(after_crc), leader_epoch, 2)
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )


def test_hand_built_marker_matches_spec_vector() -> None:
    """Spec §2.10 #3: the COMMIT marker the hand builder writes is byte for byte Kafka's."""
    want = bytes.fromhex(
        "000000000000000a 00000042 00000007 02 7a94e469 0030 00000000 0000018bcfe56800 0000018bcfe56800"
        " 0000000000018013 0063 ffffffff 00000001 20 00 00 00 08 00000001 0c 0000 00000064 00".replace(" ", "")
    )
    assert control_batch(10, 98323, 99, True, 100, TS, leader_epoch=7) == want


def segment(impl: Impl, specs: List[BatchSpec], extra: Optional[List[Tuple[int, bytes]]] = None) -> bytes:
    """Built batches concatenated in offset order; `extra` inserts hand-built (offset, bytes) entries."""
    parts = [(s.base_offset, build_batch(impl, s)) for s in specs] + list(extra or [])
    parts.sort(key=lambda p: p[0])
    return b"".join(p[1] for p in parts)


# --------------------------------------------------------------------------- reading both ways


def _norm_headers(headers) -> List[Tuple[str, Optional[bytes]]]:
    return [(k, None if v is None else bytes(v)) for k, v in headers]


def _frame(data: bytes) -> List[Tuple[int, int, int]]:
    """(start, end, magic) of every complete entry -- used only where a library has no framing of its own."""
    out = []
    pos = 0
    while len(data) - pos >= 17:
        (size,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + size
        if size < 14 or end > len(data):
            break
        out.append((pos, end, data[pos + 16]))
        pos = end
    return out


def lib_batches(impl: Impl, data: bytes) -> list:
    """The library's batch objects for a buffer, via its own MemoryRecords where it has one."""
    if impl.memory_records is None:
        return [
            (impl.default_batch(data[s:e]) if magic >= 2 else impl.legacy_batch(data[s:e], magic))
            for s, e, magic in _frame(data)
        ]
    batches = []
    mr = impl.memory_records(data)
    while mr.has_next():
        batches.append(mr.next_batch())
    return batches


def lib_view(impl: Impl, data: bytes) -> List[dict]:
    """Everything the library exposes about each batch and its records, as plain values."""
    out = []
    for b in lib_batches(impl, data):
        fields = {"validCrc": b.validate_crc()}
        for attr in (
            "next_offset",
            "base_offset", "magic", "crc", "attributes", "compression_type", "timestamp_type",
            "is_transactional", "is_control_batch", "last_offset_delta", "first_timestamp",
            "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count",
            "leader_epoch", "size_in_bytes", "last_sequence",
        ):
            try:
                value = getattr(b, attr)
            except AttributeError:
                continue
            fields[attr] = value() if callable(value) else value
        records = []
        for r in b:
            rec = {
                "offset": r.offset,
                "timestamp": -1 if r.timestamp is None else r.timestamp,
                "timestampType": -1 if r.timestamp_type is None else r.timestamp_type,
                "key": r.key,
                "value": r.value,
                "headers": _norm_headers(r.headers),
            }
            if r.checksum is not None:
                rec["checksum"] = r.checksum
            if hasattr(r, "type") and hasattr(r, "version"):  # kafka-python's ControlRecord
                rec["control"] = (r.version, r.type)
            records.append(rec)
        out.append({"batch": fields, "records": records})
    return out


def assert_kstore_matches(impl: Impl, data: bytes, tmp_path: Path, batches=None) -> list:
    """kstore (reading a real .log file) returns what the library reads; returns kstore's batches."""
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(data)
    ks = list(read_batches(log)) if batches is None else batches
    lib = lib_view(impl, data)
    assert len(ks) == len(lib)
    for kb, lb in zip(ks, lib):
        f = lb["batch"]
        kb.ensure_valid()
        assert kb.is_valid is True
        assert f["validCrc"] is True
        if "magic" in f:
            assert kb.magic == f["magic"]
        if "base_offset" in f:
            # kafka-python's legacy base_offset is the entry's own offset field (the last inner offset)
            assert (kb.base_offset if kb.magic >= 2 else kb.last_offset) == f["base_offset"]
        pairs = {
            "crc": kb.crc,
            "compression_type": kb.compression,
            "is_transactional": kb.is_transactional,
            "is_control_batch": kb.is_control,
            "producer_id": kb.producer_id if kb.magic >= 2 else None,
            "producer_epoch": kb.producer_epoch,
            "base_sequence": kb.base_sequence,
            "size_in_bytes": kb.size,
            "next_offset": kb.next_offset,
        }
        if kb.magic >= 2:
            pairs.update(
                attributes=kb.attributes,
                last_offset_delta=kb.last_offset_delta,
                first_timestamp=kb.base_timestamp,
                max_timestamp=kb.max_timestamp,
                records_count=kb.count,
                leader_epoch=kb.partition_leader_epoch,
                last_sequence=kb.last_sequence,
                timestamp_type=kb.timestamp_type,
            )
        else:
            pairs.update(timestamp_type=None if kb.magic == 0 else kb.timestamp_type)
        for name, got in pairs.items():
            if name in f and not (name == "producer_id" and kb.magic < 2):
                assert got == f[name], (name, kb)
        records = kb.records()
        assert len(records) == len(lb["records"]), kb
        for kr, lr in zip(records, lb["records"]):
            got = {
                "offset": kr.offset,
                "timestamp": kr.timestamp,
                "timestampType": kb.timestamp_type,
                "key": kr.key,
                "value": kr.value,
                "headers": [(h.key, h.value) for h in kr.headers],
            }
            if "checksum" in lr:
                got["checksum"] = kr.crc
            if "control" in lr:
                got["control"] = (kr.control.version, kr.control.type_id)
            assert got == lr, (kb, kr)
            if kb.magic >= 2:
                delta = kr.offset - kb.base_offset
                want_seq = -1 if kb.base_sequence < 0 else increment_sequence(kb.base_sequence, delta)
                assert kr.sequence == want_seq
    return ks


def assert_records_are(batches, specs: List[BatchSpec]) -> None:
    """kstore's records are the ones that were written (offsets, timestamps after LogAppendTime, data)."""
    want = []
    for s in specs:
        for r in s.records:
            ts = r.timestamp
            if s.magic == 0:
                ts = -1
            elif s.log_append_time is not None:
                ts = s.log_append_time
            want.append((r.offset, ts, r.key, r.value, [(k, v) for k, v in r.headers]))
    got = [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for b in batches
        if not b.is_control
        for r in b.records()
    ]
    assert got == want


# --------------------------------------------------------------------------- record sets

PAYLOAD = b"kafka on disk, read with no broker " * 8  # compressible, so codecs really compress


def v2_records(base: int, n: int = 7, *, gap: int = 0) -> List[Rec]:
    """Keys and values of every shape, headers with empty keys, null values and duplicate keys."""
    shapes = [
        (b"key-0", PAYLOAD, [("trace", b"abc"), ("trace", b"def"), ("", b""), ("nul", None)]),
        (None, PAYLOAD + b"1", []),
        (b"", b"", [("\u00fcnicode-\u2603", b"\x00\xff")]),
        (b"k3", None, [("a", None), ("a", None)]),
        (None, None, []),
        (b"k5" * 40, PAYLOAD * 3, [("h" * 300, b"v" * 300)]),
        (b"\x00\x01\x02", b"\xff" * 17, [("x", b"")]),
    ]
    out = []
    offset = base
    for i in range(n):
        key, value, headers = shapes[i % len(shapes)]
        # timestamps go backwards too: deltas may be negative
        out.append(Rec(offset, TS + (i * 37) % 11 - 5 + i, key, value, list(headers)))
        offset += 1 + (gap if i % 2 else 0)
    return out


def legacy_records(base: int, n: int = 6, *, gap: int = 0) -> List[Rec]:
    shapes = [(b"key-0", PAYLOAD), (None, PAYLOAD + b"1"), (b"", b""), (b"k3", None), (None, None), (b"k5", PAYLOAD * 2)]
    out = []
    offset = base
    for i in range(n):
        key, value = shapes[i % len(shapes)]
        out.append(Rec(offset, TS + i * 3 - 2, key, value))
        offset += 1 + (gap if i % 2 else 0)
    return out


def _skip_v0_lz4(impl: Impl, magic: int, codec: int) -> None:
    if magic == 0 and codec == LZ4 and not impl.can_v0_lz4:
        pytest.skip(impl.v0_lz4_reason)


# --------------------------------------------------------------------------- direction 1: they write, kstore reads


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_v2_written_by_library(impl: Impl, codec: str, tmp_path: Path) -> None:
    c = CODEC_IDS[codec]
    specs = [
        BatchSpec(2, c, v2_records(0)),
        BatchSpec(2, c, v2_records(7, gap=3), leader_epoch=3),  # offset gaps inside the batch
        BatchSpec(2, c, v2_records(1000, n=1), leader_epoch=4),  # a gap between batches
        BatchSpec(2, c, v2_records(1001, n=20), leader_epoch=4),
    ]
    data = segment(impl, specs)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)
    # the library really compressed (PAYLOAD compresses), so each codec is actually exercised
    assert {b.compression for b in batches} == {c}
    assert [b.partition_leader_epoch for b in batches] == [0, 3, 4, 4]


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_written_by_library(impl: Impl, magic: int, codec: str, tmp_path: Path) -> None:
    c = CODEC_IDS[codec]
    _skip_v0_lz4(impl, magic, c)
    specs = [
        BatchSpec(magic, c, legacy_records(0)),
        BatchSpec(magic, c, legacy_records(6, gap=2)),
        BatchSpec(magic, c, legacy_records(500, n=1)),
        BatchSpec(magic, c, legacy_records(501, n=9, gap=1)),
    ]
    data = segment(impl, specs)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)
    assert {b.magic for b in batches} == {magic}
    assert {b.compression for b in batches} == {c}
    if c:
        assert len(batches) == len(specs)  # one wrapper per compressed set
        assert [b.last_offset for b in batches] == [s.records[-1].offset for s in specs]


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_v2_log_append_time(impl: Impl, codec: str, tmp_path: Path) -> None:
    c = CODEC_IDS[codec]
    specs = [
        BatchSpec(2, c, v2_records(0), log_append_time=TS + 99_999),
        BatchSpec(2, c, v2_records(7, n=3), log_append_time=TS - 5),
    ]
    data = segment(impl, specs)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)
    assert [b.timestamp_type_name for b in batches] == ["LogAppendTime"] * 2
    assert [b.max_timestamp for b in batches] == [TS + 99_999, TS - 5]


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_v1_log_append_time(impl: Impl, codec: str, tmp_path: Path) -> None:
    c = CODEC_IDS[codec]
    specs = [BatchSpec(1, c, legacy_records(10), log_append_time=TS + 12345)]
    data = segment(impl, specs)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)
    assert {b.timestamp_type_name for b in batches} == {"LogAppendTime"}


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_idempotent_producer_fields(impl: Impl, codec: str, tmp_path: Path) -> None:
    c = CODEC_IDS[codec]
    specs = [
        BatchSpec(2, c, v2_records(0, n=5), producer_id=4000, producer_epoch=2, base_sequence=0),
        BatchSpec(2, c, v2_records(5, n=5), producer_id=4000, producer_epoch=2, base_sequence=5),
        # the sequence wraps from Integer.MAX_VALUE to 0 inside this batch (§2.9)
        BatchSpec(2, c, v2_records(10, n=6), producer_id=(1 << 62) + 7, producer_epoch=32767, base_sequence=MAX_INT32 - 2),
    ]
    data = segment(impl, specs)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)
    assert [b.last_sequence for b in batches] == [4, 9, 2]
    assert [r.sequence for r in batches[2].records()] == [MAX_INT32 - 2, MAX_INT32 - 1, MAX_INT32, 0, 1, 2]
    assert batches[2].producer_id == (1 << 62) + 7 and batches[2].producer_epoch == 32767


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("codec", ["none", "snappy", "lz4", "zstd"])
def test_transactions_with_markers(impl: Impl, codec: str, tmp_path: Path) -> None:
    c = CODEC_IDS[codec]
    pid_a, pid_b = 98323, 12
    specs = [
        BatchSpec(2, c, v2_records(0, n=4), transactional=True, producer_id=pid_a, producer_epoch=99, base_sequence=0),
        BatchSpec(2, c, v2_records(4, n=3), transactional=True, producer_id=pid_b, producer_epoch=0, base_sequence=0),
        BatchSpec(2, c, v2_records(8, n=4), transactional=True, producer_id=pid_a, producer_epoch=99, base_sequence=4),
        BatchSpec(2, c, v2_records(14, n=2)),  # non-transactional data in between
    ]
    markers = [
        (7, control_batch(7, pid_b, 0, commit=False, coordinator_epoch=3, timestamp=TS + 10)),
        (12, control_batch(12, pid_a, 99, commit=True, coordinator_epoch=100, timestamp=TS + 20, leader_epoch=5)),
    ]
    data = segment(impl, specs, markers)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)
    control = [b for b in batches if b.is_control]
    assert [(b.base_offset, b.producer_id, b.producer_epoch, b.is_transactional) for b in control] == [
        (7, pid_b, 0, True),
        (12, pid_a, 99, True),
    ]
    markers_read = [b.records()[0].control for b in control]
    assert [(m.type_name, m.coordinator_epoch, m.version) for m in markers_read] == [("ABORT", 3, 0), ("COMMIT", 100, 0)]
    assert [b.is_transactional for b in batches if not b.is_control] == [True, True, True, False]


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_mixed_magics_in_one_segment(impl: Impl, tmp_path: Path) -> None:
    """A topic upgraded from v0 to v1 to v2 keeps old entries in front of new ones."""
    specs = [
        BatchSpec(0, NONE, legacy_records(0, n=3)),
        BatchSpec(0, GZIP, legacy_records(3, n=3)),
        BatchSpec(1, SNAPPY, legacy_records(6, n=4)),
        BatchSpec(1, NONE, legacy_records(10, n=2)),
        BatchSpec(2, LZ4, v2_records(12)),
        BatchSpec(2, NONE, v2_records(19, n=2)),
    ]
    data = segment(impl, specs)
    if impl.one_magic_per_buffer:
        # aiokafka's Cython MemoryRecords parses every entry with the first entry's magic
        # (a v2 batch after v1 entries fails with SystemError), so hand it one magic at a time.
        ks = list(read_batches(data))
        for magic in (0, 1, 2):
            part = [b for b in ks if b.magic == magic]
            assert_kstore_matches(impl, b"".join(bytes(b.buffer) for b in part), tmp_path)
    else:
        ks = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(ks, specs)
    assert [b.magic for b in ks] == [0, 0, 0, 0, 1, 1, 1, 2, 2]


@pytest.mark.parametrize(
    "magic,codec",
    [(m, c) for m in (0, 1, 2) for c in ("none", "gzip", "snappy", "lz4", "zstd") if m == 2 or c != "zstd"],
)
def test_kafka_python_memory_records_builder(magic: int, codec: str, tmp_path: Path) -> None:
    """kafka-python's high-level builder, with skip() for compaction-style offset gaps (zstd is v2 only)."""
    c = CODEC_IDS[codec]
    if magic == 0 and c == LZ4 and not HAVE_XXHASH:
        pytest.skip(XXHASH_REASON)
    parts = []
    want = []
    offset = 100
    for n_batch in range(3):
        kwargs = {}
        if magic == 2 and n_batch == 1:
            kwargs = dict(transactional=True, producer_id=77, producer_epoch=1, base_sequence=n_batch * 10)
        builder = KafkaPythonMemoryRecordsBuilder(magic, c, batch_size=1 << 20, offset=offset, **kwargs)
        for i in range(5):
            if i == 3:
                builder.skip(4)
            key = None if i == 1 else b"key-%d" % i
            value = None if i == 2 else PAYLOAD[: 10 * i]
            headers = [("h", b"%d" % i), ("h", None)] if magic == 2 else None
            meta = builder.append(TS + i, key, value, headers)
            assert meta is not None
            want.append((meta.offset, -1 if magic == 0 else TS + i, key, value, headers or []))
        offset = builder.next_offset()
        builder.close()
        buf = bytearray(builder.buffer())
        # kafka-python's v2 builder writes the offsets it is given as deltas from base offset 0
        if magic < 2 and c:
            struct.pack_into(">q", buf, 0, want[-1][0])  # the wrapper's offset: the last inner one
        parts.append(bytes(buf))
    data = b"".join(parts)
    batches = assert_kstore_matches(IMPLS[0], data, tmp_path)
    got = [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for b in batches for r in b.records()]
    assert got == want


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_producer_batch_builder(codec: str, tmp_path: Path) -> None:
    """aiokafka's producer-side BatchBuilder (what AIOKafkaProducer sends), producer state set."""
    from aiokafka.producer.message_accumulator import BatchBuilder

    c = CODEC_IDS[codec]
    bb = BatchBuilder(1 << 20, c, is_transactional=True)
    bb._set_producer_state(producer_id=5555, producer_epoch=3, base_sequence=41)
    want = []
    for i in range(6):
        key = None if i % 3 == 0 else b"k%d" % i
        value = None if i == 4 else PAYLOAD[: 7 * i]
        headers = [("dup", b"1"), ("dup", b"2")] if i % 2 else []
        assert bb.append(timestamp=TS + 10 * i, key=key, value=value, headers=headers) is not None
        want.append((200 + i, TS + 10 * i, key, value, headers))
    buf = bytearray(bb._build())
    struct.pack_into(">q", buf, 0, 200)
    impl = next(i for i in IMPLS if i.name == ("aiokafka-cython" if _aiokafka_cython_available() else "aiokafka-python"))
    batches = assert_kstore_matches(impl, bytes(buf), tmp_path)
    (batch,) = batches
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (5555, 3, 41, True)
    got = [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in batch.records()]
    assert got == want


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_empty_and_single_record_edge_cases(impl: Impl, tmp_path: Path) -> None:
    """One-record batches, a record of nothing but nulls, a 100 KiB value spanning several LZ4/snappy blocks."""
    big = bytes(range(256)) * 400
    specs = [
        BatchSpec(2, NONE, [Rec(0, 0, None, None)]),
        BatchSpec(2, LZ4, [Rec(1, -1, b"", big, [("k", big[:1000])])]),
        BatchSpec(2, SNAPPY, [Rec(2, TS, b"x", big + big)]),
        BatchSpec(2, ZSTD, [Rec(3, 2**62, None, big)]),
        BatchSpec(2, GZIP, [Rec(MAX_INT32 + 10, TS, b"far offset", b"v")]),
    ]
    data = segment(impl, specs)
    batches = assert_kstore_matches(impl, data, tmp_path)
    assert_records_are(batches, specs)


# --------------------------------------------------------------------------- direction 2: Kafka writes, they read

CORPUS_LOGS = sorted(str(p.relative_to(CORPUS)) for p in (CORPUS / "logs").glob("*/*.log"))


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("name", CORPUS_LOGS)
def test_corpus_reads_the_same_through_library(impl: Impl, name: str, tmp_path: Path) -> None:
    path = CORPUS / name
    data = path.read_bytes()
    batches = list(read_batches(path))
    assert sum(b.size for b in batches) == len(data)  # the corpus logs have no partial tails
    # Group consecutive batches into runs the library can read: v0 LZ4 entries are left out when the
    # library cannot read them, and aiokafka's Cython reader gets one magic per buffer.
    runs: List[list] = []
    skipped = 0
    for b in batches:
        if b.magic == 0 and b.compression == LZ4 and not impl.can_v0_lz4:
            skipped += 1
            runs.append([])
            continue
        if not runs or (impl.one_magic_per_buffer and runs[-1] and runs[-1][-1].magic != b.magic):
            runs.append([])
        runs[-1].append(b)
    runs = [r for r in runs if r]
    if not runs:
        pytest.skip(impl.v0_lz4_reason)
    for run in runs:
        start, end = run[0].position, run[-1].position + run[-1].size
        assert_kstore_matches(impl, data[start:end], tmp_path, batches=run)
    if skipped:
        assert any(b.magic == 0 and b.compression == LZ4 for b in batches)
