"""convert-format's fast path to magic 2 (``encode.legacy_to_v2`` and ``BatchConverter.legacy_run``).

The fast path converts plain legacy entries (uncompressed or one gzip member) with one native call per
output batch and hands anything else to the regular path. Shown here: its two twins agree call for
call on random segments (mixed formats, codecs, timestamp types, damage under a valid CRC), and a
conversion with the fast path writes the same bytes, counts the same, and refuses with the same
error (message, file, byte position) as the regular path alone.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore_cli import codecs
from kstore_cli.codecs import GZIP, NONE, SNAPPY, ZSTD
from kstore_cli.errors import KstoreError
from kstore_cli.record import _encode_py as py
from kstore_cli.operations import convert as convert_mod
from kstore_cli.record import encode
from kstore_cli.record.batch import CREATE_TIME, LOG_APPEND_TIME
from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_legacy_entry, build_v2_batch
from kstore_cli.operations.convert import ConvertOptions, convert_partition
from kstore_cli.log.logdir import Partition, Target

try:
    from kstore_cli.record import _encode_c as native
except ImportError:  # pragma: no cover - only when the extension is not built
    native = None

needs_native = pytest.mark.skipif(native is None, reason="the native encoder is not built")
TS = 1_700_000_000_000
TIMESTAMP_TYPE = 0x08


def _legacy_set(recs: List[RecordSpec], magic: int) -> bytes:
    """Inner messages as a v1 producer writes them (relative offsets) or v0 (absolute)."""
    base = recs[0].offset
    return b"".join(build_legacy_entry(r.offset - base if magic else r.offset, magic, 0,
                                       r.timestamp if magic else -1, r.key, r.value) for r in recs)


def _gzip_wrapper(recs: List[RecordSpec], magic: int, lat: Optional[int], shape: int, flip: int) -> bytes:
    """A gzip wrapper with a valid CRC whose value is one member (shape 0), two members (1), one member
    and trailing bytes (2), or one member with a byte flipped at `flip` (3)."""
    inner = _legacy_set(recs, magic)
    if shape == 1:
        half = max(1, len(inner) // 2)
        value = gzip.compress(inner[:half], mtime=0) + gzip.compress(inner[half:], mtime=0)
    else:
        value = gzip.compress(inner, mtime=0)
        if shape == 2:
            value += b"\x00\x01"
        elif shape == 3:
            b = bytearray(value)
            b[flip % len(b)] ^= 0x10
            value = bytes(b)
    attributes = GZIP | (TIMESTAMP_TYPE if lat is not None else 0)
    ts = (lat if lat is not None else max(r.timestamp for r in recs)) if magic else -1
    return build_legacy_entry(recs[-1].offset, magic, attributes, ts, None, value)


@st.composite
def segments(draw) -> bytes:
    """Legacy entries (magic 0/1; none, gzip, snappy; CreateTime or LogAppendTime), some v2 batches,
    gzip wrappers of unusual shape or damaged under a valid CRC, and sometimes a cut-off tail."""
    parts: List[bytes] = []
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 8))):
        n = draw(st.integers(1, 6))
        size = draw(st.sampled_from([0, 3, 40, 300]))
        recs = [RecordSpec(offset + i, TS + draw(st.integers(-5, 50)),
                           draw(st.one_of(st.none(), st.binary(max_size=4))),
                           draw(st.one_of(st.none(), st.just(os.urandom(size))))) for i in range(n)]
        offset += n + draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["legacy", "legacy", "legacy", "v2", "gzip-shape"]))
        magic = draw(st.sampled_from([0, 1]))
        lat = draw(st.sampled_from([None, None, TS + 7, TS + 9])) if magic else None
        if kind == "v2":
            parts.append(build_v2_batch(recs, codec=draw(st.sampled_from([NONE, GZIP]))))
        elif kind == "gzip-shape":
            parts.append(_gzip_wrapper(recs, magic, lat, draw(st.integers(0, 3)), draw(st.integers(0, 10**6))))
        else:
            codec = draw(st.sampled_from([NONE, GZIP, GZIP, SNAPPY]))
            parts.append(build_legacy_batch(recs, magic=magic, codec=codec,
                                            timestamp_type=LOG_APPEND_TIME if lat is not None else CREATE_TIME,
                                            log_append_time=lat))
    data = b"".join(parts)
    if draw(st.integers(0, 5)) == 5:
        data = data[: len(data) - draw(st.integers(1, min(40, len(data))))]
    return data


def _normal(result: tuple) -> tuple:
    """A legacy_to_v2 result with its carry's table as bytes (the twins' column types differ)."""
    *head, carry = result
    if carry is not None:
        table = carry[0]
        carry = (tuple(bytes(memoryview(c).cast("B")) for c in table[1:]), table[0]) + tuple(carry[1:])
    return tuple(head) + (carry,)


def _run_all(impl: Any, data: bytes, limit: int, max_inflate: int, by_codec: bool) -> Tuple[list, bytes]:
    """legacy_to_v2 over the whole buffer as legacy_run drives it; an entry it stops at is stepped over
    (as the regular path would take it) when it is a complete entry."""
    buf = memoryview(data)
    out = bytearray()
    pos, group, carry, calls = 0, None, None, []
    for _ in range(10_000):
        r = impl.legacy_to_v2(buf, pos, len(data), max_inflate, out, group, limit, 61, carry, by_codec)
        calls.append(_normal(r))
        reason, pos, group, carry = r[0], r[1], r[6], r[10]
        if reason != py.RUN_STOP:
            group = None
            continue
        size = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) if len(data) - pos >= 12 else -1
        if size < 14 or pos + 12 + size > len(data):
            break
        pos += 12 + size  # the regular path's entry
        group = None
    return calls, bytes(out)


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.sampled_from([61, 200, 1000, 16384]), st.sampled_from([10, 500, 10**6]), st.booleans())
def test_twins_agree(data: bytes, limit: int, max_inflate: int, by_codec: bool) -> None:
    assert _run_all(py, data, limit, max_inflate, by_codec) == _run_all(native, data, limit, max_inflate, by_codec)


@pytest.mark.parametrize("impl", [py] + ([native] if native is not None else []), ids=lambda m: m.__name__)
def test_what_the_fast_path_leaves_to_the_regular_path(impl: Any) -> None:
    """It stops, taking nothing, at each entry that is not plain; it takes the plain ones."""
    recs = [RecordSpec(i, TS + i, b"k", b"v" * 20) for i in range(3)]
    plain = build_legacy_batch(recs, magic=1, codec=GZIP)
    bad_crc = bytearray(plain)
    bad_crc[-1] ^= 1
    left = {
        "bad CRC": bytes(bad_crc),
        "two gzip members": _gzip_wrapper(recs, 1, None, 1, 0),
        "bytes after the gzip member": _gzip_wrapper(recs, 1, None, 2, 0),
        "snappy": build_legacy_batch(recs, magic=1, codec=SNAPPY),
        "v2": build_v2_batch(recs),
        "cut off": plain[:-1],
    }
    for why, data in left.items():
        r = impl.legacy_to_v2(memoryview(data), 0, len(data), 10**6, bytearray(), None, 16384, 61, None, False)
        assert r[:3] == (py.RUN_STOP, 0, 0), why
    r = impl.legacy_to_v2(memoryview(plain), 0, len(plain), 10**6, bytearray(), None, 16384, 61, None, False)
    assert r[:5] == (py.RUN_STOP, len(plain), 1, len(plain), 3)
    # inflating past max_inflate: left to the regular path, which raises RecordTooLargeError there
    r = impl.legacy_to_v2(memoryview(plain), 0, len(plain), 10, bytearray(), None, 16384, 61, None, False)
    assert r[:3] == (py.RUN_STOP, 0, 0)


def _convert(src: Path, out: Path, fast: bool, monkeypatch: pytest.MonkeyPatch, **opts: Any) -> tuple:
    monkeypatch.setattr(convert_mod.BatchConverter, "runs_legacy",
                        property(lambda self: fast and self.opts.to_magic == 2))
    try:
        result = convert_partition(Target(Partition(str(src)), None), ConvertOptions(2, **opts), output_root=str(out))
    except KstoreError as exc:
        return "error", type(exc).__name__, str(exc), exc.path, exc.position
    written = out / src.name
    files = {f.name: f.read_bytes() for f in sorted(written.iterdir())}
    stats = result.to_dict()
    stats.pop("destination")
    return "ok", files, stats


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(segments(), st.sampled_from([None, ZSTD, GZIP, NONE]), st.sampled_from([1, 2]),
       st.sampled_from([100, 1000, 16384]), st.sampled_from([None, 64]))
def test_the_fast_path_converts_as_the_regular_path(tmp_path_factory: pytest.TempPathFactory,
                                                      monkeypatch: pytest.MonkeyPatch, data: bytes,
                                                      codec: Optional[int], jobs: int, batch_bytes: int,
                                                      max_record: Optional[int]) -> None:
    tmp = tmp_path_factory.mktemp("fast")
    src = tmp / "t-0"
    src.mkdir()
    (src / "00000000000000000000.log").write_bytes(data)
    if max_record is not None:
        monkeypatch.setattr(codecs, "max_record_bytes", max_record)
    regular = _convert(src, tmp / "regular", False, monkeypatch, codec=codec, jobs=jobs, batch_bytes=batch_bytes)
    fast = _convert(src, tmp / "fast", True, monkeypatch, codec=codec, jobs=jobs, batch_bytes=batch_bytes)
    assert fast == regular


def test_the_fast_path_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition of v1 gzip wrappers goes through legacy_to_v2, a call per output batch, and feed is
    never called."""
    recs = [[RecordSpec(100 * i + j, TS + j, b"k%d" % j, b"v" * 100) for j in range(100)] for i in range(20)]
    src = tmp_path / "t-0"
    src.mkdir()
    (src / "00000000000000000000.log").write_bytes(b"".join(build_legacy_batch(r, magic=1, codec=GZIP) for r in recs))
    calls, fed = [], []
    real_run, real_feed = encode.legacy_to_v2, convert_mod.BatchConverter.feed
    monkeypatch.setattr(encode, "legacy_to_v2", lambda *a: calls.append(a[1]) or real_run(*a))
    monkeypatch.setattr(convert_mod.BatchConverter, "feed", lambda self, *a: fed.append(a) or real_feed(self, *a))
    result = convert_partition(Target(Partition(str(src)), None), ConvertOptions(2, codec=ZSTD, jobs=1),
                               output_root=str(tmp_path / "out"))
    assert not fed and result.stats.records_out == 2000 and result.stats.batches_in == 20
    assert len(calls) == result.stats.batches_out
