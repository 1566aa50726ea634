"""The cleaner's per-record work, native when built, else pure Python (the way :mod:`.decode` picks).

The backend is chosen once, at import, and named by :data:`BACKEND`:

* ``"native"``: the C extension :mod:`kstore_cli.record._cleaner_c`: the offset map (Kafka's
  SkimpyOffsetMap) and runs of plain data batches mapped and filtered without a Python object per
  record (MemoryRecords.filterTo, retained records written straight into the output);
* ``"python"``: the pure-Python twin :mod:`kstore_cli.record._cleaner_py`, whose runs take no
  batch: the cleaner's per-batch path does every one (today's reference).

``KSTORE_DECODER`` picks it like the record decoder: ``python`` forces the twin, ``native`` insists
on the extension. Both give the same map answers and the same bytes (tests/cleaner/test_cleaner_twins.py).
"""

from __future__ import annotations

from array import array
from typing import Optional

from kstore_cli.codecs import get_codec
from kstore_cli.errors import KstoreError
from kstore_cli.record import _cleaner_py
from kstore_cli.record._cleaner_py import (  # noqa: F401 - the run interface's constants
    F_BATCHES_READ,
    F_BATCHES_REBUILT,
    F_BATCHES_WRITTEN,
    F_BYTES_READ,
    F_FIRST_OFFSET,
    F_HAS_FIRST,
    F_INVALID_MESSAGES,
    F_LAST_OFFSET,
    F_MARKERS_REMOVED,
    F_MAX_OFFSET,
    F_MAX_TIMESTAMP,
    F_MESSAGES_READ,
    F_MESSAGES_WRITTEN,
    F_OFFSET_OF_MAX_TIMESTAMP,
    F_TOMBSTONES_REMOVED,
    FILTER_SLOTS,
    M_LAST_OFFSET,
    M_MESSAGES_READ,
    M_STOP_OFFSET,
    MAP_SLOTS,
    RUN_DONE,
    RUN_MAP_FULL,
    RUN_OUTPUT_FULL,
    RUN_PYTHON,
)
from kstore_cli.record.decode import choose_twin
from kstore_cli.record.recstream import WHOLE_BATCH_BYTES

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: A state's "no batch taken yet" last offset.
NO_OFFSET = INT64_MIN


def _load():
    return choose_twin(_cleaner_py, "_cleaner_c", "the cleaner's native write path")


_impl, BACKEND = _load()

OffsetMap = _impl.OffsetMap
md5 = _impl.md5
frame_end = _impl.frame_end
skip_anonymous = _impl.skip_anonymous
map_batches = _impl.map_batches
filter_batches = _impl.filter_batches


def fits_int64(*values: int) -> bool:
    return all(INT64_MIN <= v <= INT64_MAX for v in values)


_zstd = None


def _zstd_whole(payload: memoryview) -> Optional[bytes]:
    """The common zstd batch, one frame whose header gives the content size (at most the bound), in
    one library call (the codec's general path goes through a stream reader: twice the time on small
    batches); None for anything else (more frames, a streamed frame), which the general path decides."""
    global _zstd
    try:
        if _zstd is None:
            import zstandard

            _zstd = (zstandard, zstandard.ZstdDecompressor())
        size = _zstd[0].frame_content_size(payload)
        if size < 0 or size > WHOLE_BATCH_BYTES:
            return None  # unknown (a streamed frame) or too large to take whole
        # zstd checks the output against the header's size block by block: no more than one block past it.
        obj = _zstd[1].decompressobj()
        data = obj.decompress(payload)
        return data if obj.eof and not obj.unused_data and len(data) == size else None
    except Exception:  # noqa: BLE001 - no zstandard, or not valid frames: the general path decides
        return None


def decompress(codec_id: int, payload: memoryview) -> Optional[bytes]:
    """A v2 batch's records decompressed as RecordBatch.records() does it, or None for the
    per-batch path (too large to take whole, or a codec error: that path raises it)."""
    if codec_id == 4:
        data = _zstd_whole(payload)
        if data is not None:
            return data
    try:
        data = get_codec(codec_id).decompress_small(payload, 2, WHOLE_BATCH_BYTES)
    except KstoreError:
        return None
    return bytes(data) if isinstance(data, bytearray) else data


def compress(codec_id: int, data: bytes) -> bytes:
    """A rebuilt batch's records compressed as builder.build_v2_batch does."""
    return get_codec(codec_id).compress(data, 2, None)


def map_state() -> array:
    state = array("q", bytes(8 * MAP_SLOTS))
    state[M_LAST_OFFSET] = NO_OFFSET
    return state


def filter_state() -> array:
    state = array("q", bytes(8 * FILTER_SLOTS))
    state[F_MAX_OFFSET] = state[F_MAX_TIMESTAMP] = state[F_OFFSET_OF_MAX_TIMESTAMP] = -1
    state[F_LAST_OFFSET] = NO_OFFSET
    return state


def specials(offsets) -> bytes:
    """The sorted native int64 array of last offsets whose batches a run leaves to Python."""
    return array("q", sorted({o for o in offsets if o is not None and fits_int64(o)})).tobytes()
