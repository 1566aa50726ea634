"""The pure-Python twin of the record decoder (the C twin is ``_decode_c``; pick through :mod:`.decode`).

This module is the one place that walks individual records. It knows nothing
about files, batches objects or commands: it takes a buffer and returns tuples
of numbers and spans, so the native twin replaces it without touching callers.
Both twins return equal values and raise the same classes with the same messages
(tests/record/test_decode_twins.py).

A v2 record (DefaultRecord)::

    length: varint            bytes after this field
    attributes: int8          unused
    timestampDelta: varlong
    offsetDelta: varint
    keyLength: varint         < 0 means null
    key: bytes
    valueLength: varint       < 0 means null
    value: bytes
    headerCount: varint
    headers: (keyLength: varint, key: utf-8, valueLength: varint, value: bytes) * headerCount

Varints are zigzag-encoded LEB128 (Kafka's ByteUtils).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import Iterator, List, Optional, Tuple

from kstore_cli.errors import InvalidRecordError
from kstore_cli.java import MAX_INT32, MAX_INT64, MIN_INT64
from kstore_cli.record.crc import crc32c
from kstore_cli.record._decode_common import (
    SCAN_END,
    SCAN_MORE,
    SCAN_OTHER,
    BatchHead,
    LegacyEntry,
    V2Record,
    _Underflow,
    increment_sequence,
)
from kstore_cli.record.wire import (  # noqa: F401 - read_varint, read_varlong, size_of_varint: this twin's
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_ENTRY_HEADER,
    LOG_ENTRY_PREFIX,
    LOG_OVERHEAD,
    RECORD_OVERHEAD_V0,
    V2_CRC_POS,
    V2_CRC_START,
    V2_HEADER,
    V2_HEADER_SIZE,
    read_varint,
    read_varlong,
    size_of_varint,
)


def decode_v2_records(buf: "bytes | memoryview", pos: int, end: int, count: int) -> List[V2Record]:
    """Decode exactly `count` records from buf[pos:end]; leftover bytes are an error, as in Kafka."""
    records: List[V2Record] = []
    append = records.append
    for _ in range(count):
        try:
            length, body = read_varint(buf, pos, end)  # (Underflow at pos >= end too)
        except _Underflow:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached") from None
        record_end = body + length
        if length < 0 or record_end > end:
            raise _size_error(f"expected {length} bytes in record payload, but instead the buffer has only "
                              f"{end - body} remaining bytes.")
        try:
            p = body + 1  # attributes: unused
            timestamp_delta, p = read_varlong(buf, p, end)
            offset_delta, p = read_varint(buf, p, end)
            key_len, p = read_varint(buf, p, end)
            key_pos = p
            if key_len < 0:
                key_len = -1
            else:
                p += key_len
            value_len, p = read_varint(buf, p, end)
            value_pos = p
            if value_len < 0:
                value_len = -1
            else:
                p += value_len
            header_count, p = read_varint(buf, p, end)
            if header_count < 0 or header_count > end - p:
                raise _header_count_error(header_count)
            headers: tuple = ()
            if header_count:
                hs = []
                for _h in range(header_count):
                    hk_len, p = read_varint(buf, p, end)
                    if hk_len < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {hk_len}")
                    hk_pos, p = p, p + hk_len
                    hv_len, p = read_varint(buf, p, end)
                    hv_pos = p
                    if hv_len < 0:
                        hv_len = -1
                    else:
                        p += hv_len
                    if p > end:
                        raise _Underflow
                    hs.append((hk_pos, hk_len, hv_pos, hv_len))
                headers = tuple(hs)
        except _Underflow:
            raise InvalidRecordError("Found invalid record structure") from None
        # Kafka reads the fields from the whole buffer and only then compares sizes.
        if p != record_end:
            raise _size_error(f"expected to read {length} bytes in record payload, but instead read {p - body}")
        append((offset_delta, timestamp_delta, record_end - pos, key_pos, key_len, value_pos, value_len, headers))
        pos = record_end
    if pos != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return records


def _size_error(detail: str) -> InvalidRecordError:
    return InvalidRecordError(f"Invalid record size: {detail}")


def _header_count_error(header_count: int) -> InvalidRecordError:
    if header_count < 0:
        return InvalidRecordError(f"Found invalid number of record headers {header_count}")
    return InvalidRecordError(
        f"Found invalid number of record headers. {header_count} is larger than the remaining size of the buffer"
    )


_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def decode_legacy_message(buf: "bytes | memoryview", pos: int, end: int) -> Optional[LegacyEntry]:
    """The legacy entry at pos, or None when it does not fit before end (a truncated tail).

    Raises InvalidRecordError when the size field is below the minimum overhead or
    the key/value lengths point outside the message.
    """
    if end - pos < LOG_OVERHEAD:
        return None
    offset, size = LOG_ENTRY_HEADER.unpack_from(buf, pos)
    if size < RECORD_OVERHEAD_V0:
        raise InvalidRecordError(f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})")
    msg = pos + LOG_OVERHEAD
    msg_end = msg + size
    if msg_end > end:
        return None
    crc, magic, attributes = struct.unpack_from(">Ibb", buf, msg)
    p = msg + 6
    timestamp = -1
    if magic > 0:
        if p + 8 > msg_end:
            raise InvalidRecordError("Found invalid record structure")
        (timestamp,) = _INT64.unpack_from(buf, p)
        p += 8
    if p + 4 > msg_end:
        raise InvalidRecordError("Found invalid record structure")
    (key_len,) = _INT32.unpack_from(buf, p)
    p += 4
    key_pos = p
    if key_len < 0:
        key_len = -1
    else:
        p += key_len
    if p + 4 > msg_end:
        raise InvalidRecordError("Found invalid record structure")
    (value_len,) = _INT32.unpack_from(buf, p)
    p += 4
    value_pos = p
    if value_len < 0:
        value_len = -1
    else:
        p += value_len
    if p > msg_end:
        raise InvalidRecordError("Found invalid record structure")
    return (offset, LOG_OVERHEAD + size, crc, magic, attributes, timestamp, key_pos, key_len, value_pos, value_len, msg)




_UINT32 = struct.Struct(">I")


def scan_batches(buf: "bytes | memoryview", pos: int, end: int, max_batches: int,
                 check_crc: bool) -> Tuple[List[BatchHead], int, int]:
    """Frame plain v2 batches from pos, the way FileLogInputStream does: (heads, stop, status).

    Each head is ``(position,) + V2_HEADER fields``. Stops at the first entry that is not
    a plain v2 batch of at least 61 bytes that fits before end (and, with check_crc, whose
    CRC-32C matches): status SCAN_OTHER with stop at that entry. SCAN_END when fewer than
    18 bytes remain; SCAN_MORE after max_batches heads.
    """
    heads: List[BatchHead] = []
    limit = end - HEADER_SIZE_UP_TO_MAGIC
    frame = LOG_ENTRY_PREFIX.unpack_from
    header = V2_HEADER.unpack_from
    mv = memoryview(buf) if check_crc else None
    while pos < limit:
        if len(heads) >= max_batches:
            return heads, pos, SCAN_MORE
        _offset, size, _x, magic = frame(buf, pos)
        entry_end = pos + LOG_OVERHEAD + size
        if size < RECORD_OVERHEAD_V0 or entry_end > end or magic < 2 or entry_end - pos < V2_HEADER_SIZE:
            return heads, pos, SCAN_OTHER
        if check_crc and _UINT32.unpack_from(buf, pos + V2_CRC_POS)[0] != crc32c(mv[pos + V2_CRC_START : entry_end]):
            return heads, pos, SCAN_OTHER
        heads.append((pos,) + header(buf, pos))
        pos = entry_end
    return heads, pos, SCAN_END


def frame_batches(batch_cls: type, buf: "bytes | memoryview", pos: int, end: int, max_batches: int, check_crc: bool,
                  path: Optional[str]) -> Tuple[list, int, int]:
    """:func:`scan_batches`, each head made a ``batch_cls`` (batch.RecordBatch) instance without calling
    its constructor: ``path``, ``_buf`` (buf[position : position + size]), ``_valid`` (True when the
    CRC was checked, else None), ``size`` (12 + batch length) and the head's fields set as attributes.
    Returns (batches, stop, status)."""
    heads, stop, status = scan_batches(buf, pos, end, max_batches, check_crc)
    out = []
    valid = True if check_crc else None
    new = batch_cls.__new__
    for head in heads:
        batch = new(batch_cls)
        (batch.position, batch.base_offset, length, batch.partition_leader_epoch, batch.magic, batch.crc,
         batch.attributes, batch.last_offset_delta, batch.base_timestamp, batch.max_timestamp, batch.producer_id,
         batch.producer_epoch, batch.base_sequence, batch.count) = head
        batch.path = path
        batch.size = LOG_OVERHEAD + length
        batch._buf = buf[head[0] : head[0] + LOG_OVERHEAD + length]
        batch._valid = valid
        out.append(batch)
    return out, stop, status


def build_v2_records(record_cls: type, header_cls: type, batch: object, data: "bytes | memoryview", pos: int, end: int, count: int,
                     base_offset: int, base_timestamp: int, log_append_time: Optional[int],
                     base_sequence: int) -> list:
    """:func:`decode_v2_records`, then one ``record_cls`` (batch.Record, whose headers are
    ``header_cls``, batch.Header) per record, as
    DefaultRecordBatch's iterator gives them: offset = base offset + delta; timestamp = the
    batch's max timestamp under LogAppendTime (log_append_time), else base timestamp + delta;
    sequence = base sequence + delta with Java's int wrap, or -1 without a base sequence.
    """
    out = []
    append = out.append
    for offset_delta, ts_delta, size, kp, kl, vp, vl, headers in decode_v2_records(data, pos, end, count):
        seq = increment_sequence(base_sequence, offset_delta) if base_sequence >= 0 else -1
        timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        append(record_cls(batch, data, base_offset + offset_delta, timestamp, seq, size, kp, kl, vp, vl, headers))
    return out


def build_legacy_records(record_cls: type, batch: object, data: "bytes | memoryview", wrapper_magic: int,
                         wrapper_offset: int, log_append_time: Optional[int]) -> list:
    """The inner messages of a decompressed legacy wrapper (LegacyRecord's deep iterator), one
    ``record_cls`` (batch.Record) each.

    A truncated trailing inner entry ends the iteration silently; a compressed inner message, an
    empty set, or (v1) a wrapper offset below the last inner offset other than 0 is an
    InvalidRecordError. v1 inner offsets are relative: absolute = wrapper offset - last inner +
    inner (a wrapper offset of 0 keeps them). Timestamps: -1 for magic 0 messages, the wrapper's
    under LogAppendTime (log_append_time), else the message's own. Each record carries its
    message's CRC-32 check (``legacy_valid``).
    """
    entries = []
    pos = 0
    end = len(data)
    while True:
        entry = decode_legacy_message(data, pos, end)
        if entry is None:
            break  # a truncated trailing inner entry ends the iteration silently
        if entry[4] & 0x07:
            raise InvalidRecordError("Inner messages must not be compressed")
        entries.append(entry)
        pos += entry[1]
    if not entries:
        raise InvalidRecordError("Found invalid compressed record set with no inner records")
    absolute_base = 0
    if wrapper_magic > 0:
        last_inner = entries[-1][0]
        if wrapper_offset == 0:
            absolute_base = 0  # some librdkafka versions send wrapper offset 0
        elif wrapper_offset < last_inner:
            raise InvalidRecordError(
                "Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                f"'{wrapper_offset}' is less than the last inner message offset '{last_inner}' and it is not zero."
            )
        else:
            absolute_base = wrapper_offset - last_inner
    mv = memoryview(data)
    out = []
    for (offset, size, crc, magic, attributes, timestamp, kp, kl, vp, vl, msg) in entries:
        if wrapper_magic > 0:
            offset = absolute_base + offset
        if magic == 0:
            timestamp = -1
        elif log_append_time is not None:
            timestamp = log_append_time
        valid = size - LOG_OVERHEAD >= RECORD_OVERHEAD_V0 and crc == zlib.crc32(mv[msg + 4 : msg + size - LOG_OVERHEAD])
        out.append(record_cls(batch, data, offset, timestamp, -1, size, kp, kl, vp, vl, (), crc, magic, attributes, valid))
    return out


def register_classes(record_cls: type, header_cls: type) -> None:
    """The native twin learns batch.Record and batch.Header here; nothing to learn in Python."""


#: The native twin's C record type (batch.Record's base there); the pure-Python Record needs none.
RecordBase = None
#: The native twin's C header type (batch.Header's base there); likewise.
HeaderBase = None


def v2_batch_records(record_cls: type, header_cls: type, batch) -> Optional[list]:
    """``batch.records()`` (batch.RecordBatch) for a plain batch: count > 0, no codec, size >= 61; None
    for any other batch (the caller's general path handles it). Records as :func:`build_v2_records`."""
    count = batch.count
    attributes = batch.attributes
    if count <= 0 or attributes & 0x07 or batch.size < V2_HEADER_SIZE:
        return None
    data = batch._buf
    return build_v2_records(record_cls, header_cls, batch, data, V2_HEADER_SIZE, len(data), count, batch.base_offset,
                            batch.base_timestamp, batch.max_timestamp if attributes & 0x08 else None,
                            batch.base_sequence)


def v2_batch_iter(record_cls: type, header_cls: type, batch) -> Optional[Iterator]:
    """``iter(batch)`` (batch.RecordBatch) for a plain batch, or None, as :func:`v2_batch_records`: the
    batch is decoded (and so checked) whole before the first record (natively its records are then
    built one at a time, as they are iterated)."""
    records = v2_batch_records(record_cls, header_cls, batch)
    return None if records is None else iter(records)


def decode_v2_columns(buf: "bytes | memoryview", pos: int, end: int, count: int, base_offset: int,
                      base_timestamp: int, log_append_time: Optional[int], key_base: int,
                      value_base: int) -> tuple:
    """A batch's records as Arrow-ready column pieces (columnar mode, no object per record natively).

    Same checks and errors as :func:`decode_v2_records`. Returns ``(n, offsets, timestamps,
    key_ends, key_data, key_valid, value_ends, value_data, value_valid)``: offsets and timestamps
    as native int64, key/value ends as native int32 (the running data offset after each row,
    counted from key_base/value_base: Arrow's offsets without their leading entry), the keys
    (values) concatenated, and one validity byte per row (0 null, 1 set). Timestamps follow
    :func:`build_v2_records`.
    """
    offsets = array("q")
    timestamps = array("q")
    key_ends = array("i")
    value_ends = array("i")
    key_data = bytearray()
    value_data = bytearray()
    key_valid = bytearray()
    value_valid = bytearray()
    kpos, vpos = key_base, value_base
    for offset_delta, ts_delta, _size, kp, kl, vp, vl, _headers in decode_v2_records(buf, pos, end, count):
        offset = base_offset + offset_delta
        timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        if not -(2**63) <= offset < 2**63 or not -(2**63) <= timestamp < 2**63:
            raise OverflowError("offset or timestamp beyond int64")
        offsets.append(offset)
        timestamps.append(timestamp)
        if kl >= 0:
            key_data += buf[kp : kp + kl]
            kpos += kl
        if vl >= 0:
            value_data += buf[vp : vp + vl]
            vpos += vl
        if kpos > 0x7FFFFFFF or vpos > 0x7FFFFFFF:
            raise OverflowError("more than 2 GiB of keys or values in one Arrow array")
        key_ends.append(kpos)
        value_ends.append(vpos)
        key_valid.append(kl >= 0)
        value_valid.append(vl >= 0)
    return (len(offsets), offsets.tobytes(), timestamps.tobytes(), key_ends.tobytes(), bytes(key_data),
            bytes(key_valid), value_ends.tobytes(), bytes(value_data), bytes(value_valid))


def pack_validity(valid: "bytes | memoryview") -> Tuple[bytes, int]:
    """One byte per row (0 null, 1 set) as an Arrow validity bitmap (LSB first): (bitmap, null count)."""
    valid = bytes(valid)
    bitmap = bytearray((len(valid) + 7) // 8)
    for i, v in enumerate(valid):
        if v:
            bitmap[i >> 3] |= 1 << (i & 7)
    return bytes(bitmap), valid.count(0)



_INT64_MIN, _INT64_MAX, _INT32_MAX = MIN_INT64, MAX_INT64, MAX_INT32
_OVERFLOW = object()  # _stage_batch: an int32 end would pass 2**31 - 1


def decode_v2_run(buf: "bytes | memoryview", pos: int, end: int, max_rows: int, max_bytes: int, check_crc: bool,
                  min_offset: Optional[int], end_offset: Optional[int], stop_transactional: bool,
                  with_headers: bool, bases: Tuple[int, int, int, int, int]) -> tuple:
    """Decode a run of plain v2 batches from pos straight into columns (no object per record or batch).

    A batch joins the run when it is framed whole before end, has magic 2, at least 61 bytes,
    a matching CRC-32C (with check_crc), no codec, is not a control batch (nor transactional with
    stop_transactional), has count > 0, and its records decode under :func:`decode_v2_records`'
    rules with offsets in ``[min_offset, end_offset)`` (None: unbounded), offsets and timestamps
    within int64 and (with_headers) header keys in strict UTF-8. The run stops before the first
    batch that does not: status SCAN_OTHER, and that batch is the caller's (the batch path gives
    it its Kafka error or its special handling). SCAN_END: fewer than 18 bytes left. SCAN_MORE:
    the next batch would pass max_rows rows or max_bytes bytes of batches (a run's first batch
    always joins), or an int32 end would pass 2**31 - 1.

    Returns ``(n, stop, status, batches, columns)``; columns are native-endian buffers::

        offsets q, timestamps q, timestamp_types i (0 create time, 1 log append time),
        key_ends i, key_data, key_valid B, value_ends i, value_data, value_valid B,
        header_ends i, header_key_ends i, header_key_data, header_value_ends i,
        header_value_data, header_value_valid B

    Ends are Arrow offsets without their leading entry, counted on from ``bases`` (key, value,
    header, header key, header value); header_ends counts headers: row i's headers are
    ``header_ends[i-1]:header_ends[i]``. Without with_headers the header buffers are empty.
    """
    cols = _run_columns()
    ends = list(bases)
    n = batches = used = 0
    limit = end - HEADER_SIZE_UP_TO_MAGIC
    mv = memoryview(buf)
    status = SCAN_END
    while pos < limit:
        _offset, size, _x, magic = LOG_ENTRY_PREFIX.unpack_from(buf, pos)
        entry_end = pos + LOG_OVERHEAD + size
        if size < RECORD_OVERHEAD_V0 or entry_end > end or magic != 2 or entry_end - pos < V2_HEADER_SIZE:
            status = SCAN_OTHER
            break
        (base_offset, _length, _epoch, _magic, crc, attributes, _last_delta, base_ts, max_ts, _pid, _pepoch,
         _base_seq, count) = V2_HEADER.unpack_from(buf, pos)
        if n and (n + count > max_rows or used + entry_end - pos > max_bytes):
            status = SCAN_MORE
            break
        records = _plain_records(buf, mv, pos, entry_end, crc, attributes, count, check_crc, stop_transactional)
        staged = None if records is None else _stage_batch(mv, records, base_offset, base_ts,
                                                           max_ts if attributes & 0x08 else None,
                                                           min_offset, end_offset, with_headers, ends)
        if staged is None:
            status = SCAN_OTHER
            break
        if staged is _OVERFLOW:
            status = SCAN_MORE if n else SCAN_OTHER
            break
        for col, piece in zip(cols, staged):
            col.extend(piece)
        n += len(records)
        batches += 1
        used += entry_end - pos
        pos = entry_end
    return n, pos, status, batches, tuple(bytes(c) if isinstance(c, bytearray) else c.tobytes() for c in cols)


def _run_columns() -> list:
    """decode_v2_run's empty columns, in its order."""
    return [array("q"), array("q"), array("i"), array("i"), bytearray(), bytearray(), array("i"), bytearray(),
            bytearray(), array("i"), array("i"), bytearray(), array("i"), bytearray(), bytearray()]


def _plain_records(buf: "bytes | memoryview", mv: memoryview, pos: int, entry_end: int, crc: int, attributes: int,
                   count: int, check_crc: bool, stop_transactional: bool) -> Optional[List[V2Record]]:
    """The records of the v2 batch framed at pos when they may join decode_v2_run's run, else None."""
    if ((check_crc and crc != crc32c(mv[pos + V2_CRC_START : entry_end])) or attributes & 0x27
            or (stop_transactional and attributes & 0x10) or count <= 0):
        return None
    try:
        return decode_v2_records(buf, pos + V2_HEADER_SIZE, entry_end, count)
    except InvalidRecordError:
        return None


def _strict_utf8(data: "bytes | memoryview") -> bool:
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _stage_batch(mv: memoryview, records: List[V2Record], base_offset: int, base_ts: int,
                 log_append_time: Optional[int], min_offset: Optional[int], end_offset: Optional[int],
                 with_headers: bool, ends: List[int]):
    """One batch's pieces of decode_v2_run's columns (ends advanced in place only on success);
    None when the batch cannot join the run, _OVERFLOW when an int32 end would overflow."""
    staged = [[], [], [], [], bytearray(), bytearray(), [], bytearray(), bytearray(), [], [], bytearray(), [],
              bytearray(), bytearray()]
    kend, vend, hend, hkend, hvend = ends
    ts_type = 0 if log_append_time is None else 1
    for offset_delta, ts_delta, _size, kp, kl, vp, vl, headers in records:
        offset = base_offset + offset_delta
        timestamp = base_ts + ts_delta if log_append_time is None else log_append_time
        if not (_INT64_MIN <= offset <= _INT64_MAX and _INT64_MIN <= timestamp <= _INT64_MAX):
            return None
        if (min_offset is not None and offset < min_offset) or (end_offset is not None and offset >= end_offset):
            return None
        staged[0].append(offset)
        staged[1].append(timestamp)
        staged[2].append(ts_type)
        if kl >= 0:
            staged[4] += mv[kp : kp + kl]
            kend += kl
        if vl >= 0:
            staged[7] += mv[vp : vp + vl]
            vend += vl
        staged[3].append(kend)
        staged[5].append(kl >= 0)
        staged[6].append(vend)
        staged[8].append(vl >= 0)
        if with_headers:
            for hkp, hkl, hvp, hvl in headers:
                if not _strict_utf8(mv[hkp : hkp + hkl]):
                    return None
                staged[11] += mv[hkp : hkp + hkl]
                hkend += hkl
                if hvl >= 0:
                    staged[13] += mv[hvp : hvp + hvl]
                    hvend += hvl
                staged[10].append(hkend)
                staged[12].append(hvend)
                staged[14].append(hvl >= 0)
            hend += len(headers)
            staged[9].append(hend)
        if max(kend, vend, hend, hkend, hvend) > _INT32_MAX:
            return _OVERFLOW
    ends[:] = [kend, vend, hend, hkend, hvend]
    return staged
