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

from kstore_cli.errors import CodecError

MAGIC = b"\x82SNAPPY\x00"
HEADER = struct.Struct(">8sii")  # magic, version, compatible version
BLOCK_LENGTH = struct.Struct(">i")
_MAGIC_AS_LENGTH = 0x82534E41  # first 4 magic bytes read as a block length: a concatenated stream
BLOCK_SIZE = 32 * 1024


def decompress(data: "bytes | memoryview") -> bytes:
    """Decompress xerial-framed (or raw) snappy bytes."""
    import snappy  # python-snappy

    buf = memoryview(data)
    if len(buf) < HEADER.size or bytes(buf[:8]) != MAGIC:
        return snappy.uncompress(bytes(buf))
    out = []
    pos = HEADER.size
    end = len(buf)
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
            raise CodecError(
                f"snappy block at byte {pos - 4} needs {length} bytes but only {end - pos} remain"
            )
        out.append(snappy.uncompress(bytes(buf[pos : pos + length])))
        pos += length
    return b"".join(out)


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
