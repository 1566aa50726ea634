"""zstd: standard Zstandard frames, as zstd-jni's streams write and read them."""

from __future__ import annotations

import threading
from typing import List, Optional, Sequence

# Per thread: a zstandard (de)compressor object must not be used by two threads at once, and
# convert-format compresses batches on a small thread pool.
_local = threading.local()


def _decompressor() -> object:
    d = getattr(_local, "decompressor", None)
    if d is None:
        import zstandard

        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


def decompress(data: "bytes | memoryview", limit: Optional[int] = None) -> Optional[bytes]:
    """Decompress one or more zstd frames (frames need not carry their content size); None as soon as
    the output passes `limit` bytes."""
    reader = _decompressor().stream_reader(bytes(data), read_across_frames=True)
    chunks = []
    total = 0
    while True:
        chunk = reader.read(1 << 20)
        if not chunk:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        total += len(chunk)
        if limit is not None and total > limit:
            return None
        chunks.append(chunk)


def open_stream(data: "bytes | memoryview") -> object:
    """A reader of the decompressed bytes of one or more zstd frames (zstd's own streaming window)."""
    return _decompressor().stream_reader(data, read_across_frames=True)


def _compressor(level: Optional[int]) -> object:
    level = 3 if level is None else level
    compressors = getattr(_local, "compressors", None)
    if compressors is None:
        compressors = _local.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        import zstandard

        # Built once per level (and thread): making a compressor per batch dominated conversion time.
        compressor = compressors[level] = zstandard.ZstdCompressor(level=level)
    return compressor


def compress(data: "bytes | memoryview", level: Optional[int] = None) -> bytes:
    """One zstd frame at Kafka's default level 3 unless told otherwise."""
    return _compressor(level).compress(bytes(data))


def compress_many(datas: Sequence["bytes | bytearray"], level: Optional[int] = None) -> List[bytes]:
    """compress() of each, the same frames, in one library call where zstandard's C backend has one
    (multi_compress_to_buffer): the GIL is released once for all of them. On a thread beside a busy
    Python thread, a call per batch waited for the GIL after every batch (up to the 5 ms switch interval)."""
    compressor = _compressor(level)
    multi = getattr(compressor, "multi_compress_to_buffer", None)
    if multi is not None and len(datas) > 1:
        try:
            out = multi(datas, threads=0)
        except NotImplementedError:  # the cffi backend
            pass
        else:
            return [out[i].tobytes() for i in range(len(out))]
    return [compressor.compress(bytes(d)) for d in datas]
