"""Record batches (magic 2) and legacy entries (magic 0/1), and their records.

A magic v2 batch header (DefaultRecordBatch), all big-endian::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field (batch size - 12)
    12 partitionLeaderEpoch  int32   not covered by the CRC
    16 magic                 int8    2
    17 crc                   uint32  CRC-32C of bytes [21, end of batch)
    21 attributes            int16   codec 0-2, timestamp type 3, transactional 4,
                                     control 5, delete horizon 6 (low byte only)
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64   the delete horizon when attribute bit 6 is set
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records

A legacy entry (LegacyRecord) is ``offset int64, size int32`` and one message
(see :mod:`kstore_cli.record.decode`); a compressed legacy entry is a wrapper
whose value is a compressed set of inner entries.
"""

from __future__ import annotations

import struct
from typing import Iterator, List, Optional, Tuple

from kstore_cli import codecs
from kstore_cli.codecs import CODEC_NAMES, get_codec
from kstore_cli.errors import CorruptRecordError, InvalidRecordError, KstoreError
from kstore_cli.java import MAX_INT64
from kstore_cli.record import decode, encode
from kstore_cli.record._decode_common import MAX_INT32, _int32, increment_sequence  # noqa: F401 - re-exported
from kstore_cli.record.wire import (  # noqa: F401 - the wire facts' one home, re-exported
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    V2_CRC_START as _CRC_START,
    V2_HEADER,
)
from kstore_cli.record.crc import crc32, crc32c
from kstore_cli.record.recstream import WHOLE_BATCH_BYTES, stream_v2_records
from kstore_cli.record.text import java_utf8

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
TIMESTAMP_TYPE_NAMES = {NO_TIMESTAMP_TYPE: "NoTimestampType", CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}

# Control record types (ControlRecordType).
#: ControlRecordType ids of the transaction markers.
ABORT, COMMIT = 0, 1
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_MARKER = struct.Struct(">hi")  # version, coordinator epoch


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Inverse of :func:`increment_sequence` (Java int arithmetic as well)."""
    if sequence < decrement:
        return _int32(_int32(MAX_INT32 - _int32(decrement - sequence)) + 1)
    return _int32(sequence - decrement)


class ControlRecord:
    """The decoded key (and for transaction markers, value) of a control record; the raw value's fields
    are kstore_cli.parsers.control.decode_control's (the parsers sit above the wire format)."""

    __slots__ = ("version", "type_id", "coordinator_epoch", "value")

    def __init__(self, version: int, type_id: int, coordinator_epoch: Optional[int], value: Optional[bytes] = None) -> None:
        self.version = version
        self.type_id = type_id
        self.coordinator_epoch = coordinator_epoch
        self.value = value

    @property
    def type_name(self) -> str:
        """ABORT, COMMIT, LEADER_CHANGE, ... or UNKNOWN."""
        return CONTROL_TYPE_NAMES.get(self.type_id, "UNKNOWN")

    @property
    def is_transaction_marker(self) -> bool:
        return self.type_id in (ABORT, COMMIT)

    def __repr__(self) -> str:
        return f"ControlRecord({self.type_name}, version={self.version}, coordinator_epoch={self.coordinator_epoch})"


def parse_control_key(key: Optional[bytes]) -> Tuple[int, int]:
    """(version, type id) of a control record key, with Kafka's checks."""
    if key is None or len(key) < 4:
        n = 0 if key is None else len(key)
        raise InvalidRecordError(
            f"Invalid value size found for end control record key. Must have at least 4 bytes, but found only {n}"
        )
    version, type_id = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for control record: {version}. May indicate data corruption")
    return version, type_id


def parse_end_txn_marker(value: Optional[bytes]) -> int:
    """The coordinator epoch of an EndTxnMarker value."""
    n = 0 if value is None else len(value)
    if value is None or n < 6:
        raise InvalidRecordError(
            f"Invalid value size found for end transaction marker. Must have at least 6 bytes, but found only {n}"
        )
    version, epoch = _END_TXN_MARKER.unpack_from(value, 0)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for end transaction marker: {version}. May indicate data corruption")
    return epoch


class Header(decode.HeaderBase or object):  # type: ignore[misc]
    """A record header: a UTF-8 key and a nullable value (natively, the fields of the C base
    ``decode.HeaderBase``, which the decoder fills without calling ``__init__``)."""

    __slots__ = () if decode.HeaderBase else ("key", "value")

    def __init__(self, key: str, value: Optional[bytes]) -> None:
        self.key = key
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Header) and (self.key, self.value) == (other.key, other.value)

    def __repr__(self) -> str:
        return f"Header({self.key!r}, {self.value!r})"


#: The fields every record holds (``Record.__init__``'s parameters, as stored); the native twin's
#: C base type (``decode.RecordBase``) has exactly these attributes.
RECORD_FIELDS = (
    "batch",
    "key",
    "value",
    "headers",
    "offset",
    "timestamp",
    "sequence",
    "size_in_bytes",
    "_buf",
    "_key_pos",
    "_key_len",
    "_value_pos",
    "_value_len",
    "_headers",
    "crc",
    "magic",
    "attributes",
    "_legacy_valid",
)


class _PyRecord:
    """The fields of a record, in pure Python (the base of :class:`Record` under the pure-Python
    decoder; the native decoder's base is the C type ``decode.RecordBase`` with the same fields,
    filled by the same constructor)."""

    __slots__ = RECORD_FIELDS

    def __init__(self, batch: "Batch", buf, offset: int, timestamp: int, sequence: int, size_in_bytes: int,
                 key_pos: int, key_len: int, value_pos: int, value_len: int, headers: tuple,
                 crc: Optional[int] = None, magic: int = 2, attributes: int = 0, legacy_valid: Optional[bool] = None) -> None:
        self.batch = batch
        self._buf = buf
        self.offset = offset
        self.timestamp = timestamp
        self.sequence = sequence
        self.size_in_bytes = size_in_bytes
        self._key_pos = key_pos
        self._key_len = key_len
        self._value_pos = value_pos
        self._value_len = value_len
        self._headers = headers
        self.key = None if key_len < 0 else bytes(buf[key_pos : key_pos + key_len])
        self.value = None if value_len < 0 else bytes(buf[value_pos : value_pos + value_len])
        self.headers = tuple(
            Header(java_utf8(buf[kp : kp + kl]), None if vl < 0 else bytes(buf[vp : vp + vl]))
            for kp, kl, vp, vl in headers
        ) if headers else ()
        self.crc = crc
        self.magic = magic
        self.attributes = attributes
        self._legacy_valid = legacy_valid


class Record(decode.RecordBase or _PyRecord):  # type: ignore[misc]
    """One record: ``key`` and ``value`` are bytes (None when null) and ``headers`` a tuple of
    :class:`Header`, as the decoder copied them out; ``key_view()``/``value_view()`` give views
    without a copy.

    ``Record(batch, buf, offset, timestamp, sequence, size_in_bytes, key_pos, key_len, value_pos,
    value_len, headers, crc=None, magic=2, attributes=0, legacy_valid=None)``; its fields are
    :data:`RECORD_FIELDS`. The native decoder builds records itself (``build_v2_records``,
    ``build_legacy_records``), holding exactly what this constructor stores."""

    __slots__ = ()

    @property
    def key_size(self) -> int:
        """Key length, -1 for a null key."""
        return self._key_len

    @property
    def value_size(self) -> int:
        """Value length, -1 for a null value (a tombstone)."""
        return self._value_len

    def key_view(self) -> Optional[memoryview]:
        """The key as a view into the batch (no copy), None when null."""
        if self._key_len < 0:
            return None
        return memoryview(self._buf)[self._key_pos : self._key_pos + self._key_len]

    def value_view(self) -> Optional[memoryview]:
        """The value as a view into the batch (no copy), None when null."""
        if self._value_len < 0:
            return None
        return memoryview(self._buf)[self._value_pos : self._value_pos + self._value_len]

    @property
    def header_keys(self) -> List[str]:
        """Header keys decoded as UTF-8, invalid bytes replaced the way Java does."""
        buf = self._buf
        return [java_utf8(buf[kp : kp + kl]) for kp, kl, _vp, _vl in self._headers]

    def header_key_bytes(self) -> List[bytes]:
        """Header keys as raw bytes, for callers that must decode them their own way."""
        buf = self._buf
        return [bytes(buf[kp : kp + kl]) for kp, kl, _vp, _vl in self._headers]

    @property
    def has_key(self) -> bool:
        return self._key_len >= 0

    @property
    def has_value(self) -> bool:
        return self._value_len >= 0

    @property
    def is_legacy(self) -> bool:
        return self.magic < 2

    @property
    def is_valid(self) -> bool:
        """Legacy records: their own CRC-32 check. v2 records have no CRC of their own."""
        if self._legacy_valid is None:
            return True
        return self._legacy_valid

    @property
    def is_control(self) -> bool:
        return self.batch.is_control

    @property
    def control(self) -> Optional[ControlRecord]:
        """The decoded control key (and marker value) when this record is in a control batch."""
        if not self.batch.is_control:
            return None
        version, type_id = parse_control_key(self.key)
        value = self.value
        epoch = parse_end_txn_marker(value) if type_id in (0, 1) else None
        return ControlRecord(version, type_id, epoch, value)

    def __repr__(self) -> str:
        return f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, value={self.value!r})"


decode.register_classes(Record, Header)
_v2_batch_records = decode.v2_batch_records
_v2_batch_iter = decode.v2_batch_iter


class Batch:
    """What every batch offers, v2 or legacy."""

    __slots__ = ("path", "position", "size", "magic", "_buf", "_valid")

    is_legacy = False

    def _fail(self, exc: KstoreError) -> KstoreError:
        if exc.path is None:
            exc.path = self.path
        if exc.position is None:
            exc.position = self.position
        return exc

    @property
    def compression_name(self) -> str:
        return CODEC_NAMES.get(self.compression, f"unknown({self.compression})")

    @property
    def timestamp_type_name(self) -> str:
        return TIMESTAMP_TYPE_NAMES[self.timestamp_type]

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes on disk, log overhead included (a view, not a copy)."""
        return self._buf

    def ensure_valid(self) -> None:
        """Kafka's ensureValid: size and CRC; raises CorruptRecordError."""
        raise NotImplementedError

    def offsets_problem(self) -> Optional[str]:
        """Why the offsets of this batch are ones Kafka rejects, or None when they are valid."""
        raise NotImplementedError

    def ensure_valid_offsets(self) -> None:
        """The header's offsets as Kafka accepts them (:meth:`offsets_problem`); raises InvalidRecordError
        (Kafka's InvalidRecordException, which LogSegment.recover truncates at as it does a CRC failure).
        Every command that trusts batch offsets calls this after :meth:`ensure_valid`."""
        problem = self.offsets_problem()
        if problem is not None:
            raise self._fail(InvalidRecordError(problem))

    def records(self) -> List[Record]:
        raise NotImplementedError

    def record_count(self) -> int:
        """How many records the batch holds: a v2 batch's records count, one for a legacy message, a legacy
        wrapper's inner messages (which decompresses it)."""
        if self.magic >= 2:
            return self.count
        return 1 if not self.compression else len(self.records())

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())


class RecordBatch(Batch):
    """A magic v2 batch."""

    __slots__ = (
        "base_offset",
        "partition_leader_epoch",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "count",
    )

    def __init__(self, buf: memoryview, header: bytes, position: int, path: Optional[str]) -> None:
        self.path = path
        self.position = position
        self._buf = buf
        self._valid = None
        (
            self.base_offset,
            batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.count,
        ) = V2_HEADER.unpack(header)
        self.size = LOG_OVERHEAD + batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def delete_horizon_ms(self) -> Optional[int]:
        """The delete horizon (KIP-534) when attribute bit 6 is set, else None."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == -1:
            return -1
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def compute_crc(self) -> int:
        """CRC-32C over attributes to the end of the batch."""
        return crc32c(self._buf[_CRC_START:])

    @property
    def is_valid(self) -> bool:
        if self._valid is None:
            self._valid = (
                self.size >= RECORD_BATCH_OVERHEAD
                and len(self._buf) == self.size
                and self.crc == self.compute_crc()
            )
        return self._valid

    def ensure_valid(self) -> None:
        if self.size < RECORD_BATCH_OVERHEAD:
            raise self._fail(
                CorruptRecordError(
                    f"Record batch is corrupt (the size {self.size} is smaller than the minimum allowed overhead {RECORD_BATCH_OVERHEAD})"
                )
            )
        if not self.is_valid:
            raise self._fail(
                CorruptRecordError(f"Record is corrupt (stored crc = {self.crc}, computed crc = {self.compute_crc()})")
            )

    def offsets_problem(self) -> Optional[str]:
        """A negative base offset, a negative last offset delta (LogValidator.validateBatch: "Batch has an
        invalid offset range"), or a last offset past Long.MAX_VALUE (Java's baseOffset + lastOffsetDelta
        would wrap to a negative offset). The sum is not printed: it is no Kafka offset."""
        base, delta = self.base_offset, self.last_offset_delta
        if base < 0:
            return f"Batch has an invalid base offset {base} (offsets are never negative)"
        if delta < 0:
            return f"Batch has an invalid offset range: base offset {base}, last offset delta {delta} (negative)"
        if delta > MAX_INT64 - base:
            return (f"Batch has an invalid offset range: base offset {base} + last offset delta {delta} is past "
                    f"Long.MAX_VALUE ({MAX_INT64})")
        return None

    def records(self) -> List[Record]:
        """Decode the records (decompressing first when needed), all of them in a list: the decompressed
        batch may not exceed the bound (``codecs.max_record_bytes``; RecordTooLargeError past it).
        Iterate the batch instead to stream its records, one at a time."""
        try:
            fast = _v2_batch_records(Record, Header, self)  # a plain uncompressed batch, in one call
        except KstoreError as exc:
            raise self._fail(exc) from None
        if fast is not None:
            return fast
        it = self._records()
        if isinstance(it, list):
            return it
        out = []
        total = 0
        bound = codecs.max_record_bytes
        try:
            for record in it:
                # A streamed record holds its bytes and its key/value copies: about twice its size.
                total += 2 * record.size_in_bytes
                if total > bound:
                    raise codecs.too_large("the batch's records", f"more than {bound}", bound)
                out.append(record)
        except KstoreError as exc:
            raise self._fail(exc) from None
        return out

    def __iter__(self) -> Iterator[Record]:
        """The records, streamed out of the decompression when the batch inflates past
        ``recstream.WHOLE_BATCH_BYTES``: only one record (at most the bound) is held at a time."""
        try:
            fast = _v2_batch_iter(Record, Header, self)  # a plain batch: checked whole, built as iterated
        except KstoreError as exc:
            raise self._fail(exc) from None
        if fast is not None:
            return fast
        it = self._records()
        return iter(it) if isinstance(it, list) else self._failing(it)

    def _failing(self, it: Iterator[Record]) -> Iterator[Record]:
        try:
            yield from it
        except KstoreError as exc:
            raise self._fail(exc) from None

    def _records(self) -> "List[Record] | Iterator[Record]":
        """A list when the batch is small enough to decode in one call, else a record stream."""
        count = self.count
        if count < 0:
            raise self._fail(InvalidRecordError(f"Found invalid record count {count} in magic v2 batch"))
        if count == 0:
            return []
        log_append = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        try:
            if self.size < RECORD_BATCH_OVERHEAD:
                self._record_data()  # raises Kafka's error
            codec_id = self.attributes & COMPRESSION_MASK
            if codec_id == 0:
                data, start = self._buf, RECORD_BATCH_OVERHEAD
            else:
                codec = get_codec(codec_id)
                payload = self._buf[RECORD_BATCH_OVERHEAD:]
                data, start = codec.decompress_small(payload, 2, WHOLE_BATCH_BYTES), 0
                if data is None:
                    return stream_v2_records(Record, Header, self, codec.stream(payload, 2), b"",
                                             codecs.max_record_bytes)
            return decode.build_v2_records(
                Record, Header, self, data, start, len(data), count, self.base_offset, self.base_timestamp,
                log_append, self.base_sequence,
            )
        except KstoreError as exc:
            raise self._fail(exc) from None

    def _record_data(self) -> tuple:
        """(buffer, start) of the records: the batch itself past its header, or the decompressed data."""
        if self.size < RECORD_BATCH_OVERHEAD:
            raise InvalidRecordError(
                f"Record batch is corrupt (the size {self.size} is smaller than the minimum allowed overhead {RECORD_BATCH_OVERHEAD})"
            )
        codec_id = self.attributes & COMPRESSION_MASK
        if codec_id == 0:
            return self._buf, RECORD_BATCH_OVERHEAD
        return get_codec(codec_id).decompress(self._buf[RECORD_BATCH_OVERHEAD:], 2), 0

    def record_table(self) -> tuple:
        """The records as an :mod:`.encode` record table (what convert-format writes from, no object
        per record; decompressed whole, within ``codecs.max_record_bytes``): same checks and errors as
        :meth:`records`. A header key that is not strict UTF-8 is re-encoded as Kafka would (Java's
        replacement characters), through the records."""
        count = self.count
        if count < 0:
            raise self._fail(InvalidRecordError(f"Found invalid record count {count} in magic v2 batch"))
        if count == 0:
            return 0, b"", b"", b"", b"", b"", b""
        log_append = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        try:
            data, start = self._record_data()
            records = decode.decode_v2_records(data, start, len(data), count)
            table = encode.v2_table(data, records, self.base_offset, self.base_timestamp, log_append)
        except KstoreError as exc:
            raise self._fail(exc) from None
        if table is None:
            table = encode.spec_table(self.records())
        return table

    def columns(self, key_base: int = 0, value_base: int = 0) -> tuple:
        """The records as Arrow-ready column pieces (``decode.decode_v2_columns``; decompresses first).

        Same checks and errors as :meth:`records`; for a batch with no records, ``n`` is 0.
        """
        count = self.count
        if count < 0:
            raise self._fail(InvalidRecordError(f"Found invalid record count {count} in magic v2 batch"))
        log_append = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        if count == 0:
            return decode.decode_v2_columns(b"", 0, 0, 0, 0, 0, None, key_base, value_base)
        try:
            data, start = self._record_data()
            return decode.decode_v2_columns(data, start, len(data), count, self.base_offset, self.base_timestamp,
                                            log_append, key_base, value_base)
        except KstoreError as exc:
            raise self._fail(exc) from None

    def __repr__(self) -> str:
        return (
            f"RecordBatch(position={self.position}, base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.count}, codec={self.compression_name}, size={self.size})"
        )


class LegacyBatch(Batch):
    """A magic v0/v1 log entry: one message, or a compressed wrapper of inner messages."""

    __slots__ = ("offset", "crc", "attributes", "timestamp", "_entry", "_inner", "_first_offset")

    is_legacy = True
    count = None
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    last_sequence = -1
    partition_leader_epoch = -1
    is_transactional = False
    is_control = False
    has_delete_horizon = False
    delete_horizon_ms = None

    def __init__(self, buf: memoryview, position: int, path: Optional[str]) -> None:
        self.path = path
        self.position = position
        self._buf = buf
        self._valid = None
        self._inner = None
        self._first_offset = None
        self.size = len(buf)
        self.offset, _size, self.crc, self.magic, self.attributes = decode.LEGACY_ENTRY_HEADER.unpack_from(
            _padded(buf, decode.LEGACY_ENTRY_HEADER.size), 0
        )
        self.timestamp = -1
        if self.magic > 0:
            self.timestamp = struct.unpack_from(">q", _padded(buf, 26), 18)[0]
        self._entry = None

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def base_offset(self) -> int:
        """First offset; for a compressed wrapper this decompresses it (Kafka does the same)."""
        if self.compression == 0:
            return self.offset
        if self._first_offset is None:
            inner = self.records()
            self._inner = inner  # the next records() call takes these instead of decoding again
            self._first_offset = inner[0].offset if inner else self.offset
        return self._first_offset

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic == 0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    def compute_crc(self) -> int:
        """CRC-32 from the magic byte to the end of the message."""
        return crc32(self._buf[LOG_OVERHEAD + 4 :])

    @property
    def is_valid(self) -> bool:
        if self._valid is None:
            self._valid = self.size - LOG_OVERHEAD >= decode.RECORD_OVERHEAD_V0 and self.crc == self.compute_crc()
        return self._valid

    def ensure_valid(self) -> None:
        if self.size - LOG_OVERHEAD < decode.RECORD_OVERHEAD_V0:
            raise self._fail(
                CorruptRecordError(
                    f"Record is corrupt (crc could not be retrieved as the record is too small, size = {self.size - LOG_OVERHEAD})"
                )
            )
        if not self.is_valid:
            raise self._fail(
                CorruptRecordError(f"Record is corrupt (stored crc = {self.crc}, computed crc = {self.compute_crc()})")
            )

    def offsets_problem(self) -> Optional[str]:
        """A negative offset (the entry's offset field: its last offset, an int64 that cannot overflow)."""
        if self.offset < 0:
            return f"Legacy entry has an invalid offset {self.offset} (offsets are never negative)"
        return None

    def _outer_entry(self) -> tuple:
        if self._entry is None:
            try:
                entry = decode.decode_legacy_message(self._buf, 0, len(self._buf))
            except KstoreError as exc:
                raise self._fail(exc) from None
            if entry is None:
                raise self._fail(InvalidRecordError("Found invalid record structure"))
            self._entry = entry
        return self._entry

    def records(self) -> List[Record]:
        """The message itself, or the inner messages of a compressed wrapper."""
        inner = self._inner
        if inner is not None:
            # Handed over, not kept: records refer to their batch, so a batch holding its records
            # would make a reference cycle per batch (left to the garbage collector).
            self._inner = None
            return inner
        (offset, size, crc, magic, attributes, timestamp, kp, kl, vp, vl, msg) = self._outer_entry()
        codec_id = attributes & COMPRESSION_MASK
        if codec_id == 0:
            valid = self.is_valid
            return [Record(self, self._buf, offset, timestamp, -1, size, kp, kl, vp, vl, (), crc, magic, attributes, valid)]
        try:
            return self._deep_records(codec_id, magic, vp, vl)
        except KstoreError as exc:
            raise self._fail(exc) from None

    def _deep_records(self, codec_id: int, wrapper_magic: int, vp: int, vl: int) -> List[Record]:
        data, log_append = self._inner_messages(codec_id, wrapper_magic, vp, vl)
        return decode.build_legacy_records(Record, self, data, wrapper_magic, self.offset, log_append)

    def _inner_messages(self, codec_id: int, wrapper_magic: int, vp: int, vl: int) -> Tuple[bytes, Optional[int]]:
        """The wrapper's decompressed inner message set and the LogAppendTime its messages take (None
        under CreateTime), with the deep iterator's checks of the wrapper."""
        if codec_id == 4:
            raise InvalidRecordError(f"Invalid wrapper compressionType found in legacy deep record iterator {wrapper_magic}")
        if wrapper_magic not in (0, 1):
            raise InvalidRecordError(f"Invalid wrapper magic found in legacy deep record iterator {wrapper_magic}")
        if vl < 0:
            raise InvalidRecordError(f"Found invalid compressed record set with null value (magic = {wrapper_magic})")
        data = get_codec(codec_id).decompress(self._buf[vp : vp + vl], wrapper_magic)
        log_append = self.timestamp if wrapper_magic > 0 and self.attributes & TIMESTAMP_TYPE_MASK else None
        return data, log_append

    def record_table(self) -> tuple:
        """The records as an :mod:`.encode` record table (what convert-format writes from, no object
        per record): same checks and errors as :meth:`records`."""
        (offset, _size, _crc, magic, attributes, timestamp, kp, kl, vp, vl, _msg) = self._outer_entry()
        codec_id = attributes & COMPRESSION_MASK
        if codec_id == 0:
            return encode.single_table(self._buf, offset, timestamp, kp, kl, vp, vl)
        try:
            data, log_append = self._inner_messages(codec_id, magic, vp, vl)
            return encode.legacy_table(data, magic, self.offset, log_append)
        except KstoreError as exc:
            raise self._fail(exc) from None

    def __repr__(self) -> str:
        return (
            f"LegacyBatch(position={self.position}, offset={self.offset}, magic={self.magic}, "
            f"codec={self.compression_name}, size={self.size})"
        )


def _padded(buf: memoryview, n: int) -> bytes:
    head = bytes(buf[:n])
    if len(head) < n:
        head += b"\x00" * (n - len(head))
    return head
