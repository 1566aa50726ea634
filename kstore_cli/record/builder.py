"""Building batches: magic v2 record batches and legacy (v0/v1) entries and wrappers.

Builders return the bytes of one batch as it sits in a ``.log`` (log overhead
included), with correct CRCs. Layouts are documented in :mod:`.batch` and
:mod:`.decode`; this module is their inverse.
"""

from __future__ import annotations

import struct
from typing import Optional, Sequence, Tuple

from kstore_cli.codecs import get_codec
from kstore_cli.errors import UsageError
from kstore_cli.record.batch import (
    CONTROL_FLAG,
    CREATE_TIME,
    DELETE_HORIZON_FLAG,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
)
from kstore_cli.record.wire import (
    CRC_OFFSET,
    LOG_ENTRY_HEADER,
    V2_CRC_START,
    V2_HEADER,
    write_varint,
    write_varlong,
)
from kstore_cli.record.crc import crc32, crc32c

#: A header: its key (text, or raw bytes written as they are) and its nullable value.
HeaderSpec = Tuple["str | bytes", Optional[bytes]]


class RecordSpec:
    """A record to write: absolute offset, timestamp, key, value, headers."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(self, offset: int, timestamp: int, key: Optional[bytes], value: Optional[bytes],
                 headers: Sequence[HeaderSpec] = ()) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    @classmethod
    def of(cls, record) -> "RecordSpec":
        """From a decoded :class:`~kstore_cli.record.batch.Record`."""
        return cls(record.offset, record.timestamp, record.key, record.value,
                   [(h.key, h.value) for h in record.headers] if not record.is_legacy else ())


def _write_nullable(data: Optional[bytes], out: bytearray) -> None:
    """A varint length (-1 for null) followed by the bytes."""
    if data is None:
        write_varint(-1, out)
    else:
        write_varint(len(data), out)
        out += data


def encode_v2_record(offset_delta: int, timestamp_delta: int, key: Optional[bytes], value: Optional[bytes],
                     headers: Sequence[HeaderSpec] = ()) -> bytes:
    """One DefaultRecord, length prefix included."""
    body = bytearray(b"\x00")  # attributes
    write_varlong(timestamp_delta, body)
    write_varint(offset_delta, body)
    _write_nullable(key, body)
    _write_nullable(value, body)
    write_varint(len(headers), body)
    for hkey, hvalue in headers:
        if hkey is None:
            raise UsageError("record header keys must not be null")
        _write_nullable(hkey if isinstance(hkey, (bytes, bytearray)) else hkey.encode("utf-8"), body)
        _write_nullable(hvalue, body)
    out = bytearray()
    write_varint(len(body), out)
    out += body
    return bytes(out)


def _v2_attributes(codec: int, timestamp_type: int, is_transactional: bool, is_control: bool,
                   has_delete_horizon: bool) -> int:
    """A v2 batch's attributes (DefaultRecordBatch.computeAttributes)."""
    attributes = codec & 0x07
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_FLAG
    return attributes


def build_v2_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: Optional[int] = None,
    last_offset_delta: Optional[int] = None,
    codec: int = 0,
    compression_level: Optional[int] = None,
    timestamp_type: int = CREATE_TIME,
    log_append_time: Optional[int] = None,
    max_timestamp: Optional[int] = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: Optional[int] = None,
) -> bytes:
    """A magic v2 batch (MemoryRecordsBuilder's layout).

    base_offset/last_offset_delta default to the records' first offset and span;
    they may be given to keep a compacted batch's original range. With no
    records this writes an empty batch the way the cleaner does (baseTimestamp -1,
    maxTimestamp kept from max_timestamp).
    """
    if base_offset is None:
        if not records:
            raise UsageError("an empty batch needs an explicit base offset")
        base_offset = records[0].offset
    if last_offset_delta is None:
        last_offset_delta = (records[-1].offset - base_offset) if records else 0
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif records:
        base_timestamp = records[0].timestamp
    else:
        base_timestamp = -1
    if max_timestamp is None:
        if timestamp_type == LOG_APPEND_TIME and log_append_time is not None:
            max_timestamp = log_append_time
        else:
            max_timestamp = max((r.timestamp for r in records), default=-1)
    body = bytearray()
    for r in records:
        body += encode_v2_record(r.offset - base_offset, r.timestamp - base_timestamp, r.key, r.value, r.headers)
    if records and codec:
        body = get_codec(codec).compress(bytes(body), 2, compression_level)
    attributes = _v2_attributes(codec if records else 0,  # empty batches are written uncompressed
                                timestamp_type, is_transactional, is_control, delete_horizon_ms is not None)
    header = bytearray(V2_HEADER.pack(
        base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body), partition_leader_epoch, 2, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, len(records),
    ))
    crc = crc32c(bytes(header[V2_CRC_START:]) + bytes(body))
    struct.pack_into(">I", header, CRC_OFFSET, crc)
    return bytes(header) + bytes(body)


def build_control_batch(
    offset: int,
    timestamp: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    producer_id: int,
    producer_epoch: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch as the broker writes it (78 bytes)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_v2_batch(
        [RecordSpec(offset, timestamp, key, value)],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def encode_legacy_message(magic: int, attributes: int, timestamp: int, key: Optional[bytes], value: Optional[bytes]) -> bytes:
    """A LegacyRecord (crc, magic, attributes, [timestamp], key, value), no log overhead."""
    if magic not in (0, 1):
        raise UsageError(f"legacy messages are magic 0 or 1, not {magic}")
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += struct.pack(">i", -1 if key is None else len(key))
    if key is not None:
        body += key
    body += struct.pack(">i", -1 if value is None else len(value))
    if value is not None:
        body += value
    return struct.pack(">I", crc32(bytes(body))) + bytes(body)


def build_legacy_entry(offset: int, magic: int, attributes: int, timestamp: int, key: Optional[bytes], value: Optional[bytes]) -> bytes:
    """One uncompressed legacy log entry: offset, size, message."""
    message = encode_legacy_message(magic, attributes, timestamp, key, value)
    return LOG_ENTRY_HEADER.pack(offset, len(message)) + message


def build_legacy_batch(
    records: Sequence[RecordSpec],
    *,
    magic: int,
    codec: int = 0,
    compression_level: Optional[int] = None,
    timestamp_type: int = CREATE_TIME,
    log_append_time: Optional[int] = None,
) -> bytes:
    """Legacy entries: plain (one entry per record) or one compressed wrapper (MemoryRecordsBuilder)."""
    if codec == 4:
        raise UsageError("zstd needs message format v2; v0/v1 cannot hold it")
    if not records:
        raise UsageError("Empty batches are only supported for magic v2 and above")
    ts_attr = TIMESTAMP_TYPE_MASK if (magic == 1 and timestamp_type == LOG_APPEND_TIME) else 0

    def ts_of(r: RecordSpec) -> int:
        if magic == 0:
            return -1
        if timestamp_type == LOG_APPEND_TIME and log_append_time is not None:
            return log_append_time
        return r.timestamp

    if codec == 0:
        return b"".join(build_legacy_entry(r.offset, magic, ts_attr, ts_of(r), r.key, r.value) for r in records)
    base = records[0].offset
    inner = b"".join(
        build_legacy_entry(r.offset if magic == 0 else r.offset - base, magic, ts_attr, ts_of(r), r.key, r.value)
        for r in records
    )
    compressed = get_codec(codec).compress(inner, magic, compression_level)
    if magic == 0:
        wrapper_ts = -1
    elif timestamp_type == LOG_APPEND_TIME and log_append_time is not None:
        wrapper_ts = log_append_time
    else:
        wrapper_ts = max(r.timestamp for r in records)
    return build_legacy_entry(records[-1].offset, magic, (codec & 0x07) | ts_attr, wrapper_ts, None, compressed)
