"""The ``.log``/``.checkpoint`` dump as Kafka's text (DumpLogSegments.dumpLog): a batch line per batch and, with
--deep-iteration, a line per record; offsets that do not follow each other are noted for the end-of-run report.

Everything streams from an mmap of the file: with the native formatter, runs of plain v2 batches
(uncompressed, not control, CRC right) are printed a MiB of input per call, with no object per
batch or record; other batches come one at a time from :func:`kstore_cli.record.read_batches`,
only one batch's records are decoded at a time, and keys and values are copied only when printed.
"""

from __future__ import annotations

import codecs
import io
import os
from array import array
from typing import Any, Dict, List, Optional, TextIO, Tuple

from kstore_cli.codecs import CODEC_NAMES, get_codec
from kstore_cli.errors import KstoreError
from kstore_cli.java import MAX_INT64, MIN_INT64, java_long
from kstore_cli.log.names import LOG_SUFFIX, base_offset_from_name
from kstore_cli.parsers import DecoderMessageParser
from kstore_cli.parsers.decoders import decoder_for
from kstore_cli.record import decode as _decode
from kstore_cli.record.batch import MAX_INT32, RECORD_BATCH_OVERHEAD, Batch, Record, RecordBatch, increment_sequence
from kstore_cli.record.reader import RELEASE_EVERY, map_file, read_batches, release_pages
from kstore_cli.record.text import ScalaHashMapOrder, java_utf8
from kstore_cli.dump.files import BOOTSTRAP_CHECKPOINT, file_name, java_absolute_path, kraft_snapshot_id, located
from kstore_cli.dump.lines import (
    check_codec,
    format_batch_head,
    format_batch_tail,
    format_control,
    format_record_data,
    header_keys_text,
    java_bool,
    records_as_iterated,
)
from kstore_cli.dump.options import Dumper, DumpOptions


def _load_native_formatter() -> Any:
    """The native record-line formatter (``kstore_cli.record._dumptext_c``), or None.

    It follows the record decoder's backend switch: with ``KSTORE_DECODER=python`` (or without the
    native decoder) every line is formatted in Python; a missing extension means the same.
    """
    if _decode.BACKEND != "native":
        return None
    try:
        from kstore_cli.record import _dumptext_c
    except ImportError:
        return None
    return _dumptext_c


#: ``format_v2_records(data, pos, end, count, base_offset, base_timestamp, log_append_time,
#: base_sequence, last, flags)``: one v2 batch's record lines as one str (None: let Python do it).
_native_module = _load_native_formatter()
_native_format_v2 = None if _native_module is None else _native_module.format_v2_records
#: ``format_v2_run(data, pos, end, budget, last, flags)``: the lines of a run of plain v2 batches, as
#: (text, where the run stopped, last offset, gaps or None).
_native_format_run = None if _native_module is None else _native_module.format_v2_run
_NATIVE_METADATA = 1  # _dumptext_c.FLAG_METADATA
_NATIVE_DATA = 2  # _dumptext_c.FLAG_DATA
_NATIVE_BYTES = 4  # _dumptext_c.FLAG_BYTES: the lines as UTF-8 bytes


class _Utf8Out:
    """A UTF-8 text stream's bytes, written directly: str is encoded as the stream would encode it, and
    the native formatter's UTF-8 bytes go out as they are (no str built from them and encoded again)."""

    __slots__ = ("_raw", "_errors", "write_bytes")

    def __init__(self, stream: io.TextIOWrapper) -> None:
        stream.flush()  # whatever the stream holds goes first
        self._raw = stream.buffer
        self._errors = stream.errors
        self.write_bytes = self._raw.write

    def write(self, text: str) -> None:
        self._raw.write(text.encode("utf-8", self._errors))

    def flush(self) -> None:
        self._raw.flush()

    @classmethod
    def over(cls, stream: TextIO) -> "Optional[_Utf8Out]":
        """One over `stream` when its bytes are exactly the UTF-8 of what is written (a buffered, UTF-8,
        untranslated TextIOWrapper), else None."""
        if type(stream) is not io.TextIOWrapper or os.linesep != "\n" or stream.line_buffering:
            return None
        try:
            if codecs.lookup(stream.encoding).name != "utf-8" or stream.buffer is None:
                return None
        except (LookupError, ValueError, AttributeError):
            return None
        return cls(stream)


def _v2_batch_line(batch: RecordBatch, position: int) -> str:
    """format_batch_head + format_batch_tail + newline for a v2 batch with a known codec, from the
    raw header fields (no property calls: dump-segment prints one per batch)."""
    a = batch.attributes
    base_sequence = batch.base_sequence
    delta = batch.last_offset_delta
    last_sequence = -1 if base_sequence == -1 else increment_sequence(base_sequence, delta)
    last_offset = batch.base_offset + delta
    if not MIN_INT64 <= last_offset <= MAX_INT64:
        last_offset = java_long(last_offset)
    horizon = f"OptionalLong[{batch.base_timestamp}]" if a & 0x40 else "OptionalLong.empty"
    return (
        f"baseOffset: {batch.base_offset} lastOffset: {last_offset} count: {batch.count}"
        f" baseSequence: {base_sequence} lastSequence: {last_sequence}"
        f" producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch}"
        f" partitionLeaderEpoch: {batch.partition_leader_epoch}"
        f" isTransactional: {'true' if a & 0x10 else 'false'} isControl: {'true' if a & 0x20 else 'false'}"
        f" deleteHorizonMs: {horizon}"
        f" position: {position} {'LogAppendTime' if a & 0x08 else 'CreateTime'}: {batch.max_timestamp}"
        f" size: {batch.size} magic: 2 compresscodec: {CODEC_NAMES[a & 0x07]}"
        f" crc: {batch.crc} isvalid: {'true' if batch.is_valid else 'false'}\n"
    )



def _is_kafka_default(parser: Any) -> bool:
    """Whether `parser` is Kafka's default (StringDecoder keys and values): the one printed inline, or natively."""
    string = decoder_for(None)
    return type(parser) is DecoderMessageParser and parser._key is string and parser._value is string


class TextLogDump(Dumper):
    """The log part of the text dump; the non-consecutive offsets it finds wait in `non_consecutive`."""

    def __init__(self, out: TextIO, err: TextIO, options: DumpOptions) -> None:
        super().__init__(out, err, options)
        self.non_consecutive: Dict[str, array] = {}
        self.non_consecutive_order = ScalaHashMapOrder()  # see TextDumper
        self._native_flags = self.native_flags() if _native_format_v2 is not None else None
        # With the native formatter, a UTF-8 stdout gets its bytes straight from C.
        raw = _Utf8Out.over(out) if self._native_flags is not None else None
        if raw is not None:
            self.out = raw  # type: ignore[assignment]
            self._native_flags |= _NATIVE_BYTES

    def dump_log(self, path: str) -> None:
        o = self.o
        write = self.out.write
        for notice in o.decoder_notices:
            write(notice + "\n")
        name = file_name(path)
        if name.endswith(LOG_SUFFIX):
            write(f"Log starting offset: {base_offset_from_name(path)}\n")
        elif name == BOOTSTRAP_CHECKPOINT:
            write("KRaft bootstrap snapshot\n")
        else:
            offset, epoch = kraft_snapshot_id(path)
            write(f"Snapshot end offset: {offset}, epoch: {epoch}\n")
        buf = map_file(path)
        limit = min(o.max_bytes, len(buf))
        self._last_offset = -1  # Kafka tracks consecutive offsets per file
        valid = 0
        run = self._native_flags is not None and o.deep_iteration and _native_format_run is not None
        while True:
            if run:
                valid = self.dump_native_run(path, buf, valid, limit)
            valid, more = self.dump_batches(path, buf, valid, limit, run)
            if not more:
                break
        trailing = limit - valid
        if trailing > 0 and o.max_bytes == MAX_INT32:
            write(f"Found {trailing} invalid bytes at the end of {file_name(path)}\n")
            self.problem()

    def dump_native_run(self, path: str, buf: memoryview, position: int, limit: int) -> int:
        """Print the plain v2 batches from `position` on natively, a few MiB per call; return where they end."""
        while True:
            text, end, self._last_offset, gaps = _native_format_run(
                buf, position, limit, RELEASE_EVERY // 4, self._last_offset, self._native_flags)
            if gaps:
                self.non_consecutive_gaps(path, gaps)
            if end == position:
                return end
            if self._native_flags & _NATIVE_BYTES:  # type: ignore[operator]
                self.out.write_bytes(text)  # type: ignore[attr-defined]
            else:
                self.out.write(text)
            release_pages(buf, position, end)
            position = end

    def dump_batches(self, path: str, buf: memoryview, valid: int, limit: int, run: bool) -> Tuple[int, bool]:
        """Print batches from `valid` on, the general way; with `run`, stop before one the native run may take.
        Returns where it stopped, and whether batches may follow."""
        write = self.out.write
        deep = self.o.deep_iteration
        for batch in read_batches(buf, start=valid, end=limit, path=path, check_crc=True):
            if type(batch) is RecordBatch and batch.magic == 2 and batch.attributes & 0x07 in CODEC_NAMES:
                write(_v2_batch_line(batch, valid))
                if not batch.is_valid:
                    self.problem()
                if deep:
                    self.dump_records(path, batch)
            else:
                head = format_batch_head(batch)
                if batch.compression not in CODEC_NAMES:
                    write(head)  # Kafka prints the line up to the codec, then dies
                    check_codec(batch)
                write(head + format_batch_tail(batch, valid) + "\n")
                if not batch.is_valid:
                    self.problem()
                if deep:
                    self.dump_records(path, batch)
            valid += batch.size
            # magic 2, uncompressed, not control: the native run's kind of batch
            if run and valid + RECORD_BATCH_OVERHEAD <= limit and buf[valid + 16] == 2 and not buf[valid + 22] & 0x27:
                return valid, True
        return valid, False

    def native_flags(self) -> Optional[int]:
        """The flags for the native formatter under these options, or None when it cannot print them."""
        o = self.o
        flags = 0 if o.skip_record_metadata else _NATIVE_METADATA
        if o.print_data:
            if not _is_kafka_default(o.parser):
                return None  # only Kafka's default (StringDecoder keys and values) is native
            flags |= _NATIVE_DATA
        return flags

    def dump_records_native(self, path: str, batch: Batch, flags: int) -> bool:
        """Print a plain v2 batch's record lines natively, in one write; False when Python must."""
        count = batch.count
        if count <= 0 or batch.size < RECORD_BATCH_OVERHEAD:
            return False
        codec = batch.attributes & 0x07
        if codec == 0:
            data = batch.buffer
            start = RECORD_BATCH_OVERHEAD
        else:
            try:
                data = get_codec(codec).decompress(batch.buffer[RECORD_BATCH_OVERHEAD:], 2)
            except KstoreError:
                return False  # the Python path raises it, after the same output
            start = 0
        out = _native_format_v2(
            data, start, len(data), count, batch.base_offset, batch.base_timestamp,
            batch.max_timestamp if batch.attributes & 0x08 else None, batch.base_sequence, self._last_offset, flags,
        )
        if out is None:
            return False
        text, self._last_offset, gaps = out
        if gaps:
            self.non_consecutive_gaps(path, gaps)
        if flags & _NATIVE_BYTES:
            self.out.write_bytes(text)  # type: ignore[attr-defined]
        else:
            self.out.write(text)
        return True

    def non_consecutive_gaps(self, path: str, gaps: List[int]) -> None:
        """Note non-consecutive offsets: `gaps` holds (last, offset) pairs, flat."""
        absolute = java_absolute_path(path)
        seq = self.non_consecutive.get(absolute)
        if seq is None:
            seq = self.non_consecutive[absolute] = array("q")
        seq.extend(gaps)
        self.non_consecutive_order.put(absolute, len(gaps) // 2)


    def dump_records(self, path: str, batch: Batch) -> None:
        flags = self._native_flags
        if flags is not None and batch.magic == 2 and not batch.is_legacy and not batch.is_control:
            if self.dump_records_native(path, batch, flags):
                return
        records, failure = records_as_iterated(batch)
        self.dump_record_lines(path, batch, records)
        if failure is not None:
            raise located(failure, path, batch.position)

    def dump_record_lines(self, path: str, batch: Batch, records: List[Record]) -> None:
        """The records' lines the Python way, in one write (what a failing record had printed goes out first)."""
        last = self._last_offset
        skip = self.o.skip_record_metadata
        control = batch.is_control
        parser = self.o.parser if self.o.print_data and not control else None
        default_parser = _is_kafka_default(parser)  # Kafka's default parser inline: no call per record
        v2 = batch.magic >= 2
        ts_label = f" {batch.timestamp_type_name}: "
        parts: List[str] = []
        append = parts.append
        for record in records:
            offset = record.offset
            if not MIN_INT64 <= offset <= MAX_INT64:
                offset = java_long(offset)  # Java's baseOffset + offsetDelta wraps
            if last == -1:
                last = offset
            elif offset != last + 1 and offset != java_long(last + 1):
                self.non_consecutive_gaps(path, [last, offset])
            last = offset
            self._last_offset = last
            prefix = "| "
            line = ""
            try:
                if not skip:
                    timestamp = record.timestamp
                    if not MIN_INT64 <= timestamp <= MAX_INT64:
                        timestamp = java_long(timestamp)
                    line = (f"| offset: {offset}{ts_label}{timestamp}"
                            f" keySize: {record.key_size} valueSize: {record.value_size}")
                    if v2:
                        keys = header_keys_text(record) if record._headers else "[]"
                        line += f" sequence: {record.sequence} headerKeys: {keys}"
                    elif record.is_legacy:
                        # The stray '}' is Kafka's (a typo in DumpLogSegments).
                        line += f" isValid: {java_bool(record.is_valid)} crc: {record.crc}}}"
                    prefix = " "
                    if control:
                        line += format_control(record)
                if default_parser:
                    key = record.key
                    if key is not None:
                        line += f"{prefix}key: {java_utf8(key)}"
                    value = record.value
                    if value is not None:
                        line += f" payload: {java_utf8(value)}"
                elif parser is not None:
                    line += format_record_data(parser, record, prefix)
            except KstoreError as exc:
                append(line)
                self.out.write("".join(parts))
                raise located(exc, path, batch.position) from None
            append(line)
            append("\n")
        if parts:
            self.out.write("".join(parts))
        self._last_offset = last

    _last_offset = -1
