"""The files of the metadata log read as Kafka reads them: segments and snapshots, batch by batch.

Each record value is decoded as ``MetadataRecordSerde`` decodes it (frame version, api key, version, then the
record's schema). Reading a log segment can stop where Kafka's recovery would cut it (a :class:`LogCut`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from kstore_cli.errors import CorruptDataError, CorruptRecordError
from kstore_cli.parsers.control import control_type_name
from kstore_cli.parsers.metadata import METADATA_RECORD_TYPES
from kstore_cli.parsers.schema import read_message
from kstore_cli.parsers.wire import JavaError, WireReader
from kstore_cli.record.batch import parse_control_key
from kstore_cli.record.reader import read_batches


@dataclass
class MetadataRecord:
    """One metadata record as read from disk; ``values`` None: not read (``skipped`` says why)."""

    offset: int
    api_key: int
    version: int
    values: Optional[Dict[str, Any]]
    skipped: Optional[str] = None


def decode_record(value: Optional[bytes], path: str, position: int, offset: int) -> MetadataRecord:
    """A metadata record value decoded as ``MetadataRecordSerde.read`` does.

    A type or version newer than kstore's schemas (those of the Kafka named in
    :mod:`kstore_cli.parsers.metadata_records`) is read as far as the schemas allow: a newer version with the
    fields its schema knows (tagged fields it does not know skipped, as Kafka's generated readers do); a type
    kstore does not know, or a newer version that does not read so, comes back with ``values`` None and
    ``skipped`` saying why (the caller names it). Bytes that do not parse raise CorruptDataError.
    """
    if value is None:
        raise CorruptDataError(f"metadata record at offset {offset} has a null value", path=path, position=position)
    r = WireReader(value)
    try:
        frame = r.unsigned_varint()
        api_key = r.unsigned_varint()
        version = r.unsigned_varint()
    except JavaError:
        raise CorruptDataError(f"metadata record at offset {offset}: expected a frame header, found "
                               f"{len(value)} byte(s)", path=path, position=position) from None
    if frame != 1:
        raise CorruptDataError(f"metadata record at offset {offset}: expected frame version 1, found {frame}",
                               path=path, position=position)
    t = METADATA_RECORD_TYPES.get(api_key)
    if t is None:
        return MetadataRecord(offset, api_key, version, None, f"type {api_key} is unknown to this kstore")
    newer = version > t.message.valid.hi
    try:
        values = read_message(t.message, r, version)
    except JavaError as e:
        if newer:
            return MetadataRecord(offset, api_key, version, None, f"{t.message.name} version {version} does not "
                                  f"read with the fields of version {t.message.valid.hi}: {e.text}")
        raise CorruptDataError(f"metadata record at offset {offset}: {t.message.name} v{version} does not parse: "
                               f"{e.text}", path=path, position=position) from None
    if r.remaining():
        if newer:
            return MetadataRecord(offset, api_key, version, None, f"{t.message.name} version {version} has "
                                  f"{r.remaining()} byte(s) after the fields of version {t.message.valid.hi}")
        raise CorruptDataError(f"metadata record at offset {offset}: {r.remaining()} byte(s) after the "
                               f"{t.message.name}", path=path, position=position)
    return MetadataRecord(offset, api_key, version, values)


@dataclass
class FileBatch:
    """A batch of a metadata log or snapshot file: its offsets, max timestamp, control types, records."""

    path: str
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    control: List[str]
    records: List[MetadataRecord]


@dataclass
class LogCut:
    """Where Kafka's recovery cuts the metadata log. ``KafkaMetadataLog`` opens it with recovery point 0 as
    after an unclean shutdown, so every start runs ``LogSegment.recover`` over every segment: the .log is
    truncated at the first batch that is incomplete or fails its checks and the later segments are deleted.
    kstore reads the log as that leaves it and changes nothing on disk."""

    path: str
    position: int
    #: the bytes from `position` to the end of the file
    size: int
    what: str
    #: the segments after this one (Kafka deletes them)
    later: List[str] = field(default_factory=list)
    #: a torn tail: in the last segment, and no whole batch continuing the log after it (a write cut short,
    #: the normal state after a crash), as opposed to damage with intact batches after it
    torn: bool = False

    def describe(self) -> str:
        where = f"{self.path} at byte {self.position}: {self.what}"
        if self.torn:
            return (f"{where}: a torn tail ({self.size} byte(s)); the image is the log without it, as Kafka's "
                    f"recovery loads it (the broker cuts it at its next start; kstore left the file as it is)")
        lost = f"{self.size} byte(s)" + (f" and the {len(self.later)} later segment(s)" if self.later else "")
        return (f"{where}: damage, not a torn write (the log goes on after it); the image stops there, where "
                f"Kafka's recovery cuts the log and deletes {lost} at the broker's next start")


def read_file_batches(path: str, skip_below: int = -1, cuts: Optional[List[LogCut]] = None
                      ) -> Iterator[FileBatch]:
    """The batches of a metadata segment or snapshot file, CRCs checked; records decoded lazily per batch.

    A damaged batch raises CorruptDataError naming the file and byte.
    Trailing bytes that are not a whole batch raise CorruptDataError too. With `cuts` (a log segment), the
    read stops instead where Kafka's recovery would cut (LogSegment.recover: a CorruptRecordException or an
    incomplete batch) and a :class:`LogCut` is appended to `cuts`.
    Batches that end below ``skip_below`` (covered by a snapshot) are checked but their records not decoded.
    """
    end = 0
    size = os.path.getsize(path)
    batches = read_batches(path, check_crc=True)
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                break
            batch.ensure_valid()
        except CorruptRecordError as e:
            if cuts is None:
                raise
            cuts.append(LogCut(path, end, size - end, e.message))
            return
        if batch.magic != 2:
            raise CorruptDataError(f"expected a magic 2 batch in a metadata log, found magic {batch.magic}",
                                   path=path, position=batch.position)
        control: List[str] = []
        records: List[MetadataRecord] = []
        for rec in (batch.records() if batch.last_offset >= skip_below else ()):
            if batch.is_control:
                _version, type_id = parse_control_key(rec.key)
                control.append(control_type_name(type_id))
                continue
            records.append(decode_record(rec.value, path, batch.position, rec.offset))
        end = batch.position + batch.size
        yield FileBatch(path, batch.position, batch.base_offset, batch.last_offset, batch.max_timestamp,
                        control, records)
    if end < size:
        what = f"expected a complete batch, found {size - end} trailing byte(s)"
        if cuts is None:
            raise CorruptDataError(f"{what} (a torn write; Kafka's recovery cuts them)", path=path, position=end)
        cuts.append(LogCut(path, end, size - end, what))
