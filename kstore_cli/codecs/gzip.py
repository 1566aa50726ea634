"""gzip as Kafka writes it (java.util.zip.GZIPOutputStream) and reads it (any gzip member)."""

from __future__ import annotations

import zlib
from typing import Optional

from kstore_cli.errors import CodecError

# The JDK's minimal RFC 1952 header: no name, mtime 0, XFL 0, OS 0xff (JDK 16+).
_JDK_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def decompress(data: "bytes | memoryview", limit: Optional[int] = None) -> Optional[bytes]:
    """Decompress one or more concatenated gzip members (GZIPInputStream accepts both); None as soon as
    the output would pass `limit` bytes (the caller streams instead)."""
    out = []
    remaining = data
    room = -1 if limit is None else limit + 1
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        piece = d.decompress(remaining, room) if room > 0 else d.decompress(remaining)
        if limit is not None:
            room -= len(piece)
            if room <= 0:
                return None
        out.append(piece)
        if not d.eof:
            raise CodecError("gzip stream ended prematurely (Unexpected end of ZLIB input stream)")
        remaining = d.unused_data
        # GZIPInputStream stops at anything that is not another gzip member.
        if len(remaining) < 2 or remaining[:2] != b"\x1f\x8b":
            return b"".join(out)


class GzipStream:
    """Concatenated gzip members, decompressed n bytes at a time (zlib's max_length bounds each step)."""

    __slots__ = ("_d", "_in", "_done")

    def __init__(self, data: "bytes | memoryview") -> None:
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._in = data
        self._done = False

    def read(self, n: int) -> bytes:
        if self._done or n <= 0:
            return b""
        d = self._d
        while True:
            out = d.decompress(self._in, n)
            self._in = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data
                # GZIPInputStream stops at anything that is not another gzip member.
                if len(rest) >= 2 and rest[:2] == b"\x1f\x8b":
                    self._d = d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    self._in = rest
                else:
                    self._done = True
                if out or self._done:
                    return out
                continue
            if out:
                return out
            if not self._in:
                raise CodecError("gzip stream ended prematurely (Unexpected end of ZLIB input stream)")


def open_stream(data: "bytes | memoryview") -> GzipStream:
    """A reader of the decompressed bytes of one or more gzip members."""
    return GzipStream(data)


def compress(data: "bytes | memoryview", level: Optional[int] = None) -> bytes:
    """A gzip member framed like the JDK's GZIPOutputStream output."""
    if level is None or level == -1:
        level = 6
    if not 1 <= level <= 9:
        raise CodecError(f"gzip compression level must be 1..9 or -1, not {level}")
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = c.compress(bytes(data)) + c.flush()
    crc = zlib.crc32(data) & 0xFFFFFFFF
    return _JDK_HEADER + body + crc.to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little")
