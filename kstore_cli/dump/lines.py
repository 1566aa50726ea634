"""Batch and record lines exactly as kafka-dump-log prints them, and the records Kafka's iterator hands
out before it fails. Plain functions, so other commands can print records the way ``kafka-dump-log`` does."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from kstore_cli.codecs import CODEC_NAMES
from kstore_cli.errors import CorruptRecordError, KstoreError
from kstore_cli.java import MAX_INT64, MIN_INT64, java_long
from kstore_cli.log.snapshot import ProducerEntry
from kstore_cli.parsers import render_control
from kstore_cli.record import decode as _decode
from kstore_cli.record.batch import RECORD_BATCH_OVERHEAD, Batch, Record, increment_sequence, parse_control_key
from kstore_cli.record.decode import decode_v2_records
from kstore_cli.record.text import java_utf8

#: DumpLogSegments.RecordIndent
RECORD_INDENT = "|"


def java_bool(value: bool) -> str:
    """``String.valueOf(boolean)``."""
    return "true" if value else "false"


def optional_long(value: Optional[int]) -> str:
    """``OptionalLong.toString()``: ``OptionalLong.empty`` or ``OptionalLong[n]``."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


# ------------------------------------------------------------------------------ batch and record lines


def format_batch_head(batch: Batch) -> str:
    """The first part of a batch line (up to ``deleteHorizonMs``, or ``offset:`` for legacy)."""
    if batch.magic >= 2:
        return (
            f"baseOffset: {batch.base_offset} lastOffset: {java_long(batch.last_offset)} count: {batch.count}"
            f" baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence}"
            f" producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch}"
            f" partitionLeaderEpoch: {batch.partition_leader_epoch}"
            f" isTransactional: {java_bool(batch.is_transactional)} isControl: {java_bool(batch.is_control)}"
            f" deleteHorizonMs: {optional_long(batch.delete_horizon_ms)}"
        )
    return f"offset: {batch.last_offset}"


def format_batch_tail(batch: Batch, position: int) -> str:
    """The rest of a batch line, from `` position:`` to ``isvalid:`` (no newline)."""
    return (
        f" position: {position} {batch.timestamp_type_name}: {batch.max_timestamp}"
        f" size: {batch.size} magic: {batch.magic} compresscodec: {batch.compression_name}"
        f" crc: {batch.crc} isvalid: {java_bool(batch.is_valid)}"
    )


def format_batch_line(batch: Batch, position: Optional[int] = None) -> str:
    """One batch line exactly as kafka-dump-log prints it (no newline).

    `position` defaults to the batch's byte position in its file.
    """
    return format_batch_head(batch) + format_batch_tail(batch, batch.position if position is None else position)


def header_keys_text(record: Record) -> str:
    """``[k1,k2,...]``: header keys decoded the way Java's ``new String(bytes, UTF_8)`` does."""
    keys = record.header_key_bytes()
    if not keys:
        return "[]"
    return "[" + ",".join(java_utf8(k) for k in keys) + "]"


def format_record_metadata(batch: Batch, record: Record) -> str:
    """``| offset: ... keySize: ... valueSize: ...`` plus the v2 or legacy extras (no control part)."""
    offset = record.offset
    timestamp = record.timestamp
    if not (MIN_INT64 <= offset <= MAX_INT64 and MIN_INT64 <= timestamp <= MAX_INT64):
        # DefaultRecord.readFrom: baseOffset + offsetDelta and baseTimestamp + timestampDelta are longs
        offset = java_long(offset)
        timestamp = java_long(timestamp)
    text = (
        f"{RECORD_INDENT} offset: {offset} {batch.timestamp_type_name}: {timestamp}"
        f" keySize: {record.key_size} valueSize: {record.value_size}"
    )
    if batch.magic >= 2:
        text += f" sequence: {record.sequence} headerKeys: {header_keys_text(record)}"
    if record.is_legacy:
        # The stray '}' is Kafka's (a typo in DumpLogSegments).
        text += f" isValid: {java_bool(record.is_valid)} crc: {record.crc}}}"
    return text


def control_type_id(record: Record) -> int:
    """The control record type id from its key (Kafka's checks: at least 4 bytes, version >= 0)."""
    return parse_control_key(record.key)[1]


def format_control(record: Record) -> str:
    """What a control record adds to its line, e.g. `` endTxnMarker: COMMIT coordinatorEpoch: 7``."""
    return render_control(control_type_id(record), record.key, record.value)


def format_record_data(parser: Any, record: Record, prefix: str = "| ") -> str:
    """`` key: ... payload: ...`` for a non-control record, as the parser renders them.

    `prefix` goes before ``key:`` (``"| "`` when no metadata was printed, else ``" "``);
    ``payload:`` always gets a single space. Raises what the parser raises.
    """
    offset = record.offset
    if not MIN_INT64 <= offset <= MAX_INT64:
        offset = java_long(offset)
    key, payload = parser.parse(offset, record.key, record.value)
    text = ""
    if key is not None:
        text = f"{prefix}key: {key}"
    if payload is not None:
        text += f" payload: {payload}"
    return text


def format_record_line(
    batch: Batch,
    record: Record,
    *,
    parser: Any = None,
    skip_record_metadata: bool = False,
) -> str:
    """One record line exactly as kafka-dump-log prints it (no newline).

    With a `parser` the key and payload are printed (never for control records).
    """
    prefix = RECORD_INDENT + " "
    text = ""
    if not skip_record_metadata:
        text = format_record_metadata(batch, record)
        prefix = " "
        if batch.is_control:
            text += format_control(record)
    if parser is not None and not batch.is_control:
        text += format_record_data(parser, record, prefix)
    return text


def format_snapshot_entry(entry: ProducerEntry) -> str:
    """One producer line of a ``.snapshot`` dump (no newline; note the space after lastTimestamp)."""
    text = (
        f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch}"
        f" coordinatorEpoch: {entry.coordinator_epoch}"
        f" currentTxnFirstOffset: {optional_long(entry.open_transaction_first_offset)}"
        f" lastTimestamp: {entry.timestamp} "
    )
    if entry.has_batch_metadata:
        text += (
            f"firstSequence: {entry.first_sequence} lastSequence: {entry.last_sequence}"
            f" lastOffset: {entry.last_offset} offsetDelta: {entry.offset_delta} timestamp: {entry.timestamp}"
        )
    return text


def check_codec(batch: Batch) -> None:
    """Kafka's ``CompressionType.forId``: codec ids 5-7 make the batch line fail."""
    if batch.compression not in CODEC_NAMES:
        raise CorruptRecordError(
            f"Unknown compression type id: {batch.compression}", path=batch.path, position=batch.position
        )


# ------------------------------------------------------------------------------ records, as Kafka's iterator yields them


def records_as_iterated(batch: Batch) -> Tuple[List[Record], Optional[KstoreError]]:
    """The records Kafka's iterator hands out before it fails, and the failure (or None).

    Compressed batches and legacy wrappers are decoded whole before the first record, so a
    failure yields nothing. An uncompressed v2 batch is read record by record: the records
    before the bad one come out, and when only the leftover-bytes check fails, every record
    but the last does (Kafka checks after reading the last record, before returning it).
    """
    try:
        return batch.records(), None
    except KstoreError as exc:
        if batch.is_legacy or batch.compression != 0 or batch.count <= 0 or batch.size < RECORD_BATCH_OVERHEAD:
            return [], exc
        return _readable_prefix(batch), exc


def _readable_prefix(batch: Batch) -> List[Record]:
    buf = batch.buffer
    end = len(buf)
    pos = RECORD_BATCH_OVERHEAD
    good: List[Record] = []
    count = batch.count
    log_append = batch.timestamp_type == 1
    for _ in range(count):
        try:
            length, body = _decode.read_varint(buf, pos, end)
        except (_decode.Underflow, KstoreError):
            break
        record_end = body + length
        if length < 0 or record_end > end:
            break
        try:
            ((delta, ts_delta, size, kp, kl, vp, vl, headers),) = decode_v2_records(buf, pos, record_end, 1)
        except KstoreError:
            break
        seq = -1
        if batch.base_sequence >= 0:
            seq = increment_sequence(batch.base_sequence, delta)
        timestamp = batch.max_timestamp if log_append else batch.base_timestamp + ts_delta
        good.append(Record(batch, buf, batch.base_offset + delta, timestamp, seq, size, kp, kl, vp, vl, headers))
        pos = record_end
    if len(good) == count:
        good.pop()  # every record read, so the leftover-bytes check failed on the last one
    return good
