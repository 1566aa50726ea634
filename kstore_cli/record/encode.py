"""The write path's public face: the record encoder, native when built, else pure Python.

Chosen once, at import, by the same policy as :mod:`.decode` (``KSTORE_DECODER=python`` forces
the pure-Python twin, ``=native`` insists on the extension); :data:`BACKEND` names it.

* ``"native"``: the C extension :mod:`kstore_cli.record._encode_c`;
* ``"python"``: the pure-Python twin :mod:`kstore_cli.record._encode_py` (the reference: what each
  function returns, and the record table's layout, are documented there).

Records travel as record tables (columns over the buffer they were decoded from) and are written
straight into a batch body: no Python object per record. Batch headers and compression are per
batch (:func:`v2_frames` and :func:`v2_batch` here, the codecs in :mod:`kstore_cli.codecs`).
"""

from __future__ import annotations

import struct
from array import array
from typing import Sequence

from kstore_cli.record import _encode_py
from kstore_cli.record.decode import choose_twin


def _load():
    return choose_twin(_encode_py, "_encode_c", "the native record encoder")


_impl, BACKEND = _load()

legacy_table = _impl.legacy_table
v2_table = _impl.v2_table
fit = _impl.fit
table_size = _impl.table_size
encode_v2 = _impl.encode_v2
encode_legacy = _impl.encode_legacy
add_v2 = _impl.add_v2
add_legacy = _impl.add_legacy
legacy_to_v2 = _impl.legacy_to_v2
v2_frames = _impl.v2_frames
RUN_STOP, RUN_FULL, RUN_KEY = _encode_py.RUN_STOP, _encode_py.RUN_FULL, _encode_py.RUN_KEY

_Q = struct.Struct("=q")


def table_offset(table: tuple, i: int) -> int:
    """Record i's offset."""
    return _Q.unpack_from(table[2], 8 * i)[0]


def table_timestamp(table: tuple, i: int) -> int:
    """Record i's timestamp."""
    return _Q.unpack_from(table[3], 8 * i)[0]


def single_table(data: "bytes | memoryview", offset: int, timestamp: int, key_pos: int, key_len: int,
                 value_pos: int, value_len: int) -> tuple:
    """A table of one record (an uncompressed legacy message) over data."""
    q = struct.Struct("=qqqqqq")
    packed = q.pack(offset, timestamp, key_pos, key_len, value_pos, value_len)
    return 1, data, packed[:8], packed[8:16], packed[16:], b"", b""


def records_with_headers(table: tuple) -> int:
    """How many of the table's records have headers."""
    ends = memoryview(table[5]).cast("B").cast("q")
    return sum(1 for i in range(len(ends)) if ends[i] > (ends[i - 1] if i else 0))


def timestamps_set(table: tuple) -> int:
    """How many of the table's records have a timestamp (>= 0)."""
    return sum(1 for ts in memoryview(table[3]).cast("B").cast("q") if ts >= 0)


def spec_table(records: Sequence) -> tuple:
    """A table over a new buffer from objects with ``offset, timestamp, key, value, headers`` (builder's
    RecordSpec, or batch.Record; headers as (key, value) pairs or batch.Header; header keys as text
    are written UTF-8 encoded, as Kafka writes a header's String key)."""
    data = bytearray()
    offsets, timestamps, spans, header_ends, header_spans = (array("q") for _ in range(5))

    def put(b) -> None:
        if b is None:
            spans_or_headers.extend((len(data), -1))
        else:
            spans_or_headers.extend((len(data), len(b)))
            data.extend(b)

    seen = 0
    for r in records:
        offsets.append(r.offset)
        timestamps.append(r.timestamp)
        spans_or_headers = spans
        put(r.key)
        put(r.value)
        spans_or_headers = header_spans
        for h in r.headers:
            hkey, hvalue = h if isinstance(h, tuple) else (h.key, h.value)
            put(hkey if isinstance(hkey, (bytes, bytearray)) else hkey.encode("utf-8"))
            put(hvalue)
        seen += len(r.headers)
        header_ends.append(seen)
    if not seen:
        header_ends = array("q")
    return len(offsets), bytes(data), offsets, timestamps, spans, header_ends, header_spans


def v2_batch(body: "bytes | bytearray", count: int, *, base_offset: int, last_offset_delta: int, attributes: int,
             base_timestamp: int, max_timestamp: int, partition_leader_epoch: int = -1, producer_id: int = -1,
             producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A magic v2 batch around `body` (its records, compressed or not): header and CRC-32C, as
    ``builder.build_v2_batch`` lays them out (:func:`v2_frames` of one)."""
    return v2_frames([body], [(base_offset, last_offset_delta, attributes, base_timestamp, max_timestamp,
                               partition_leader_epoch, producer_id, producer_epoch, base_sequence, count)])


__all__ = ["BACKEND", "v2_frames", "add_v2", "add_legacy", "legacy_to_v2", "RUN_STOP", "RUN_FULL", "RUN_KEY",
           "legacy_table", "v2_table", "fit", "table_size", "encode_v2", "encode_legacy", "table_offset",
           "table_timestamp", "single_table", "records_with_headers", "timestamps_set", "spec_table", "v2_batch"]
