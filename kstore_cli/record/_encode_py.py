"""The pure-Python twin of the record encoder (the C twin is ``_encode_c``; pick through :mod:`.encode`).

The encoder writes records without a Python object per record: its input is a *record table*,
columns over the buffer the records were decoded from, and its output is appended to a
``bytearray`` (the body of the batch being built). A record table is the tuple::

    (n, data, offsets, timestamps, spans, header_ends, header_spans)

``data`` is the buffer holding the keys, values and header bytes; ``offsets`` and ``timestamps``
hold n native int64 each; ``spans`` 4n native int64, per record ``key_pos, key_len, value_pos,
value_len`` into data (length -1: null); ``header_ends`` n native int64, the running header count
after each record (empty: no record has headers); ``header_spans`` 4 native int64 per header
(``key_pos, key_len, value_pos, value_len``, value length -1: null). Every buffer field may be any
object with the buffer protocol (the twins return different types; their bytes are equal).

Offsets and timestamps are Java longs: sums wrap at 64 bits, as in Kafka's iterators.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import List, Optional, Sequence, Tuple

from kstore_cli.codecs import GZIP
from kstore_cli.errors import InvalidRecordError, KstoreError
from kstore_cli.java import MAX_INT32, java_long
from kstore_cli.record._decode_common import V2Record
from kstore_cli.record.wire import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V0,
    V2_CRC_POS,
    V2_CRC_START,
    V2_HEADER,
    encode_uvarint,
)
from kstore_cli.record._decode_py import decode_legacy_message
from kstore_cli.record.crc import crc32, crc32c

#: Size estimates for grouping (DefaultRecord.MAX_RECORD_OVERHEAD; log overhead + RECORD_OVERHEAD_V1).
V2_RECORD_OVERHEAD = 21
LEGACY_RECORD_OVERHEAD = 34
V2_HEADER_OVERHEAD = 10

RecordTable = Tuple[int, object, object, object, object, object, object]


def legacy_table(data: "bytes | memoryview", wrapper_magic: int, wrapper_offset: int,
                 log_append_time: Optional[int]) -> RecordTable:
    """The inner messages of a decompressed legacy wrapper as a record table.

    Same walk, checks and errors as ``decode.build_legacy_records`` (offsets made absolute,
    timestamps -1 for magic 0 messages and the wrapper's under LogAppendTime); no headers.
    """
    offsets = array("q")
    timestamps = array("q")
    spans = array("q")
    pos = 0
    end = len(data)
    while True:
        entry = decode_legacy_message(data, pos, end)
        if entry is None:
            break  # a truncated trailing inner entry ends the iteration silently
        offset, size, _crc, magic, attributes, timestamp, kp, kl, vp, vl, _msg = entry
        if attributes & 0x07:
            raise InvalidRecordError("Inner messages must not be compressed")
        offsets.append(offset)
        if magic == 0:
            timestamp = -1
        elif log_append_time is not None:
            timestamp = log_append_time
        timestamps.append(timestamp)
        spans.extend((kp, kl, vp, vl))
        pos += size
    if not offsets:
        raise InvalidRecordError("Found invalid compressed record set with no inner records")
    if wrapper_magic > 0:
        last_inner = offsets[-1]
        if wrapper_offset != 0:  # some librdkafka versions send wrapper offset 0: offsets kept
            if wrapper_offset < last_inner:
                raise InvalidRecordError(
                    "Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                    f"'{wrapper_offset}' is less than the last inner message offset '{last_inner}' and it is not zero."
                )
            base = java_long(wrapper_offset - last_inner)
            offsets = array("q", (java_long(base + o) for o in offsets))
    return len(offsets), data, offsets, timestamps, spans, array("q"), array("q")


def _strict_utf8_chars(data: "bytes | memoryview") -> int:
    """Characters of strict UTF-8 data, or -1 when it is not strict UTF-8."""
    try:
        return len(bytes(data).decode("utf-8"))
    except UnicodeDecodeError:
        return -1


def v2_table(data: "bytes | memoryview", records: Sequence[V2Record], base_offset: int, base_timestamp: int,
             log_append_time: Optional[int]) -> Optional[RecordTable]:
    """A record table from ``decode.decode_v2_records``' output over data (offsets and timestamps as
    ``decode.build_v2_records`` gives them), or None when a header key is not strict UTF-8 (Kafka
    re-encodes such a key with replacement characters: the caller takes the record path)."""
    offsets = array("q")
    timestamps = array("q")
    spans = array("q")
    header_ends = array("q")
    header_spans = array("q")
    headers_seen = 0
    for offset_delta, ts_delta, _size, kp, kl, vp, vl, headers in records:
        offsets.append(java_long(base_offset + offset_delta))
        timestamps.append(log_append_time if log_append_time is not None else java_long(base_timestamp + ts_delta))
        spans.extend((kp, kl, vp, vl))
        for hkp, hkl, hvp, hvl in headers:
            if _strict_utf8_chars(data[hkp : hkp + hkl]) < 0:
                return None
            header_spans.extend((hkp, hkl, hvp, hvl))
        headers_seen += len(headers)
        header_ends.append(headers_seen)
    if not headers_seen:
        header_ends = array("q")
    return len(offsets), data, offsets, timestamps, spans, header_ends, header_spans


def _record_size(table: RecordTable, i: int, to_magic: int) -> int:
    """convert's size estimate of record i (key + value + overhead, v2 headers at 10 bytes each + key
    characters + value bytes)."""
    _n, data, _o, _t, spans, header_ends, header_spans = table
    kl, vl = spans[4 * i + 1], spans[4 * i + 3]
    size = max(kl, 0) + max(vl, 0)
    if to_magic < 2:
        return size + LEGACY_RECORD_OVERHEAD
    if len(header_ends):
        for h in range(header_ends[i - 1] if i else 0, header_ends[i]):
            hkp, hkl, _hvp, hvl = header_spans[4 * h : 4 * h + 4]
            size += _strict_utf8_chars(data[hkp : hkp + hkl]) + max(hvl, 0) + V2_HEADER_OVERHEAD
    return size + V2_RECORD_OVERHEAD


def fit(table: RecordTable, start: int, to_magic: int, size: int, limit: int, group_base: int,
        take_first: bool) -> Tuple[int, int]:
    """How many records from `start` join a group of estimated `size` bytes: (stop, new size).

    Record i joins while ``size + its size <= limit`` and ``offset - group_base <= 2**31 - 1``;
    with take_first the record at start joins whatever its size (a group's first record).
    """
    table = _as_arrays(table)
    n, offsets, spans, header_ends = table[0], table[2], table[4], table[5]
    if not 0 <= start <= n:
        raise ValueError(f"start {start} out of the table")
    simple = to_magic < 2 or not len(header_ends)
    overhead = LEGACY_RECORD_OVERHEAD if to_magic < 2 else V2_RECORD_OVERHEAD
    i = start
    while i < n:
        if simple:
            kl, vl = spans[4 * i + 1], spans[4 * i + 3]
            s = (kl if kl > 0 else 0) + (vl if vl > 0 else 0) + overhead
        else:
            s = _record_size(table, i, to_magic)
        if not (take_first and i == start) and (size + s > limit or offsets[i] - group_base > MAX_INT32):
            break
        size += s
        i += 1
    return i, size


def table_size(table: RecordTable, to_magic: int) -> int:
    """The size estimate of all the table's records (see :func:`fit`)."""
    table = _as_arrays(table)
    return sum(_record_size(table, i, to_magic) for i in range(table[0]))


def _as_arrays(table: RecordTable) -> RecordTable:
    n, data, offsets, timestamps, spans, header_ends, header_spans = table
    return (n, data, _q(offsets), _q(timestamps), _q(spans), _q(header_ends), _q(header_spans))


def _q(buf) -> "array | memoryview":
    return buf if isinstance(buf, array) else memoryview(buf).cast("B").cast("q")


#: Every one- and two-byte varint (filled on the first encode_v2): lengths and deltas are nearly
#: always among them.
_VARINTS: List[bytes] = []


def _varint(n: int) -> bytes:
    """A zigzag varint of the int (int)n (the low 32 bits of the zigzag, as ByteUtils.writeVarint)."""
    u = ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF  # wire.zigzag32, inline: once per field of every record
    return _VARINTS[u] if u < 16384 else encode_uvarint(u)


def _varlong(n: int) -> bytes:
    if not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
        n = java_long(n)
    u = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF  # wire.zigzag64, inline (java_long only when needed)
    return _VARINTS[u] if u < 16384 else encode_uvarint(u)


def encode_v2(out: bytearray, table: RecordTable, start: int, stop: int, base_offset: int,
              base_timestamp: int) -> int:
    """Append records [start, stop) as DefaultRecords (length prefix, attributes 0, timestamp delta
    from base_timestamp, offset delta from base_offset, key, value, headers) to out; returns the
    largest timestamp among them (callers pass start < stop)."""
    n, data, offsets, timestamps, spans, header_ends, header_spans = _as_arrays(table)
    if not 0 <= start < stop <= n:
        raise ValueError("record range out of the table")
    if not _VARINTS:
        _VARINTS.extend(encode_uvarint(u) for u in range(1 << 14))
    mv = memoryview(data).cast("B")
    max_ts = timestamps[start]
    null = _varint(-1)
    for i in range(start, stop):
        ts = timestamps[i]
        if ts > max_ts:
            max_ts = ts
        kp, kl, vp, vl = spans[4 * i : 4 * i + 4]
        parts = [b"\x00", _varlong(ts - base_timestamp), _varint(offsets[i] - base_offset),
                 null if kl < 0 else _varint(kl), mv[kp : kp + kl] if kl > 0 else b"",
                 null if vl < 0 else _varint(vl), mv[vp : vp + vl] if vl > 0 else b""]
        if len(header_ends):
            first = header_ends[i - 1] if i else 0
            parts.append(_varint(header_ends[i] - first))
            for h in range(first, header_ends[i]):
                hkp, hkl, hvp, hvl = header_spans[4 * h : 4 * h + 4]
                parts += (_varint(hkl), mv[hkp : hkp + hkl] if hkl > 0 else b"",
                          null if hvl < 0 else _varint(hvl), mv[hvp : hvp + hvl] if hvl > 0 else b"")
        else:
            parts.append(b"\x00")
        body = b"".join(parts)
        out += _varint(len(body))
        out += body
    return max_ts


def encode_legacy(out: bytearray, table: RecordTable, start: int, stop: int, magic: int, attributes: int,
                  offset_base: int, timestamp: Optional[int]) -> int:
    """Append records [start, stop) as legacy log entries (offset, size, CRC-32, magic, attributes,
    [timestamp], key, value) to out; entry offsets are ``offset - offset_base``, timestamps (magic 1)
    `timestamp` when given, else the record's. Returns the largest record timestamp among them."""
    if magic not in (0, 1):
        raise ValueError(f"legacy messages are magic 0 or 1, not {magic}")
    n, data, offsets, timestamps, spans, _he, _hs = _as_arrays(table)
    if not 0 <= start < stop <= n:
        raise ValueError("record range out of the table")
    mv = memoryview(data).cast("B")
    max_ts = timestamps[start]
    for i in range(start, stop):
        ts = timestamps[i]
        if ts > max_ts:
            max_ts = ts
        kp, kl, vp, vl = spans[4 * i : 4 * i + 4]
        msg = bytearray(struct.pack(">bb", magic, attributes))
        if magic == 1:
            msg += struct.pack(">q", ts if timestamp is None else timestamp)
        for p, ln in ((kp, kl), (vp, vl)):
            msg += struct.pack(">i", -1 if ln < 0 else ln)
            if ln >= 0:
                msg += mv[p : p + ln]
        out += struct.pack(">qiI", java_long(offsets[i] - offset_base), len(msg) + 4, crc32(msg))
        out += msg
    return max_ts


def add_v2(out: bytearray, table: RecordTable, start: int, base_offset: int, base_timestamp: int, size: int,
           limit: int, take_first: bool) -> Tuple[int, int, Optional[int], Optional[int]]:
    """:func:`fit` (to magic 2, group base = base_offset), then :func:`encode_v2` of the records that
    fit: (stop, new size, their largest timestamp, the last one's offset; both None when none fit)."""
    stop, size = fit(table, start, 2, size, limit, base_offset, take_first)
    if stop == start:
        return stop, size, None, None
    max_ts = encode_v2(out, table, start, stop, base_offset, base_timestamp)
    return stop, size, max_ts, _as_arrays(table)[2][stop - 1]


def add_legacy(out: bytearray, table: RecordTable, start: int, magic: int, attributes: int, offset_base: int,
               timestamp: Optional[int], group_base: int, size: int, limit: int,
               take_first: bool) -> Tuple[int, int, Optional[int], Optional[int]]:
    """:func:`fit` (to `magic`), then :func:`encode_legacy` of the records that fit; as :func:`add_v2`."""
    stop, size = fit(table, start, magic, size, limit, group_base, take_first)
    if stop == start:
        return stop, size, None, None
    max_ts = encode_legacy(out, table, start, stop, magic, attributes, offset_base, timestamp)
    return stop, size, max_ts, _as_arrays(table)[2][stop - 1]


#: Why :func:`legacy_to_v2` returned: at a batch it does not take, or the end (the caller goes on the
#: regular way from the position returned); the group is full (the carry starts the next one); the
#: wrapper at the position needs a group of its own timestamp type or append time.
RUN_STOP = 0
RUN_FULL = 1
RUN_KEY = 2

_CREATE_TIME = 0  # batch.CREATE_TIME and LOG_APPEND_TIME (batch imports this module through encode)
_LOG_APPEND_TIME = 1
_WRAPPER_HEAD = struct.Struct(">qiI")  # offset, size, crc


def _take_wrapper(buf: memoryview, pos: int, end: int, max_inflate: int) -> Optional[tuple]:
    """The legacy entry at pos as (table, entry size, offset, codec, timestamp type, append time or None), or
    None when it is not the plain case: anything but a complete magic 0/1 entry with a good CRC,
    uncompressed or one gzip member inflating to at most max_inflate bytes, with sound inner messages.
    (What None leaves, the regular path reads: it raises what is wrong, or converts what is unusual.)"""
    if end - pos < HEADER_SIZE_UP_TO_MAGIC:
        return None
    offset, size, crc = _WRAPPER_HEAD.unpack_from(buf, pos)
    total = LOG_OVERHEAD + size
    if size < RECORD_OVERHEAD_V0 or total > end - pos or buf[pos + MAGIC_OFFSET] > 1 or offset < 0:
        return None  # (a negative offset: Kafka rejects it, and the regular path refuses it)
    if crc32(buf[pos + 16 : pos + total]) != crc:
        return None
    try:
        entry = decode_legacy_message(buf, pos, pos + total)
    except KstoreError:
        return None
    if entry is None:
        return None
    _, _, _, magic, attributes, timestamp, kp, kl, vp, vl, _ = entry
    lat = timestamp if magic > 0 and attributes & 0x08 else None
    ts_type = _CREATE_TIME if lat is None else _LOG_APPEND_TIME
    codec = attributes & 0x07
    if codec == 0:
        table = (1, buf, array("q", (offset,)), array("q", (timestamp,)), array("q", (kp, kl, vp, vl)),
                 array("q"), array("q"))
    elif codec == GZIP and vl >= 0:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = d.decompress(buf[vp : vp + vl], max_inflate + 1)
        except zlib.error:
            return None
        if not d.eof or d.unused_data or len(data) > max_inflate:
            return None
        try:
            table = legacy_table(data, magic, offset, lat)
        except KstoreError:
            return None
    else:
        return None
    return table, total, offset, codec, ts_type, lat


def legacy_to_v2(buf: "bytes | memoryview", pos: int, end: int, max_inflate: int, out: bytearray,
                 group: Optional[tuple], limit: int, fresh_size: int, carry: Optional[tuple], by_codec: bool) -> tuple:
    """Legacy entries of buf[pos:end] (magic 0/1, uncompressed or gzip) into the v2 records of one
    group, in one call: convert-format's fast path, the regular path's result without its objects.

    `group`: the pending group ``(codec, timestamp_type, log_append_time, base_offset, base_timestamp,
    size)`` or None (the first record taken opens one, with `fresh_size`); records join it by
    :func:`add_v2` with `limit`. A wrapper joins a group of its timestamp type and append time, and
    with `by_codec` of its codec (the output keeps the source's codec). `carry`: ``(table, start,
    codec, timestamp_type, log_append_time)``, records left over when the last call filled its group
    (then `group` is None). Returns ``(reason, pos, wrappers,
    bytes, records, last wrapper offset, group, records added, their max timestamp, their last
    offset, carry)``: :data:`RUN_STOP` at pos (an entry :func:`_take_wrapper` does not take, or the
    end), :data:`RUN_FULL` (carry set), :data:`RUN_KEY` (pos at a wrapper needing another group).
    """
    if carry is not None and group is not None:
        raise ValueError("a carry starts a new group")
    buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    end = min(end, len(buf))
    wrappers = taken_bytes = records = added = 0
    last_wrapper = max_ts = last = None
    reason = RUN_STOP
    while True:
        if carry is None:
            taken = _take_wrapper(buf, pos, end, max_inflate)
            if taken is None:
                break
            table, size, offset, codec, ts_type, lat = taken
            if group is not None and (group[1] != ts_type or group[2] != lat or (by_codec and group[0] != codec)):
                reason = RUN_KEY
                break
            pos += size
            wrappers += 1
            taken_bytes += size
            records += table[0]
            last_wrapper = offset
            start = 0
        else:
            table, start, codec, ts_type, lat = carry
            carry = None
        fresh = group is None
        if fresh:
            t = _as_arrays(table)
            group = (codec, ts_type, lat, t[2][start], t[3][start], fresh_size)
        stop, size, m, l = add_v2(out, table, start, group[3], group[4], group[5], limit, fresh)
        group = group[:5] + (size,)
        if stop > start:
            added += stop - start
            max_ts = m if max_ts is None else max(max_ts, m)
            last = l
        if stop < table[0]:
            carry = (table, stop, codec, ts_type, lat)
            reason = RUN_FULL
            break
    return reason, pos, wrappers, taken_bytes, records, last_wrapper, group, added, max_ts, last, carry


def v2_frames(bodies: Sequence["bytes | bytearray | memoryview"], headers: Sequence[tuple]) -> bytes:
    """Magic v2 batches around `bodies` (records, compressed or not), one after the other: header and
    CRC-32C, as ``builder.build_v2_batch`` lays them out. A header is ``(base_offset, last_offset_delta,
    attributes, base_timestamp, max_timestamp, partition_leader_epoch, producer_id, producer_epoch,
    base_sequence, count)``."""
    if len(bodies) != len(headers):
        raise ValueError("a header per body")
    out = bytearray()
    for body, (base_offset, delta, attributes, base_ts, max_ts, epoch, pid, pepoch, seq, count) in zip(bodies, headers):
        start = len(out)
        out += V2_HEADER.pack(base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body), epoch, 2, 0, attributes,
                              delta, base_ts, max_ts, pid, pepoch, seq, count)
        out += body
        struct.pack_into(">I", out, start + V2_CRC_POS, crc32c(memoryview(out)[start + V2_CRC_START:]))
    return bytes(out)


__all__ = ["v2_frames", "legacy_to_v2", "RUN_STOP", "RUN_FULL", "RUN_KEY", "add_v2", "add_legacy", "legacy_table",
           "v2_table", "fit", "table_size", "encode_v2", "encode_legacy", "LOG_OVERHEAD", "RECORD_OVERHEAD_V0"]
