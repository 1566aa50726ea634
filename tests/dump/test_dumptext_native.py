"""dump-segment's native record-line formatter (``kstore_cli.record._dumptext_c``) prints exactly what the
Python formatter prints: same stdout, stderr, exit status and error, on random v2 batches (keys,
values and header keys with invalid UTF-8, encoded surrogates, empty and null; CreateTime and
LogAppendTime; base sequences near the wrap; offsets and timestamps near and past int64; gaps;
codecs) and on damaged ones. Skipped only when the extension is not built.
"""

from __future__ import annotations

import io
import os
import struct
import tempfile
from typing import List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore_cli.dump import dumplog, text_log
from kstore_cli.codecs import GZIP, LZ4, NONE, ZSTD
from kstore_cli.errors import KstoreError
from kstore_cli.parsers import make_parser
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.record.text import java_utf8, java_utf8_reference

try:
    from kstore_cli.record import _dumptext_c as native
except ImportError:  # pragma: no cover - only when the extension is not built
    native = None

pytestmark = pytest.mark.twins

needs_native = pytest.mark.skipif(native is None, reason="the native dump-segment formatter is not built")

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

# Bytes that exercise Java's replacement rules: lead bytes of every length, continuation bytes,
# encoded surrogates (0xED 0xA0-0xBF), overlongs, 0xF5-0xFF.
_interesting = st.sampled_from([0x00, 0x0A, 0x20, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1,
                                0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5,
                                0xF7, 0xF8, 0xFF])
_raw = st.lists(st.one_of(_interesting, st.integers(0, 255)), max_size=24).map(bytes)
_text = st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass"))
_ascii = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=40).map(str.encode)
_data = st.one_of(_raw, _text, _ascii)
_nullable = st.one_of(st.none(), _data)
_headers = st.lists(st.tuples(_data, st.one_of(st.none(), _data)), max_size=3)
_int32 = st.one_of(st.integers(-(2**31), INT32_MAX), st.sampled_from([-1, 0, 1, INT32_MAX, INT32_MAX - 1]))
_int64 = st.one_of(st.integers(-(2**63), INT64_MAX),
                   st.sampled_from([-1, 0, INT64_MAX, INT64_MAX - 5, -(2**63), 1_700_000_000_000]))


@st.composite
def batches(draw) -> bytes:
    base_offset = draw(st.one_of(st.integers(0, 1000), _int64))
    n = draw(st.integers(1, 6))
    deltas = draw(st.one_of(
        st.just(list(range(n))),
        st.lists(st.integers(0, 40), min_size=n, max_size=n).map(sorted),
        st.lists(_int32, min_size=n, max_size=n),
    ))
    ts0 = draw(_int64)
    ts = [min(INT64_MAX, max(-(2**63), ts0 + draw(st.integers(-5, 5)))) if draw(st.booleans()) else draw(_int64)
          for _ in range(n)]
    records = [RecordSpec(base_offset + d, t, draw(_nullable), draw(_nullable), draw(_headers))
               for d, t in zip(deltas, ts)]
    # The builder writes timestamp deltas as varlongs (wrapping): keep them within int64.
    base_ts = records[0].timestamp
    for r in records:
        if not -(2**63) <= r.timestamp - base_ts <= INT64_MAX:
            r.timestamp = base_ts
    log_append = draw(st.booleans())
    codec = draw(st.sampled_from([NONE, NONE, NONE, GZIP, LZ4, ZSTD]))
    return build_v2_batch(
        records,
        base_offset=base_offset,
        last_offset_delta=deltas[-1],
        codec=codec,
        timestamp_type=1 if log_append else 0,
        log_append_time=draw(_int64) if log_append else None,
        base_sequence=draw(st.one_of(st.just(-1), _int32)),
        producer_id=draw(st.sampled_from([-1, 7])),
    )


def _damage(data: bytes, draw_ops: List[Tuple[int, int]], truncate: Optional[int]) -> bytes:
    buf = bytearray(data)
    for pos, value in draw_ops:
        if 61 <= pos < len(buf):
            buf[pos] = value
        elif pos == 57:  # the record count
            struct.pack_into(">i", buf, 57, value - 128)
    if truncate is not None and 61 <= truncate < len(buf):
        del buf[truncate:]
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    return bytes(buf)


_declined: List[int] = []  # batches the native formatter handed back to Python


def _counting(*args):
    result = native.format_v2_records(*args)
    if result is None:
        _declined.append(args[3])
    return result


def _dump(path: str, *, native_on: bool, skip: bool, print_data: bool, parser=None, utf8_stdout: bool = False,
          runs: bool = True):
    """stdout, stderr and status; `utf8_stdout`: stdout is a UTF-8 TextIOWrapper (as dump-segment's), so the
    native lines go out as bytes (text_log._Utf8Out), else a StringIO (str lines). `runs`: runs of plain
    batches go through format_v2_run (else every batch through format_v2_records)."""
    saved = text_log._native_format_v2
    saved_run = text_log._native_format_run
    text_log._native_format_v2 = _counting if native_on else None
    if not runs:
        text_log._native_format_run = None
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", newline="") if utf8_stdout \
        else io.StringIO()
    err = io.StringIO()
    try:
        options = dumplog.DumpOptions(deep_iteration=True, print_data=print_data, skip_record_metadata=skip,
                                      parser=parser)
        try:
            status = dumplog.dump_files([path], out, err, options)
        except KstoreError as exc:
            status = (type(exc).__name__, exc.message, exc.path, exc.position)
        out.flush()
        text = raw.getvalue().decode("utf-8") if utf8_stdout else out.getvalue()
    finally:
        text_log._native_format_v2 = saved
        text_log._native_format_run = saved_run
    return text, err.getvalue(), status


def _both(segment: bytes, **kw) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "00000000000000000000.log")
        with open(path, "wb") as f:
            f.write(segment)
        python = _dump(path, native_on=False, **kw)
        assert _dump(path, native_on=True, **kw) == python
        assert _dump(path, native_on=True, runs=False, **kw) == python
        assert _dump(path, native_on=True, utf8_stdout=True, **kw) == python


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches(), min_size=1, max_size=4), st.booleans(), st.booleans())
def test_native_lines_equal_python_lines(segment: List[bytes], skip: bool, print_data: bool) -> None:
    del _declined[:]
    _both(b"".join(segment), skip=skip, print_data=print_data)
    assert not _declined, "the native formatter declined a well-formed batch"


@needs_native
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.lists(st.tuples(st.integers(57, 200), st.integers(0, 255)), max_size=4),
       st.one_of(st.none(), st.integers(61, 200)), st.booleans())
def test_native_equals_python_on_damaged_batches(batch: bytes, ops, truncate, skip: bool) -> None:
    _both(_damage(batch, ops, truncate) + batch, skip=skip, print_data=True)


@needs_native
@settings(max_examples=500, deadline=None)
@given(st.one_of(_raw, _text, st.binary(max_size=40)))
def test_native_java_utf8(data: bytes) -> None:
    assert native.java_utf8(data) == java_utf8(data) == java_utf8_reference(data)


@needs_native
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(["hex", "int", "string"]))
def test_other_decoders_stay_in_python(batch: bytes, value_decoder: str) -> None:
    _both(batch, skip=False, print_data=True, parser=make_parser(value_decoder=value_decoder))


@needs_native
def test_native_path_is_taken_for_plain_batches() -> None:
    batch = build_v2_batch([RecordSpec(5, 1_700_000_000_000 + i, b"k", "v\u00e9\ufffd".encode(), [("h", None), (b"\xed\xa0\x80", b"")])
                            for i in range(3)], base_offset=5, base_sequence=INT32_MAX - 1)
    result = native.format_v2_records(batch, 61, len(batch), 3, 5, 1_700_000_000_000, None, INT32_MAX - 1, -1,
                                      native.FLAG_METADATA | native.FLAG_DATA)
    assert result is not None
    text, last, gaps = result
    assert last == 5 and gaps == [5, 5, 5, 5]  # the builder put every record at offset 5
    assert text.splitlines()[0] == (
        "| offset: 5 CreateTime: 1700000000000 keySize: 1 valueSize: 6 sequence: 2147483646 "
        "headerKeys: [h,\ufffd] key: k payload: v\u00e9\ufffd"
    )
    assert text.splitlines()[1].startswith("| offset: 5 CreateTime: 1700000000001 keySize: 1 valueSize: 6 sequence: 2147483646")
    # Leftover bytes, a wrong count, or a `last` past int64: the Python path takes over.
    assert native.format_v2_records(batch + b"\x00", 61, len(batch) + 1, 3, 5, 0, None, -1, -1, 3) is None
    assert native.format_v2_records(batch, 61, len(batch), 4, 5, 0, None, -1, -1, 3) is None
    assert native.format_v2_records(batch, 61, len(batch), 3, 5, 0, None, -1, 2**64, 3) is None
    assert native.format_v2_records(batch, 61, len(batch) + 1, 3, 5, 0, None, -1, -1, 3) is None


@needs_native
def test_native_run_takes_plain_batches_and_stops_before_others() -> None:
    plain = build_v2_batch([RecordSpec(7, 1_700_000_000_000, b"k", b"v", [])], base_offset=7)
    bad_crc = bytearray(plain)
    bad_crc[-1] ^= 1
    data = plain + plain + bytes(bad_crc) + plain
    text, end, last, gaps = native.format_v2_run(data, 0, len(data), 1 << 20, -1, native.FLAG_METADATA | native.FLAG_DATA)
    lines = text.splitlines()
    assert end == 2 * len(plain) and last == 7 and gaps == [7, 7]  # both batches hold offset 7
    assert lines[0].startswith("baseOffset: 7 lastOffset: 7 count: 1 ") and " position: 0 " in lines[0]
    assert " position: %d " % len(plain) in lines[2] and lines[1].endswith("key: k payload: v")
    # Nothing taken at a batch it cannot print (the CRC fails), nor past `end`, nor past the budget.
    assert native.format_v2_run(data, end, len(data), 1 << 20, last, 3)[1] == end
    assert native.format_v2_run(data, 0, len(plain) - 1, 1 << 20, -1, 3)[:2] == ("", 0)
    assert native.format_v2_run(data, 0, len(data), 1, -1, 3)[1] == len(plain)


def test_backend_switch_turns_the_native_formatter_off() -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = "from kstore_cli.dump import text_log; print(text_log._native_format_v2 is None)"
    env = dict(os.environ, KSTORE_DECODER="python")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "True"


def test_utf8_out_only_over_a_plain_utf8_stream() -> None:
    """Bytes go straight to a buffered UTF-8 TextIOWrapper's buffer; text keeps the stream's error handler
    (a file name with surrogate-escaped bytes prints as the wrapper would print it)."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="UTF8", errors="backslashreplace", newline="")
    stream.write("first ")
    out = text_log._Utf8Out.over(stream)
    assert out is not None
    out.write("Dumping /d/\udcff.log\n")
    out.write_bytes("é\n".encode())
    out.flush()
    assert raw.getvalue() == "first Dumping /d/\\udcff.log\né\n".encode()
    assert text_log._Utf8Out.over(io.StringIO()) is None
    assert text_log._Utf8Out.over(io.TextIOWrapper(io.BytesIO(), encoding="latin-1")) is None
    assert text_log._Utf8Out.over(io.TextIOWrapper(io.BytesIO(), encoding="utf-8", line_buffering=True)) is None
