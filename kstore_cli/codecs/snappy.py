"""Snappy in xerial snappy-java's stream framing, which Kafka uses (not Google's framing format).

Layout::

    header (16 bytes): 82 53 4E 41 50 50 59 00   magic "\\x82SNAPPY\\0"
                       int32 BE version = 1, int32 BE compatible version = 1
    per block:         int32 BE compressed length, then a raw snappy block
                       (of at most 32 KiB of input)

Input that does not start with the magic is read as one raw snappy block, as
snappy-java's SnappyInputStream does.
"""

from __future__ import annotations

import struct
from typing import Iterator, Optional, Tuple

from kstore_cli.codecs._bound import too_large
from kstore_cli.errors import CodecError

MAGIC = b"\x82SNAPPY\x00"
HEADER = struct.Struct(">8sii")  # magic, version, compatible version
BLOCK_LENGTH = struct.Struct(">i")
_MAGIC_AS_LENGTH = 0x82534E41  # first 4 magic bytes read as a block length: a concatenated stream
BLOCK_SIZE = 32 * 1024


def decompress(data: "bytes | memoryview", limit: Optional[int] = None, *, bound: Optional[int] = None
               ) -> Optional[bytes]:
    """Decompress xerial-framed (or raw) snappy bytes; None when the blocks' declared lengths pass `limit`;
    RecordTooLargeError for a block declaring more than `bound` (the registry passes codecs.max_record_bytes)."""
    import snappy  # noqa: F401 - python-snappy: a missing library fails before any parsing

    buf = memoryview(data)
    if len(buf) < HEADER.size or bytes(buf[:8]) != MAGIC:
        declared = _raw_length(buf)
        if limit is not None and declared > limit:
            return None
        return _inflate(buf, "data", bound, declared)
    out = []
    total = 0
    for block, _at in _framed_blocks(buf):
        declared = _raw_length(block)
        total += declared
        if limit is not None and total > limit:
            return None
        out.append(_inflate(block, "block", bound, declared))
    return b"".join(out)


def _framed_blocks(buf: memoryview) -> Iterator[Tuple[memoryview, int]]:
    """The raw blocks of a xerial-framed stream (after its header) and each one's length field's byte;
    a repeated header (concatenated streams) is skipped, as SnappyInputStream does."""
    pos, end = HEADER.size, len(buf)
    while pos < end:
        if end - pos < 4:
            raise CodecError(f"snappy stream ended inside a block length at byte {pos}")
        (length,) = BLOCK_LENGTH.unpack_from(buf, pos)
        if length & 0xFFFFFFFF == _MAGIC_AS_LENGTH:
            pos += HEADER.size
            continue
        pos += 4
        if length < 0:
            raise CodecError(f"snappy block at byte {pos - 4} has a negative length {length}")
        if pos + length > end:
            raise CodecError(f"snappy block at byte {pos - 4} needs {length} bytes but only {end - pos} remain")
        yield buf[pos : pos + length], pos - 4
        pos += length


def _raw_length(block: "bytes | memoryview") -> int:
    """The uncompressed length a raw snappy block declares (its leading varint), checked before inflating."""
    if block and block[0] < 0x80:
        return block[0]
    value = 0
    for i in range(5):
        if i >= len(block):
            break
        b = block[i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value
    raise CodecError("snappy block has a corrupt length header")


def _inflate(block: "bytes | memoryview", where: str, bound: Optional[int], declared: int = -1) -> bytes:
    import snappy  # python-snappy

    if declared < 0:
        declared = _raw_length(block)
    # Snappy's densest element, a 3-byte copy of 64 bytes, inflates ~21x: a larger claim is damage.
    if declared > 22 * len(block) + 64:
        raise CodecError(f"snappy {where} declares {declared} bytes, more than its {len(block)} bytes can hold")
    if bound is not None and declared > bound:
        raise too_large(f"snappy {where}", declared, bound)
    return snappy.uncompress(bytes(block))


class SnappyStream:
    """xerial-framed snappy, decompressed block by block; a raw snappy input is inflated whole, after its
    declared length is checked against the bound."""

    __slots__ = ("_buf", "_blocks", "_out", "_out_pos", "_raw", "_bound")

    def __init__(self, data: "bytes | memoryview", bound: Optional[int] = None) -> None:
        import snappy  # noqa: F401 - fail early (ImportError) when python-snappy is missing

        buf = memoryview(data)
        self._buf = buf
        self._bound = bound
        self._out = b""
        self._out_pos = 0
        self._raw = len(buf) < HEADER.size or bytes(buf[:8]) != MAGIC
        #: The framed blocks still to inflate (for a raw input: a marker that it has not been inflated yet).
        self._blocks = iter(()) if self._raw else _framed_blocks(buf)

    def _next_block(self) -> Optional[bytes]:
        if self._raw:
            if self._blocks is None:
                return None
            self._blocks = None
            return _inflate(self._buf, "data", self._bound)
        for block, at in self._blocks:
            return _inflate(block, f"block at byte {at}", self._bound)
        return None

    def read(self, n: int) -> bytes:
        parts = []
        while n > 0:
            out, at = self._out, self._out_pos
            if at >= len(out):
                block = self._next_block()
                if block is None:
                    break
                self._out, self._out_pos = block, 0
                continue
            piece = out[at : at + n] if at or n < len(out) else out
            self._out_pos = at + len(piece)
            parts.append(piece)
            n -= len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)


def open_stream(data: "bytes | memoryview", *, bound: Optional[int] = None) -> SnappyStream:
    """A reader of xerial-framed (or raw) snappy bytes (`bound`: as for :func:`decompress`)."""
    return SnappyStream(data, bound)


def compress(data: "bytes | memoryview") -> bytes:
    """Compress into xerial framing with 32 KiB blocks (header written even for empty input)."""
    import snappy

    buf = memoryview(data)
    parts = [HEADER.pack(MAGIC, 1, 1)]
    for start in range(0, len(buf), BLOCK_SIZE):
        block = snappy.compress(bytes(buf[start : start + BLOCK_SIZE]))
        parts.append(BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)
