"""Decompression bombs: small compressed batches whose records inflate to ~1 GiB, written without ever
holding the inflated bytes (the generators stream, or repeat one compressed piece)."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from kstore_cli.codecs import GZIP, LZ4, ZSTD
from kstore_cli.codecs import lz4 as lz4_codec
from kstore_cli.record.builder import write_varint, write_varlong
from kstore_cli.record.crc import crc32c

GiB = 1 << 30
MiB = 1 << 20
TS0 = 1_700_000_000_000
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")


def record_prefix(offset_delta: int, value_size: int, key: Optional[bytes] = b"k") -> bytes:
    """A v2 record's bytes up to its value (length varint included), the value being `value_size` zeros
    followed by a header count of 0."""
    body = bytearray(b"\x00")  # attributes
    write_varlong(0, body)  # timestamp delta
    write_varint(offset_delta, body)
    if key is None:
        write_varint(-1, body)
    else:
        write_varint(len(key), body)
        body += key
    write_varint(value_size, body)
    length = len(body) + value_size + 1  # + the header count varint (0)
    out = bytearray()
    write_varint(length, out)
    return bytes(out + body)


def plain_pieces(records: int, value_size: int) -> Iterator[bytes]:
    """The uncompressed records section, in pieces of at most ~1 MiB (values of zeros)."""
    zeros = bytes(min(value_size, MiB))
    for i in range(records):
        yield record_prefix(i, value_size)
        left = value_size
        while left:
            n = min(left, len(zeros))
            yield zeros if n == len(zeros) else zeros[:n]
            left -= n
        yield b"\x00"  # no headers


def compress_stream(codec: int, pieces: Iterator[bytes]) -> bytes:
    """The records section compressed as Kafka frames it for `codec`, fed piece by piece."""
    if codec == ZSTD:
        import zstandard

        c = zstandard.ZstdCompressor(level=3).compressobj()
        return b"".join([c.compress(p) for p in pieces] + [c.flush()])
    if codec == GZIP:
        # Concatenated gzip members (GZIPInputStream reads them as one stream); a repeated zero piece
        # compresses once, so 1 GiB costs milliseconds.
        cache = {}
        out = []
        for p in pieces:
            member = cache.get(p) if len(p) == MiB else None
            if member is None:
                member = _gzip_member(p)
                if len(p) == MiB:
                    cache[p] = member
            out.append(member)
        return b"".join(out)
    if codec == LZ4:
        # Kafka's frame with 4 MiB blocks (block size id 7), each piece its own block.
        import lz4.block

        flg, bd = 0x60, 0x70
        header = bytearray(struct.pack("<I", lz4_codec.MAGIC)) + bytes((flg, bd))
        header.append((lz4_codec.xxh32(bytes(header[4:6])) >> 8) & 0xFF)
        out = [bytes(header)]
        cache = {}
        for p in pieces:
            block = cache.get(p) if len(p) == MiB else None
            if block is None:
                block = lz4.block.compress(p, store_size=False)
                if len(p) == MiB:
                    cache[p] = block
            out.append(struct.pack("<I", len(block)) + block)
        out.append(b"\x00\x00\x00\x00")
        return b"".join(out)
    raise ValueError(codec)


def _gzip_member(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = c.compress(data) + c.flush()
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + struct.pack("<I", zlib.crc32(data))
            + struct.pack("<I", len(data) & 0xFFFFFFFF))


def v2_batch(codec: int, compressed: bytes, records: int, base_offset: int = 0) -> bytes:
    """A v2 batch around an already-compressed records section (valid CRC)."""
    header = bytearray(_V2_HEADER.pack(base_offset, 49 + len(compressed), 0, 2, 0, codec, records - 1,
                                       TS0, TS0, -1, -1, -1, records))
    body = bytes(header[21:]) + compressed
    struct.pack_into(">I", header, 17, crc32c(body))
    return bytes(header) + compressed


def legacy_gzip_wrapper(inner_value_size: int, offset: int = 0) -> bytes:
    """A magic 1 gzip wrapper whose one inner message has a value of `inner_value_size` zeros."""
    inner_msg_len = 4 + 1 + 1 + 8 + 4 + 4 + inner_value_size
    prefix = struct.pack(">qi", 0, inner_msg_len) + struct.pack(">IbbqiI", 0, 1, 0, TS0, -1, inner_value_size)

    def pieces() -> Iterator[bytes]:
        yield prefix
        left = inner_value_size
        zeros = bytes(MiB)
        while left:
            n = min(left, MiB)
            yield zeros if n == MiB else zeros[:n]
            left -= n

    value = compress_stream(GZIP, pieces())
    msg = struct.pack(">bbqi", 1, GZIP, TS0, -1) + struct.pack(">i", len(value)) + value
    crc = zlib.crc32(msg) & 0xFFFFFFFF
    msg = struct.pack(">I", crc) + msg
    return struct.pack(">qi", offset, len(msg)) + msg


def write_partition(root: Path, name: str, batches: List[bytes], next_offset: Optional[int] = None) -> Path:
    """A partition dir holding a segment of `batches` at base offset 0 with empty index files (as a
    broker leaves a segment it has not indexed yet); with `next_offset`, an active segment after it
    holding one small uncompressed record, so the first one is cleanable."""
    from kstore_cli.record.builder import RecordSpec, build_v2_batch

    part = root / name
    part.mkdir(parents=True)
    segments = [(0, b"".join(batches))]
    if next_offset is not None:
        segments.append((next_offset, build_v2_batch([RecordSpec(next_offset, TS0, b"k", b"v")])))
    for base, data in segments:
        (part / f"{base:020d}.log").write_bytes(data)
        (part / f"{base:020d}.index").write_bytes(b"")
        (part / f"{base:020d}.timeindex").write_bytes(b"")
    return part


def one_record_bomb(codec: int, value_size: int = GiB) -> bytes:
    """A one-record batch whose value inflates to `value_size` bytes."""
    return v2_batch(codec, compress_stream(codec, plain_pieces(1, value_size)), 1)


def many_records_bomb(codec: int, records: int, value_size: int) -> bytes:
    """One batch of `records` records of `value_size` bytes each."""
    return v2_batch(codec, compress_stream(codec, plain_pieces(records, value_size)), records)
