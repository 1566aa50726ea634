"""xerial snappy framing, read whole and block by block: both readers agree, and damage is one error."""

from __future__ import annotations

import struct

import pytest

snappy = pytest.importorskip("snappy")

from kstore_cli.codecs import snappy as xerial  # noqa: E402
from kstore_cli.errors import CodecError  # noqa: E402


def _framed(*chunks: bytes) -> bytes:
    out = xerial.HEADER.pack(xerial.MAGIC, 1, 1)
    for chunk in chunks:
        block = snappy.compress(chunk)
        out += struct.pack(">i", len(block)) + block
    return out


def test_concatenated_streams_and_raw_blocks_read_the_same_whole_and_streamed() -> None:
    # Two streams back to back: snappy-java skips the second header, as kstore must.
    data = _framed(b"a" * 100, b"b" * 50) + _framed(b"c" * 10)
    assert xerial.decompress(data) == b"a" * 100 + b"b" * 50 + b"c" * 10
    stream = xerial.open_stream(data)
    assert stream.read(120) + stream.read(1000) == b"a" * 100 + b"b" * 50 + b"c" * 10
    raw = snappy.compress(b"xyz")
    assert xerial.decompress(raw) == b"xyz"
    stream = xerial.open_stream(raw)
    assert stream.read(10) == b"xyz" and stream.read(10) == b""


def test_declared_lengths_past_the_limit_are_refused_before_inflating() -> None:
    assert xerial.decompress(_framed(b"a" * 100, b"b" * 50), limit=120) is None
    assert xerial.decompress(_framed(b"a" * 100, b"b" * 50), limit=150) == b"a" * 100 + b"b" * 50


@pytest.mark.parametrize("cut, message", [(3, "block at byte 55 needs 12 bytes but only 9 remain"),
                                          (None, "ended inside a block length at byte 16")])
def test_a_truncated_stream_is_one_error_naming_the_byte(cut, message) -> None:
    data = _framed(b"a" * 100, b"b" * 50) + _framed(b"c" * 10)
    bad = data[:-cut] if cut else data[:18]
    with pytest.raises(CodecError, match=message):
        xerial.decompress(bad)
    with pytest.raises(CodecError, match=message):
        xerial.open_stream(bad).read(10**6)
