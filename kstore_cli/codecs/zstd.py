"""zstd: standard Zstandard frames, as zstd-jni's streams write and read them."""

from __future__ import annotations

from typing import Optional


def decompress(data: "bytes | memoryview") -> bytes:
    """Decompress one or more zstd frames (frames need not carry their content size)."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    chunks = []
    while True:
        chunk = reader.read(1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def compress(data: "bytes | memoryview", level: Optional[int] = None) -> bytes:
    """One zstd frame at Kafka's default level 3 unless told otherwise."""
    import zstandard

    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(bytes(data))
