"""LZ4 in the frame format subset Kafka writes (Lz4BlockOutputStream) and reads.

Layout::

    magic   04 22 4D 18             0x184D2204 little-endian
    FLG     0x60                    version 01, independent blocks, no checksums, no content size
    BD      0x40                    block max size id 4 = 64 KiB
    HC      1 byte                  (XXH32(descriptor, 0) >> 8) & 0xFF
    blocks  int32 LE size + data    bit 31 set: stored uncompressed
    end     00 00 00 00

Magic v0 data carries Kafka's "broken" header checksum, computed over the magic
bytes as well as FLG and BD: written for v0, not checked when reading v0,
checked for v1 and v2 (Kafka's ignoreFlagDescriptorChecksum).
"""

from __future__ import annotations

import struct
from typing import Optional

from kstore_cli.errors import CodecError

MAGIC = 0x184D2204
_U32LE = struct.Struct("<I")
_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_FLG_VERSION_MASK = 0xC0
_FLG_BLOCK_INDEPENDENT = 0x20
_FLG_BLOCK_CHECKSUM = 0x10
_FLG_CONTENT_SIZE = 0x08
_FLG_CONTENT_CHECKSUM = 0x04
_FLG_RESERVED = 0x03
_UNCOMPRESSED_BIT = 0x80000000
_KAFKA_FLG = 0x60
_KAFKA_BD = 0x40
_KAFKA_BLOCK_SIZE = 64 * 1024

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (only ever run on a few header bytes here)."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (k,) = _U32LE.unpack_from(data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _header_checksum(frame: bytes, descriptor_start: int, descriptor_end: int, broken: bool) -> int:
    start = 0 if broken else descriptor_start
    return (xxh32(bytes(frame[start:descriptor_end])) >> 8) & 0xFF


class Lz4Stream:
    """A Kafka LZ4 frame, decompressed block by block (a block is at most 4 MiB by the frame's descriptor)."""

    __slots__ = ("_buf", "_pos", "_end", "_max_block", "_block_checksum", "_out", "_out_pos", "_done")

    def __init__(self, data: "bytes | memoryview", verify_header_checksum: bool = True) -> None:
        import lz4.block  # noqa: F401 - fail early (ImportError) when the lz4 package is missing

        buf = memoryview(data)
        end = len(buf)
        if end < 4 or _U32LE.unpack_from(buf, 0)[0] != MAGIC:
            raise CodecError("Stream unsupported (invalid magic bytes)")
        if end < 7:
            raise CodecError("Stream ended prematurely")
        flg = buf[4]
        bd = buf[5]
        if (flg & _FLG_VERSION_MASK) != 0x40:
            raise CodecError("Stream unsupported (version must be 01)")
        if not flg & _FLG_BLOCK_INDEPENDENT:
            raise CodecError("Stream unsupported (dependent blocks)")
        if flg & _FLG_RESERVED or bd & 0x8F:
            raise CodecError("Stream unsupported (reserved bits set)")
        block_size_id = (bd >> 4) & 0x07
        if block_size_id not in _BLOCK_SIZES:
            raise CodecError(f"Stream unsupported (block size id {block_size_id})")
        pos = 6
        if flg & _FLG_CONTENT_SIZE:
            pos += 8
        if pos >= end:
            raise CodecError("Stream ended prematurely")
        if verify_header_checksum:
            expected = _header_checksum(bytes(buf[:pos]), 4, pos, broken=False)
            if buf[pos] != expected:
                raise CodecError("Stream frame descriptor corrupted")
        self._buf = buf
        self._pos = pos + 1
        self._end = end
        self._max_block = _BLOCK_SIZES[block_size_id]
        self._block_checksum = bool(flg & _FLG_BLOCK_CHECKSUM)
        self._out = b""
        self._out_pos = 0
        self._done = False

    def _next_block(self) -> bytes:
        import lz4.block

        buf, pos, end = self._buf, self._pos, self._end
        if pos + 4 > end:
            raise CodecError("Stream ended prematurely")
        (size,) = _U32LE.unpack_from(buf, pos)
        pos += 4
        if size == 0:
            self._done = True  # end mark; a content checksum after it is not verified
            return b""
        stored = bool(size & _UNCOMPRESSED_BIT)
        size &= ~_UNCOMPRESSED_BIT & _M32
        max_block = self._max_block
        if size > max_block:
            raise CodecError(f"Block size {size} exceeded max: {max_block}")
        if pos + size > end:
            raise CodecError("Stream ended prematurely")
        block = buf[pos : pos + size]
        pos += size
        if self._block_checksum:
            if pos + 4 > end:
                raise CodecError("Stream ended prematurely")
            if _U32LE.unpack_from(buf, pos)[0] != xxh32(bytes(block)):
                raise CodecError("Block checksum mismatch")
            pos += 4
        self._pos = pos
        if stored:
            return bytes(block)
        try:
            # LZ4 expands at most 255x, so a damaged block-size id (up to 4 MiB) cannot size the buffer.
            capacity = min(max_block, 255 * size + 64)
            return lz4.block.decompress(block, uncompressed_size=capacity)
        except lz4.block.LZ4BlockError as exc:
            raise CodecError(f"lz4 block at byte {pos - size} is corrupt: {exc}") from None

    def read(self, n: int) -> bytes:
        parts = []
        while n > 0:
            out, at = self._out, self._out_pos
            if at >= len(out):
                if self._done:
                    break
                self._out, self._out_pos = self._next_block(), 0
                continue
            piece = out[at : at + n] if at or n < len(out) else out
            self._out_pos = at + len(piece)
            parts.append(piece)
            n -= len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)


def open_stream(data: "bytes | memoryview", verify_header_checksum: bool = True) -> Lz4Stream:
    """A reader of a Kafka LZ4 frame's decompressed bytes; bytes after the end mark are ignored, as in Kafka."""
    return Lz4Stream(data, verify_header_checksum)


def decompress(data: "bytes | memoryview", verify_header_checksum: bool = True,
               limit: Optional[int] = None) -> Optional[bytes]:
    """Decompress a Kafka LZ4 frame whole; None as soon as the output passes `limit` bytes."""
    stream = Lz4Stream(data, verify_header_checksum)
    parts = []
    total = 0
    while True:
        block = stream._next_block()
        if stream._done:
            return b"".join(parts)
        total += len(block)
        if limit is not None and total > limit:
            return None
        parts.append(block)


def compress(
    data: "bytes | memoryview", broken_header_checksum: bool = False, level: Optional[int] = None
) -> bytes:
    """A Kafka LZ4 frame: 64 KiB independent blocks, no checksums, stored blocks when not smaller."""
    import lz4.block

    level = 9 if level is None else level
    if not 1 <= level <= 17:
        raise CodecError(f"lz4 compression level must be 1..17, not {level}")
    header = bytearray(_U32LE.pack(MAGIC))
    header += bytes((_KAFKA_FLG, _KAFKA_BD))
    header.append(_header_checksum(bytes(header), 4, 6, broken=broken_header_checksum))
    parts = [bytes(header)]
    src = memoryview(data)
    for start in range(0, len(src), _KAFKA_BLOCK_SIZE):
        chunk = bytes(src[start : start + _KAFKA_BLOCK_SIZE])
        # Kafka's level 9 is lz4-java's fast compressor; other levels its HC compressor.
        if level == 9:
            packed = lz4.block.compress(chunk, mode="default", store_size=False)
        else:
            packed = lz4.block.compress(chunk, mode="high_compression", compression=level, store_size=False)
        if len(packed) >= len(chunk):
            parts.append(_U32LE.pack(len(chunk) | _UNCOMPRESSED_BIT))
            parts.append(chunk)
        else:
            parts.append(_U32LE.pack(len(packed)))
            parts.append(packed)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)
