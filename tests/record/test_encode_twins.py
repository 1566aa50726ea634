"""The two record-encoder twins agree with each other and with the batch builder, byte for byte.

The native twin (``kstore_cli.record._encode_c``) and the pure-Python one (``_encode_py``) are
compared on random records (null keys and values, headers with non-ASCII keys and null values,
timestamps anywhere in int64, offsets with gaps and negative deltas), on damaged legacy message
sets (same error class and message), and with :mod:`.builder` (what convert-format wrote before
the encoder: ``encode_v2_record``, ``build_v2_batch``, ``build_legacy_entry``, ``build_legacy_batch``).
A conversion through :class:`~kstore_cli.operations.convert.BatchConverter` is compared with the
builder-based grouping it replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore_cli.codecs import GZIP, NONE, ZSTD
from kstore_cli.errors import KstoreError
from kstore_cli.record import _encode_py as py
from kstore_cli.record import decode, encode
from kstore_cli.record.batch import CREATE_TIME, LOG_APPEND_TIME
from kstore_cli.record.builder import (
    RecordSpec,
    build_legacy_batch,
    build_legacy_entry,
    build_v2_batch,
    encode_v2_record,
)
from kstore_cli.operations.convert import ConvertOptions, ConvertStats, convert_batches
from kstore_cli.record.reader import read_batches

from tests.conftest import ROOT

try:
    from kstore_cli.record import _encode_c as native
except ImportError:  # pragma: no cover - only when the extension is not built
    native = None

pytestmark = pytest.mark.twins

needs_native = pytest.mark.skipif(native is None, reason="the native encoder is not built")
TWINS = [py] + ([native] if native is not None else [])
INT64 = st.integers(-(2**63), 2**63 - 1)


def _bytes(buf) -> bytes:
    return bytes(memoryview(buf).cast("B"))


def _table_bytes(table) -> tuple:
    return (table[0], _bytes(table[1])) + tuple(_bytes(c) for c in table[2:])


def _outcome(fn: Callable, *args: Any) -> Tuple[str, Any]:
    try:
        result = fn(*args)
    except (KstoreError, ValueError, OverflowError) as exc:
        return type(exc).__name__, str(exc)
    return "ok", (None if result is None else _table_bytes(result)) if fn.__name__.endswith("table") else result


# ------------------------------------------------------------------------------ strategies

BYTES = st.one_of(st.none(), st.binary(max_size=30))
HEADER_KEY = st.one_of(st.text(max_size=6), st.sampled_from(["trace-id", "é", "日本", "\U0001f600"]))
HEADERS = st.lists(st.tuples(HEADER_KEY, st.one_of(st.none(), st.binary(max_size=10))), max_size=3)


@st.composite
def records(draw, min_size: int = 1, max_size: int = 12, headers: bool = True) -> List[RecordSpec]:
    """Records with increasing, gapped or (sometimes) decreasing offsets and any timestamps."""
    n = draw(st.integers(min_size, max_size))
    offset = draw(st.integers(0, 2**40))
    base_ts = draw(st.one_of(st.integers(-1, 2**41), INT64))
    out = []
    for _ in range(n):
        ts = draw(st.one_of(st.just(base_ts), st.integers(base_ts - 1000, base_ts + 1000), INT64))
        ts = max(-(2**63), min(2**63 - 1, ts))
        out.append(RecordSpec(offset, ts, draw(BYTES), draw(BYTES), draw(HEADERS) if headers else []))
        offset += draw(st.one_of(st.just(1), st.integers(-3, 50)))
    return out


# ------------------------------------------------------------------------------ v2 records


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.integers(0, 2**40), st.one_of(INT64, st.integers(-5, 5)))
def test_v2_records_equal_the_builder(recs, base_offset, base_ts) -> None:
    table = encode.spec_table(recs)
    expected = b"".join(encode_v2_record(r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
                        for r in recs)
    for twin in TWINS:
        out = bytearray(b"prefix")
        max_ts = twin.encode_v2(out, table, 0, len(recs), base_offset, base_ts)
        assert bytes(out) == b"prefix" + expected, twin.__name__
        assert max_ts == max(r.timestamp for r in recs)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.sampled_from([NONE, GZIP, ZSTD]), st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
def test_v2_batch_equals_build_v2_batch(recs, codec, ts_type) -> None:
    from kstore_cli.codecs import get_codec

    table = encode.spec_table(recs)
    base, base_ts = recs[0].offset, recs[0].timestamp
    lat = recs[-1].timestamp if ts_type == LOG_APPEND_TIME else None
    expected = build_v2_batch(recs, base_offset=base, last_offset_delta=recs[-1].offset - base, codec=codec,
                              timestamp_type=ts_type, log_append_time=lat)
    for twin in TWINS:
        body = bytearray()
        max_ts = twin.encode_v2(body, table, 0, len(recs), base, base_ts)
        if codec:
            body = get_codec(codec).compress(bytes(body), 2)
        attributes = codec | (0x08 if ts_type == LOG_APPEND_TIME else 0)
        got = encode.v2_batch(body, len(recs), base_offset=base, last_offset_delta=recs[-1].offset - base,
                              attributes=attributes, base_timestamp=base_ts,
                              max_timestamp=lat if lat is not None else max_ts)
        assert got == expected, twin.__name__


# ------------------------------------------------------------------------------ legacy entries


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(records(headers=False), st.sampled_from([0, 1]), st.sampled_from([0, 0x08]), st.integers(0, 2**40),
       st.one_of(st.none(), INT64))
def test_legacy_entries_equal_the_builder(recs, magic, attributes, offset_base, fixed_ts) -> None:
    table = encode.spec_table(recs)
    expected = b"".join(
        build_legacy_entry(r.offset - offset_base, magic, attributes,
                           (r.timestamp if fixed_ts is None else fixed_ts) if magic else -1, r.key, r.value)
        for r in recs)
    for twin in TWINS:
        out = bytearray()
        max_ts = twin.encode_legacy(out, table, 0, len(recs), magic, attributes, offset_base, fixed_ts)
        assert bytes(out) == expected, twin.__name__
        assert max_ts == max(r.timestamp for r in recs)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(records(headers=False), st.sampled_from([0, 1]), st.sampled_from([NONE, GZIP]),
       st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
def test_legacy_wrapper_equals_build_legacy_batch(recs, magic, codec, ts_type) -> None:
    """What convert's legacy groups write: plain entries, or a wrapper of inner entries."""
    from kstore_cli.codecs import get_codec

    recs = [RecordSpec(r.offset, r.timestamp, r.key, r.value) for r in recs]
    lat = recs[0].timestamp if ts_type == LOG_APPEND_TIME else None
    expected = build_legacy_batch(recs, magic=magic, codec=codec, timestamp_type=ts_type, log_append_time=lat)
    ts_attr = 0x08 if magic == 1 and ts_type == LOG_APPEND_TIME else 0
    table = encode.spec_table(recs)
    for twin in TWINS:
        body = bytearray()
        offset_base = recs[0].offset if (magic == 1 and codec) else 0
        max_ts = twin.encode_legacy(body, table, 0, len(recs), magic, ts_attr, offset_base, lat if magic else None)
        if codec == NONE:
            assert bytes(body) == expected
            continue
        wrapper_ts = -1 if magic == 0 else (lat if lat is not None else max_ts)
        got = build_legacy_entry(recs[-1].offset, magic, codec | ts_attr, wrapper_ts, None,
                                 get_codec(codec).compress(bytes(body), magic))
        assert got == expected, twin.__name__


# ------------------------------------------------------------------------------ record tables


def _legacy_set(recs: List[RecordSpec], magic: int, relative: bool) -> bytes:
    base = recs[0].offset
    return b"".join(build_legacy_entry(r.offset - base if relative else r.offset, magic, 0,
                                       r.timestamp if magic else -1, r.key, r.value) for r in recs)


def _damage(data: bytes, kind: int, where: int, value: int) -> bytes:
    if not data:
        return data
    where %= len(data)
    b = bytearray(data)
    if kind == 0:
        return bytes(b[:where])
    if kind == 1:
        b[where] ^= 1 << (value % 8)
        return bytes(b)
    if kind == 2:
        b[where] = (0x00, 0x7F, 0x80, 0xFF)[value % 4]
        return bytes(b)
    return bytes(b[:where]) + bytes([value & 0xFF]) + bytes(b[where:])


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(records(headers=False), st.sampled_from([0, 1]), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9999),
                                                                         st.integers(0, 255)), max_size=3),
       st.one_of(st.just(0), INT64), st.one_of(st.none(), INT64))
def test_legacy_tables_agree(recs, magic, damages, wrapper_offset, lat) -> None:
    data = _legacy_set(recs, magic, relative=magic == 1)
    for kind, where, value in damages:
        data = _damage(data, kind, where, value)
    ours = _outcome(py.legacy_table, data, magic, wrapper_offset, lat)
    theirs = _outcome(native.legacy_table, data, magic, wrapper_offset, lat)
    assert theirs == ours


def _legacy_records(data: bytes, magic: int, wrapper_offset: int, lat: Optional[int]) -> List[tuple]:
    """(offset, timestamp, key, value) of decode.build_legacy_records (what convert read before)."""
    from kstore_cli.record.batch import Record

    return [(r.offset, r.timestamp, r.key, r.value)
            for r in decode.build_legacy_records(Record, None, data, magic, wrapper_offset, lat)]


def _table_records(table) -> List[tuple]:
    n, data, offsets, timestamps, spans = table[0], memoryview(table[1]).cast("B"), *(
        memoryview(c).cast("B").cast("q") for c in table[2:5])
    return [(offsets[i], timestamps[i], None if spans[4 * i + 1] < 0 else bytes(data[spans[4 * i]: spans[4 * i] + spans[4 * i + 1]]),
             None if spans[4 * i + 3] < 0 else bytes(data[spans[4 * i + 2]: spans[4 * i + 2] + spans[4 * i + 3]]))
            for i in range(n)]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records(headers=False), st.sampled_from([0, 1]), st.one_of(st.none(), st.integers(-1, 2**41)))
def test_legacy_table_holds_what_the_decoder_reads(recs, magic, lat) -> None:
    recs = sorted(recs, key=lambda r: r.offset)
    data = _legacy_set(recs, magic, relative=magic == 1)
    wrapper_offset = recs[-1].offset if magic == 1 else 0
    expected = _legacy_records(data, magic, wrapper_offset, lat)
    for twin in TWINS:
        assert _table_records(twin.legacy_table(data, magic, wrapper_offset, lat)) == expected, twin.__name__


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.integers(0, 2**40), st.one_of(INT64, st.integers(-5, 5)), st.one_of(st.none(), INT64),
       st.booleans())
def test_v2_tables_agree(recs, base_offset, base_ts, lat, bad_key) -> None:
    body = bytearray(b"\x00" * 3)
    for i, r in enumerate(recs):
        headers = [(k.encode("utf-8"), v) for k, v in r.headers]
        if bad_key and i == len(recs) - 1:
            headers.append((b"\xff\xfe", b"v"))  # not UTF-8: Kafka re-encodes it
        body += encode_v2_record(i, r.timestamp, r.key, r.value, headers)
    decoded = decode.decode_v2_records(bytes(body), 3, len(body), len(recs))
    results = [_outcome(twin.v2_table, bytes(body), decoded, base_offset, base_ts, lat) for twin in TWINS]
    assert all(r == results[0] for r in results)
    assert results[0][0] == "ok" and (results[0][1] is None) == bad_key


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.sampled_from([0, 1, 2]), st.integers(0, 3), st.integers(1, 400), st.booleans())
def test_fit_and_table_size_follow_convert_size_estimate(recs, to_magic, start, limit, take_first) -> None:
    start = min(start, len(recs))

    def size(r: RecordSpec) -> int:  # convert's estimate before the encoder (header keys in characters)
        s = (0 if r.key is None else len(r.key)) + (0 if r.value is None else len(r.value))
        if to_magic < 2:
            return s + 34
        return s + sum(len(k) + (0 if v is None else len(v)) + 10 for k, v in r.headers) + 21

    group_base = recs[0].offset
    expected_stop, total = start, 61
    for i in range(start, len(recs)):
        s = size(recs[i])
        if not (take_first and i == start) and (total + s > limit or recs[i].offset - group_base > 2**31 - 1):
            break
        total += s
        expected_stop = i + 1
    table = encode.spec_table(recs)
    for twin in TWINS:
        assert twin.fit(table, start, to_magic, 61, limit, group_base, take_first) == (expected_stop, total)
        assert twin.table_size(table, to_magic) == sum(size(r) for r in recs)


@needs_native
def test_native_refuses_inconsistent_tables() -> None:
    recs = [RecordSpec(0, 1, b"k", b"value")]
    n, data, offsets, timestamps, spans, he, hs = encode.spec_table(recs)
    bad_span = memoryview(spans).cast("B").tobytes()
    bad_span = bad_span[:16] + (10**6).to_bytes(8, sys.byteorder) + bad_span[24:]  # value start past the data
    for table in [(2, data, offsets, timestamps, spans, he, hs), (1, data, b"", timestamps, spans, he, hs),
                  (1, data, offsets, timestamps, bad_span, he, hs), (1, data, offsets, timestamps, spans, b"x" * 8, hs),
                  (1, data, offsets, timestamps, spans, he, b"x")]:
        with pytest.raises(ValueError):
            native.encode_v2(bytearray(), table, 0, 1, 0, 0)
    with pytest.raises(ValueError):
        native.encode_v2(bytearray(), encode.spec_table(recs), 0, 2, 0, 0)
    with pytest.raises(ValueError):
        native.encode_legacy(bytearray(), encode.spec_table(recs), 0, 1, 2, 0, 0, None)


@pytest.mark.decoder_env
def test_backend_follows_the_environment() -> None:
    code = "from kstore_cli.record import encode; print(encode.BACKEND)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KSTORE_DECODER="python"),
                         capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "python"
    expected = "python" if os.environ.get("KSTORE_DECODER") == "python" or native is None else "native"
    assert encode.BACKEND == expected


# ------------------------------------------------------------------------------ whole conversions


def _reference_v2(recs: List[RecordSpec], codec: int, limit: int) -> bytes:
    """convert-format before the encoder: legacy records grouped one by one (size estimate, int32
    offset span) and each group built by build_v2_batch."""
    out, group, size = [], [], 61
    for r in recs:
        s = (0 if r.key is None else len(r.key)) + (0 if r.value is None else len(r.value)) + 21
        if group and (size + s > limit or r.offset - group[0].offset > 2**31 - 1):
            out.append(build_v2_batch(group, codec=codec))
            group, size = [], 61
        group.append(r)
        size += s
    if group:
        out.append(build_v2_batch(group, codec=codec))
    return b"".join(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(headers=False, max_size=8), min_size=1, max_size=5), st.sampled_from([NONE, GZIP, ZSTD]),
       st.integers(40, 600))
def test_legacy_to_v2_conversion_equals_the_builder(wrappers, codec, batch_bytes) -> None:
    offset, data, all_recs = 0, b"", []
    for recs in wrappers:
        recs = [RecordSpec(offset + i, max(r.timestamp, -1) % 2**50, r.key, r.value) for i, r in enumerate(recs)]
        offset += len(recs) + 3
        data += build_legacy_batch(recs, magic=1, codec=GZIP)
        all_recs += recs
    opts = ConvertOptions(2, codec=codec, batch_bytes=batch_bytes)
    got = b"".join(d if d is not None else bytes(b.buffer)
                   for d, _first, b in convert_batches(read_batches(data), opts, ConvertStats()))
    assert got == _reference_v2(all_recs, codec, batch_bytes)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.integers(0, 3), st.integers(1, 400), st.booleans(), st.sampled_from([0, 1, 2]),
       st.one_of(st.none(), INT64))
def test_add_is_fit_then_encode(recs, start, limit, take_first, magic, fixed_ts) -> None:
    """The fused calls convert makes per group agree with fit followed by encode_v2 / encode_legacy."""
    start = min(start, len(recs) - 1)
    table = encode.spec_table(recs)
    base, base_ts = recs[start].offset, recs[start].timestamp
    stop, size = py.fit(table, start, magic, 61, limit, base, take_first)
    expected = bytearray()
    if stop > start:
        if magic == 2:
            max_ts = py.encode_v2(expected, table, start, stop, base, base_ts)
        else:
            max_ts = py.encode_legacy(expected, table, start, stop, magic, 0, base, fixed_ts)
        want = (stop, size, max_ts, recs[stop - 1].offset)
    else:
        want = (stop, size, None, None)
    for twin in TWINS:
        out = bytearray()
        if magic == 2:
            got = twin.add_v2(out, table, start, base, base_ts, 61, limit, take_first)
        else:
            got = twin.add_legacy(out, table, start, magic, 0, base, fixed_ts, base, 61, limit, take_first)
        assert (got, bytes(out)) == (want, bytes(expected)), twin.__name__


INT16, INT32 = st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1)
V2_HEADERS = st.tuples(INT64, INT32, INT16, INT64, INT64, INT32, INT64, INT16, INT32, INT32)


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.binary(max_size=200), V2_HEADERS), max_size=5))
def test_v2_frames_agree_and_frame_back(batches) -> None:
    """Several batches in one buffer, from either twin, equal each batch built alone by the builder's
    layout (v2_batch of one); the decoder frames them back at the same fields."""
    bodies, headers = [b for b, _ in batches], [h for _, h in batches]
    data = native.v2_frames(bodies, headers)
    assert data == py.v2_frames(bodies, headers)
    alone = b"".join(encode.v2_batch(b, h[9], base_offset=h[0], last_offset_delta=h[1], attributes=h[2],
                                     base_timestamp=h[3], max_timestamp=h[4], partition_leader_epoch=h[5],
                                     producer_id=h[6], producer_epoch=h[7], base_sequence=h[8]) for b, h in batches)
    assert data == alone
    framed = list(read_batches(data))
    assert [(b.base_offset, b.producer_id, b.count, b.is_valid) for b in framed] == [(h[0], h[6], h[9], True)
                                                                                     for h in headers]


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.__name__.rsplit(".", 1)[-1])
def test_legacy_to_v2_leaves_an_entry_with_a_negative_offset_to_the_regular_path(twin) -> None:
    # Kafka rejects a negative offset (Batch.offsets_problem): the regular path refuses the entry, so the
    # fast path must not convert it into a v2 batch (whose base offset would be negative).
    good = build_legacy_entry(0, 1, 0, 1_700_000_000_000, b"k", b"v")
    bad = build_legacy_entry(-3, 1, 0, 1_700_000_000_000, b"k", b"v")
    data = good + bad
    got = twin.legacy_to_v2(data, 0, len(data), 1 << 20, bytearray(), None, 1 << 20, 61, None, True)
    reason, pos, wrappers, _bytes_taken, records, last_wrapper = got[:6]
    assert (reason, pos, wrappers, records, last_wrapper) == (py.RUN_STOP, len(good), 1, 1, 0)
