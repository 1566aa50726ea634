"""The two record-decoder twins agree: same values, or the same error class and message.

The native twin (``kstore_cli.record._decode_c``) is compared with the pure-Python one on
random valid batches and on damaged inputs (truncations, bit flips, over-long varints, sizes
2^31-1 and -1). The comparisons skip only when the extension is not built; on CI it must be.
"""

from __future__ import annotations

import importlib
import os
import struct
import subprocess
import sys
from typing import Any, Callable, Optional, Tuple

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kstore_cli.errors import KstoreError
from kstore_cli.record import _decode_py as py
from kstore_cli.record import decode
from kstore_cli.record.decode import Underflow
from kstore_cli.record.builder import (
    RecordSpec,
    build_legacy_entry,
    build_v2_batch,
    encode_v2_record,
    write_varint,
)
from kstore_cli.record.reader import read_batches

from tests.conftest import ROOT

try:
    from kstore_cli.record import _decode_c as native
except ImportError:  # pragma: no cover - only when the extension is not built
    native = None

pytestmark = pytest.mark.twins

needs_native = pytest.mark.skipif(native is None, reason="the native decoder is not built")


@pytest.mark.decoder_env
@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI promises a C compiler")
def test_ci_builds_the_native_decoder() -> None:
    assert native is not None, "CI must build kstore_cli.record._decode_c (pip install -e . with gcc)"


_MALLOC_PROBE = """
import ctypes, sys
from kstore_cli.record import decode
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
held = bytes(4 << 20)   # above glibc's default mmap threshold (128 KiB)
mapped = libc.mallinfo2().hblkhd >= 4 << 20
del held
print(decode.BACKEND, int(mapped), libc.mallinfo2().arena >= 4 << 20)
"""


@needs_native
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None
                    or "libasan" in os.environ.get("LD_PRELOAD", ""), reason="glibc's own malloc only")
def test_native_decoder_keeps_freed_buffers_for_reuse() -> None:
    # glibc's defaults give a 4 MiB buffer pages of its own and return them when it is freed; with the
    # native decoder loaded it comes from the heap and stays there for the next batch's buffers.
    env = dict(os.environ, KSTORE_DECODER="native")
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                 "GLIBC_TUNABLES"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["native", "0", "True"], out.stderr
    # A user's own malloc settings are left alone.
    env["MALLOC_TOP_PAD_"] = "0"
    out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["native", "1", "False"], out.stderr


def test_backend_follows_the_environment() -> None:
    code = "from kstore_cli.record import decode; print(decode.BACKEND)"
    env = dict(os.environ, KSTORE_DECODER="python")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "python"
    env["KSTORE_DECODER"] = "bogus"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "KSTORE_DECODER='bogus' is not a decoder" in out.stderr
    if native is not None:
        env["KSTORE_DECODER"] = "native"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
        assert out.stdout.strip() == "native"


@pytest.mark.decoder_env
def test_backend_is_reported() -> None:
    expected = "python" if os.environ.get("KSTORE_DECODER") == "python" or native is None else "native"
    assert decode.BACKEND == expected
    from kstore_cli.cli import _version_text

    assert f"(record decoder: {expected};" in _version_text()


def _outcome(fn: Callable, *args: Any) -> Tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except (KstoreError, Underflow) as exc:
        return type(exc).__name__, str(exc)


def same(name: str, *args: Any) -> Tuple[str, Any]:
    """Both twins' outcome of `name(*args)`; asserts they are equal."""
    ours = _outcome(getattr(py, name), *args)
    theirs = _outcome(getattr(native, name), *args)
    assert theirs == ours, f"{name}{args[1:]}: native {theirs!r} != python {ours!r}"
    return ours


# ------------------------------------------------------------------------------ strategies

BYTES = st.one_of(st.none(), st.binary(max_size=40))
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3)
RECORDS = st.lists(st.tuples(BYTES, BYTES, HEADERS, st.integers(-(2**40), 2**40)), min_size=1, max_size=12)


def _v2_body(records) -> Tuple[bytes, int]:
    out = b"".join(
        encode_v2_record(i, ts, key, value, [(k, v) for k, v in headers])
        for i, (key, value, headers, ts) in enumerate(records)
    )
    return out, len(records)


def _damage(data: bytes, kind: int, where: int, value: int) -> bytes:
    if not data:
        return data
    where %= len(data)
    b = bytearray(data)
    if kind == 0:  # truncation
        return bytes(b[:where])
    if kind == 1:  # bit flip
        b[where] ^= 1 << (value % 8)
        return bytes(b)
    if kind == 2:  # a byte set to a boundary value
        b[where] = (0x00, 0x7F, 0x80, 0xFF)[value % 4]
        return bytes(b)
    if kind == 3:  # an over-long varint planted
        return bytes(b[:where]) + b"\xff" * (5 + value % 7) + bytes(b[where:])
    if kind == 4:  # a varint replaced by 2^31-1 or -1
        v = bytearray()
        write_varint((2**31 - 1, -1, -(2**31), 2**30)[value % 4], v)
        return bytes(b[:where]) + bytes(v) + bytes(b[where + 1 :])
    return bytes(b[:where]) + bytes([value & 0xFF]) + bytes(b[where:])  # an inserted byte


DAMAGE = st.tuples(st.integers(0, 5), st.integers(0, 10_000), st.integers(0, 255))


# ------------------------------------------------------------------------------ record parsing


@needs_native
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.lists(DAMAGE, max_size=3), st.integers(-2, 2), st.binary(max_size=3))
def test_v2_records_agree(records, damages, count_skew, prefix) -> None:
    body, n = _v2_body(records)
    for kind, where, value in damages:
        body = _damage(body, kind, where, value)
    buf = prefix + body
    count = max(0, n + count_skew)
    kind, result = same("decode_v2_records", buf, len(prefix), len(buf), count)
    if not damages and count_skew == 0:
        assert kind == "ok" and len(result) == n
    same("decode_v2_records", memoryview(buf), len(prefix), len(buf), count)
    same("decode_v2_records", bytearray(buf), len(prefix), len(buf), 2**31 - 1)


@needs_native
@settings(max_examples=300)
@given(st.binary(max_size=64), st.integers(0, 3))
def test_v2_records_on_arbitrary_bytes_agree(buf, count) -> None:
    same("decode_v2_records", buf, 0, len(buf), count)


@needs_native
@settings(max_examples=300)
@given(st.binary(max_size=12), st.integers(0, 12))
def test_varints_agree(buf, pos) -> None:
    assume(pos <= len(buf))
    same("read_varint", buf, pos, len(buf))
    same("read_varlong", buf, pos, len(buf))


@needs_native
@given(st.integers(-(2**70), 2**70))
def test_size_of_varint_agrees(value) -> None:
    assert native.size_of_varint(value) == py.size_of_varint(value)


@needs_native
def test_varint_boundaries_agree() -> None:
    for raw in (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x7f", b"\xff\xff\xff\xff\x8f\x00", b"\x80" * 9 + b"\x01",
                b"\xff" * 10 + b"\x00", b"\xff" * 9 + b"\x01", b"", b"\x80"):
        same("read_varint", raw, 0, len(raw))
        same("read_varlong", raw, 0, len(raw))


@needs_native
@pytest.mark.parametrize("length", [2**31 - 1, -1, -(2**31), 0, 1])
def test_record_sizes_at_the_limits_agree(length) -> None:
    v = bytearray()
    write_varint(length, v)
    buf = bytes(v) + b"\x00" * 8
    same("decode_v2_records", buf, 0, len(buf), 1)


def _native_record_cls() -> type:
    """batch.Record when it is built on the native base, else (KSTORE_DECODER=python) a subclass of the
    native base made for the comparison."""
    from kstore_cli.record.batch import Header, Record

    if decode.RecordBase is not None:
        return Record
    cls = type("Record", (native.RecordBase,), {"__slots__": ()})
    native.register_classes(cls, Header)
    return cls


def _slots(record) -> tuple:
    from kstore_cli.record.batch import RECORD_FIELDS

    return tuple(getattr(record, name, "<unset>") for name in RECORD_FIELDS)


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.lists(DAMAGE, max_size=2), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
       st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), st.integers(-(2**31), 2**31 - 1))
def test_built_records_agree(records, damages, base_offset, base_ts, log_append, base_seq) -> None:
    """Record objects built natively hold exactly what the pure-Python Record.__init__ stores (extreme
    bases included), and so does the native base's own constructor."""
    from kstore_cli.record.batch import Header, _PyRecord

    Record = _native_record_cls()
    body, n = _v2_body(records)
    for kind, where, value in damages:
        body = _damage(body, kind, where, value)
    tail = (Header, "batch", memoryview(body), 0, len(body), n, base_offset, base_ts, log_append, base_seq)
    ours = _outcome(py.build_v2_records, _PyRecord, *tail)
    theirs = _outcome(native.build_v2_records, Record, *tail)
    via_init = _outcome(py.build_v2_records, Record, *tail)
    if ours[0] != "ok":
        assert theirs == ours
        return
    assert theirs[0] == "ok" and via_init[0] == "ok"
    assert [_slots(r) for r in theirs[1]] == [_slots(r) for r in ours[1]]
    assert [_slots(r) for r in via_init[1]] == [_slots(r) for r in ours[1]]


@needs_native
@given(st.lists(st.lists(st.tuples(st.sampled_from([b"trace-id", b"trace-ie", b"", b"\xff\xfe", b"\xed\xa0\x80", b"a"]),
                                   st.one_of(st.none(), st.binary(max_size=4))), max_size=3), min_size=1, max_size=8))
def test_repeated_header_keys_agree(headers) -> None:
    """Header keys that repeat, differ in one byte, or are not UTF-8 (the native build shares one str
    among equal keys of a batch): the same headers and header spans as the pure twin."""
    from kstore_cli.record.batch import Header, _PyRecord

    Record = _native_record_cls()
    body, n = _v2_body([(b"k", b"v", hs, i) for i, hs in enumerate(headers)])
    tail = (Header, "batch", body, 0, len(body), n, 0, 0, None, -1)
    ours = py.build_v2_records(_PyRecord, *tail)
    theirs = native.build_v2_records(Record, *tail)
    assert [_slots(r) for r in theirs] == [_slots(r) for r in ours]


@needs_native
def test_header_spans_of_a_changed_buffer_are_checked_again() -> None:
    """Native records read their header spans from the buffer when first asked: a buffer overwritten
    since the decode gives Kafka's structure error, never a read past its end."""
    from kstore_cli.errors import InvalidRecordError
    from kstore_cli.record.batch import Header

    Record = _native_record_cls()
    body, n = _v2_body([(b"k", b"v", [("h", b"x")], 0)])
    buf = bytearray(body)
    (record,) = native.build_v2_records(Record, Header, "batch", buf, 0, len(buf), n, 0, 0, None, -1)
    buf[-4] = 0x7E  # the header key length: 63 bytes, past the end
    with pytest.raises(InvalidRecordError, match="Found invalid record structure"):
        record._headers
    buf[-4] = 0x02
    assert record._headers == ((len(buf) - 3, 1, len(buf) - 1, 1),)
    assert record.headers == (Header("h", b"x"),)


def _batch_of(body: bytes, records) -> Any:
    """A RecordBatch framing `body` (records, perhaps damaged) as its record area."""
    from kstore_cli.record.builder import RecordSpec, build_v2_batch

    head = build_v2_batch([RecordSpec(i, ts, k, v, hs) for i, (k, v, hs, ts) in enumerate(records)])[:61]
    buf = bytearray(head + body)
    struct.pack_into(">i", buf, 8, len(buf) - 12)  # the batch length: the damaged body is framed whole
    (batch,) = read_batches(bytes(buf))
    return batch


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.lists(DAMAGE, max_size=2))
def test_iterating_a_batch_agrees_with_its_records(records, damages) -> None:
    """v2_batch_iter (iter(batch)) builds a plain batch's records one at a time, from the batch parsed whole
    first: the same records as v2_batch_records and as the pure twin, and a damaged batch fails when the
    iterator is made, before its first record, with the same error."""
    from kstore_cli.record.batch import Header, _PyRecord

    Record = _native_record_cls()
    body, _n = _v2_body(records)
    for kind, where, value in damages:
        body = _damage(body, kind, where, value)
    batch = _batch_of(body, records)
    ours = _outcome(lambda: [_slots(r) for r in py.v2_batch_iter(_PyRecord, Header, batch)])
    listed = _outcome(lambda: [_slots(r) for r in native.v2_batch_records(Record, Header, batch)])
    made = _outcome(native.v2_batch_iter, Record, Header, batch)
    if ours[0] != "ok":
        assert made == listed == ours
        return
    it = made[1]
    assert it.__length_hint__() == len(ours[1])
    theirs = [_slots(r) for r in it]
    assert theirs == listed[1] == ours[1]
    assert it.__length_hint__() == 0 and list(it) == []


@needs_native
def test_register_classes_refuses_classes_its_own_dealloc_cannot_free() -> None:
    """The registered Record and Header get the native dealloc (a free list, no generic subtype_dealloc):
    a subclass with a finalizer or weak references would need the generic one, and is refused."""
    from kstore_cli.record.batch import Header

    Record = _native_record_cls()
    with_del = type("R", (native.RecordBase,), {"__slots__": (), "__del__": lambda self: None})
    with pytest.raises(TypeError, match="no __del__"):
        native.register_classes(with_del, Header)
    weak = type("R", (native.RecordBase,), {"__slots__": ("__weakref__",)})
    with pytest.raises(TypeError):
        native.register_classes(weak, Header)
    header_del = type("H", (native.HeaderBase,), {"__slots__": (), "__del__": lambda self: None})
    with pytest.raises(TypeError, match="no __del__"):
        native.register_classes(Record, header_del)
    native.register_classes(Record, Header)  # what batch.py registered, again
    body, n = _v2_body([(b"k", b"v", [("h", b"x")], 0)])
    (record,) = native.build_v2_records(Record, Header, "batch", body, 0, len(body), n, 0, 0, None, -1)
    assert record.headers == (Header("h", b"x"),) and type(record.headers[0]) is Header


@needs_native
def test_a_batch_iterator_dropped_half_way_frees_what_it_held() -> None:
    """An iterator left half-way lets its batch buffer go (no export left behind: the buffer can be
    resized again), and the records built keep the Record class's reference count balanced (the native
    Record's own tp_dealloc gives back the reference each instance holds on its heap type)."""
    from kstore_cli.record.batch import Header

    Record = _native_record_cls()
    body, n = _v2_body([(b"k%d" % i, b"v" * i, [("h", b"x")] if i % 3 else [], i) for i in range(50)])
    buf = bytearray(body)
    tail = (Header, "batch", buf, 0, len(buf), n, 0, 0, None, -1)
    before = sys.getrefcount(Record)
    for _ in range(200):
        records = native.build_v2_records(Record, *tail)
        assert [r.offset for r in records] == list(range(50))
        del records
    assert sys.getrefcount(Record) == before
    batch = _batch_of(body, [(b"k", b"v", [], 0)] * n)
    before = sys.getrefcount(Record)
    it = native.v2_batch_iter(Record, Header, batch)
    first = next(it)
    assert first.offset == 0 and first.headers == ()
    del it, first
    assert sys.getrefcount(Record) == before
    raw = bytes(batch._buf)
    for exhaust in (False, True):
        view = batch._buf = memoryview(bytearray(raw))
        it = native.v2_batch_iter(Record, Header, batch)
        with pytest.raises(BufferError):
            view.release()  # the iterator holds an export on the batch's buffer while it lives
        assert next(it).offset == 0
        if exhaust:
            assert [r.offset for r in it] == list(range(1, n))
        else:
            del it
        view.release()  # dropped half-way or exhausted: the export is given back


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(-(2**63), 2**63 - 1), st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=40)), st.integers(0, 0xFF)), min_size=0, max_size=6),
       st.lists(DAMAGE, max_size=2), st.integers(0, 1), st.integers(-(2**63), 2**63 - 1),
       st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), st.booleans())
def test_built_legacy_records_agree(messages, damages, wrapper_magic, wrapper_offset, log_append, flip_crc) -> None:
    """The inner messages of a legacy wrapper: both twins build the same records or raise the same error."""
    from kstore_cli.record.batch import _PyRecord

    Record = _native_record_cls()
    body = b""
    for magic, offset, key, value, attributes in messages:
        entry = bytearray(build_legacy_entry(offset, magic, attributes & 0x09, 1_600_000_000_000 if magic else -1,
                                             key, value))
        if flip_crc:
            entry[12] ^= 1
        body += bytes(entry)
    for kind, where, value in damages:
        body = _damage(body, kind, where, value)
    args = ("batch", body, wrapper_magic, wrapper_offset, log_append)
    ours = _outcome(py.build_legacy_records, _PyRecord, *args)
    theirs = _outcome(native.build_legacy_records, Record, *args)
    if ours[0] != "ok":
        assert theirs == ours
        return
    assert theirs[0] == "ok"
    assert [_slots(r) for r in theirs[1]] == [_slots(r) for r in ours[1]]


# ------------------------------------------------------------------------------ legacy


LEGACY = st.tuples(st.integers(0, 1), st.integers(0, 2**40), BYTES, BYTES)


@needs_native
@settings(max_examples=300)
@given(st.lists(LEGACY, min_size=1, max_size=4), st.lists(DAMAGE, max_size=3))
def test_legacy_messages_agree(entries, damages) -> None:
    buf = b"".join(build_legacy_entry(i, magic, 0, ts if magic else -1, k, v) for i, (magic, ts, k, v) in enumerate(entries))
    for kind, where, value in damages:
        buf = _damage(buf, kind, where, value)
    pos = 0
    while True:
        kind, entry = same("decode_legacy_message", buf, pos, len(buf))
        if kind != "ok" or entry is None:
            break
        pos += entry[1]


@needs_native
@pytest.mark.parametrize("size", [2**31 - 1, -1, 13, 14, 18])
def test_legacy_sizes_at_the_limits_agree(size) -> None:
    buf = struct.pack(">qi", 0, size) + b"\x00" * 30
    same("decode_legacy_message", buf, 0, len(buf))


# ------------------------------------------------------------------------------ framing and CRC


def _segment(batches) -> bytes:
    out = b""
    offset = 0
    for records in batches:
        specs = [RecordSpec(offset + i, 1000 + i, k, v) for i, (k, v, _h, _t) in enumerate(records)]
        out += build_v2_batch(specs)
        offset += len(records)
    return out


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORDS, min_size=1, max_size=4), st.lists(DAMAGE, max_size=2), st.integers(1, 5), st.booleans())
def test_scan_batches_agree(batches, damages, max_batches, check_crc) -> None:
    buf = _segment(batches)
    for kind, where, value in damages:
        buf = _damage(buf, kind, where, value)
    pos = 0
    while True:
        kind, (heads, stop, status) = same("scan_batches", buf, pos, len(buf), max_batches, check_crc)
        if status != decode.SCAN_MORE:
            break
        assert stop > pos
        pos = stop


@needs_native
@given(st.binary(max_size=300))
def test_crc32c_agrees(data) -> None:
    assert native.crc32c(data) == py.crc32c(data) == py.crc32c(memoryview(data))


@needs_native
@pytest.mark.parametrize("length", [0, 7, 8, 767, 768, 769, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1,
                                    2 * 3 * 8192 + 3 * 256 + 13])
@pytest.mark.parametrize("skew", [0, 3])
def test_crc32c_agrees_across_the_interleaved_block_sizes(length, skew) -> None:
    # From 3 x 256 and 3 x 8192 bytes on, the native CRC runs three interleaved streams, after
    # aligning the start to 8 bytes. Checked against the crc32c package.
    import random

    from crc32c import crc32c as reference

    data = random.Random(length * 8 + skew).randbytes(length + skew)
    view = memoryview(data)[skew:]
    assert native.crc32c(view) == reference(view)


@needs_native
def test_out_of_range_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        native.decode_v2_records(b"abc", 0, 4, 1)
    with pytest.raises(ValueError):
        native.scan_batches(b"abc", -1, 3, 1, True)


def test_scan_matches_the_reader_on_the_corpus() -> None:
    """scan_batches frames what read_batches frames (every v2 batch of Kafka's corpus)."""
    logs = sorted((ROOT / "fixtures").rglob("*.log"))
    assert logs
    for log in logs[:60]:
        buf = log.read_bytes()
        heads, stop, status = decode.scan_batches(buf, 0, len(buf), 10**9, True)
        try:
            framed = [b for b in read_batches(buf)]
        except KstoreError:
            continue
        plain = [b.position for b in framed[: len(heads)]]
        assert [h[0] for h in heads] == plain


# ------------------------------------------------------------------------------ columnar mode


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.lists(DAMAGE, max_size=2), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**40), 2**40),
       st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), st.integers(0, 2**31 - 100), st.integers(0, 1000))
def test_columns_agree(records, damages, base_offset, base_ts, log_append, key_base, value_base) -> None:
    body, n = _v2_body(records)
    for kind, where, value in damages:
        body = _damage(body, kind, where, value)
    args = (body, 0, len(body), n, base_offset, base_ts, log_append, key_base, value_base)

    def outcome(fn):
        try:
            return _outcome(fn, *args)
        except OverflowError as exc:
            return "OverflowError", str(exc)

    assert outcome(native.decode_v2_columns) == outcome(py.decode_v2_columns)


@needs_native
@given(st.binary(max_size=40).map(lambda b: bytes(x & 1 for x in b)))
def test_pack_validity_agrees(valid) -> None:
    assert native.pack_validity(valid) == py.pack_validity(valid)


def test_column_builder_columnar_equals_records_path() -> None:
    """ColumnBuilder gives the same Arrow batch from whole batches (columnar) and from records."""
    pytest.importorskip("pyarrow")
    from kstore_cli.spark.columns import ColumnBuilder

    buf = b""
    for b in range(5):
        specs = [RecordSpec(b * 10 + i, 1000 + i, None if i % 3 == 0 else b"k%d" % i, None if i == 4 else b"v" * i,
                            [("h", b"x")] if i == 2 else []) for i in range(7)]
        buf += build_v2_batch(specs)
    columnar, by_records = ColumnBuilder(), ColumnBuilder()
    for batch in read_batches(buf):
        assert columnar.add_batch("t", 0, batch) == 7
        by_records.add("t", 0, batch, batch.records())
    assert columnar.add_batch("t", 0, next(iter(read_batches(buf))), start=3) is None  # needs filtering
    expected = by_records.finish()
    assert columnar.finish().equals(expected)
    # the same rows from runs of batches (read_columns), split into several runs and pieces
    from kstore_cli.record.columns import RecordColumns, read_columns

    by_runs = ColumnBuilder()
    runs = list(read_columns(buf, max_bytes=150))
    assert len(runs) > 2 and all(isinstance(r, RecordColumns) for r in runs)
    for run in runs:
        by_runs.add_run("t", 0, run)
    assert by_runs.finish().equals(expected)


# ------------------------------------------------------------------------------ runs of plain batches

HEADER_KEYS = st.one_of(st.text(max_size=6), st.binary(max_size=6))  # raw bytes: maybe not UTF-8
RUN_RECORDS = st.lists(st.tuples(BYTES, BYTES, st.lists(st.tuples(HEADER_KEYS, st.one_of(st.none(), st.binary(max_size=8))),
                                                        max_size=2)), min_size=0, max_size=5)
#: What kind of batch: 0-3 plain (the run's case), 4 lz4, 5 control, 6 transactional, 7 log append time.
RUN_BATCHES = st.lists(st.tuples(st.integers(0, 7), RUN_RECORDS), min_size=1, max_size=6)


def _run_segment(batches, base: int = 0) -> bytes:
    from kstore_cli.codecs import LZ4
    from kstore_cli.record.builder import build_control_batch

    out = b""
    offset = base
    for kind, records in batches:
        if kind == 5:
            out += build_control_batch(offset, 1000, commit=True, coordinator_epoch=0, producer_id=7, producer_epoch=0)
            offset += 1
            continue
        specs = [RecordSpec(offset + i, 1000 + 7 * i, k, v, h) for i, (k, v, h) in enumerate(records)]
        options: dict = {}
        if kind == 4:
            options["codec"] = LZ4
        elif kind == 6:
            options.update(is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=0)
        elif kind == 7:
            options.update(timestamp_type=1, log_append_time=5_000)
        if not specs:
            options.update(base_offset=offset, last_offset_delta=0, max_timestamp=-1)
        out += build_v2_batch(specs, **options)
        offset += max(len(specs), 1)
    return out


@needs_native
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(RUN_BATCHES, st.lists(DAMAGE, max_size=2), st.integers(1, 12), st.integers(1, 600), st.booleans(),
       st.one_of(st.none(), st.integers(-3, 25)), st.one_of(st.none(), st.integers(-3, 25)), st.booleans(),
       st.booleans(), st.tuples(*[st.one_of(st.just(0), st.integers(0, 999), st.integers(2**31 - 120, 2**31 - 1))] * 5))
def test_runs_agree(batches, damages, max_rows, max_bytes, check_crc, min_offset, end_offset, stop_txn, with_headers,
                    bases) -> None:
    """decode_v2_run: both twins give the same rows, stop and status (including the int32 end limit,
    near which `bases` start), run after run to the end of the buffer."""
    buf = _run_segment(batches)
    for kind, where, value in damages:
        buf = _damage(buf, kind, where, value)
    pos = 0
    while pos < len(buf):
        args = (buf, pos, len(buf), max_rows, max_bytes, check_crc, min_offset, end_offset, stop_txn, with_headers,
                bases)
        _kind, (n, stop, status, batches_in_run, cols) = same("decode_v2_run", *args)
        assert len(cols) == 15 and len(cols[0]) == 8 * n and (batches_in_run > 0) == (n > 0)
        if status == decode.SCAN_END:
            break
        if status == decode.SCAN_OTHER:
            size = struct.unpack_from(">i", buf, stop + 8)[0]
            if size < 14:
                break
            stop += 12 + size  # what the batch path would do with that entry
        pos = max(stop, pos + 1)
