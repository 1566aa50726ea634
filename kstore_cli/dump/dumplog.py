"""Kafka's ``kafka-dump-log.sh`` (``kafka.tools.DumpLogSegments``), re-implemented.

Text mode writes, byte for byte, what Kafka's tool writes to its stdout and stderr, to the two
text streams it is given (flushing one before writing to the other, so a shared pipe sees the
same interleaving as Java's auto-flushing ``System.out``/``System.err``). Where Kafka's tool
dies with an exception, the same stdout is written and a :class:`~kstore_cli.errors.KstoreError`
is raised for the caller to report; nothing else is printed.

JSON Lines mode (``json_lines=True``) writes one object per line instead, and reports problems
as ``{"type": "error", ...}`` lines and goes on where it can.

Record lines and batch lines are plain functions (:func:`format_batch_line`,
:func:`format_record_line`, ...), so other commands can print records the way
``kafka-dump-log`` does.

Everything streams from an mmap of the file: with the native formatter, runs of plain v2 batches
(uncompressed, not control, CRC right) are printed a MiB of input per call, with no object per
batch or record; other batches come one at a time from :func:`kstore_cli.record.read_batches`,
only one batch's records are decoded at a time, and keys and values are copied only when printed.

Never imports click or rich.
"""

from __future__ import annotations

import base64
import codecs
import io
import json
import os
from array import array
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

from kstore_cli.codecs import CODEC_NAMES, get_codec
from kstore_cli.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    ExitStatus,
    FileUnreadableError,
    KstoreError,
    UsageError,
)
from kstore_cli.java import java_long
from kstore_cli.parsers import RAW, DecoderMessageParser, decode_control, make_parser, render_control
from kstore_cli.parsers.decoders import decoder_for
from kstore_cli.record.text import ScalaHashMapOrder, java_utf8
from kstore_cli.record.reader import read_batches
from kstore_cli.record.batch import (
    CONTROL_TYPE_NAMES,
    MAX_INT32,  # Integer.MAX_VALUE: --max-bytes' default, the value that keeps the trailing-bytes message
    RECORD_BATCH_OVERHEAD,
    Batch,
    Record,
    RecordBatch,
    increment_sequence,
    parse_control_key,
)
from kstore_cli.record import decode as _decode
from kstore_cli.record.decode import decode_v2_records
from kstore_cli.log.index import OffsetIndex, TimeIndex, TransactionIndex
from kstore_cli.log.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    base_offset_from_name,
)
from kstore_cli.record.reader import RELEASE_EVERY, map_file, release_pages
from kstore_cli.log.snapshot import ProducerEntry, parse_snapshot

#: The default of --max-message-size (5 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: DumpLogSegments.RecordIndent
RECORD_INDENT = "|"

CHECKPOINT_SUFFIX = ".checkpoint"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"

#: kafka.serializer.* decoder classes Kafka still accepts, with the notice it prints for each.
DEPRECATED_DECODERS = {
    "kafka.serializer.StringDecoder": "org.apache.kafka.tools.api.StringDecoder",
    "kafka.serializer.LongDecoder": "org.apache.kafka.tools.api.LongDecoder",
    "kafka.serializer.IntegerDecoder": "org.apache.kafka.tools.api.IntegerDecoder",
    "kafka.serializer.DefaultDecoder": "org.apache.kafka.tools.api.DefaultDecoder",
}



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


# ------------------------------------------------------------------------------ small Java-isms


def java_bool(value: bool) -> str:
    """``String.valueOf(boolean)``."""
    return "true" if value else "false"


def optional_long(value: Optional[int]) -> str:
    """``OptionalLong.toString()``: ``OptionalLong.empty`` or ``OptionalLong[n]``."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1


def split_files_option(value: str) -> List[str]:
    """``String.split(",")``: no trimming, trailing empty strings dropped (``""`` gives ``[""]``)."""
    if value == "":
        return [""]
    parts = value.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def java_file_path(arg: str) -> str:
    """``new File(arg).toString()`` on Unix: repeated slashes collapsed, a trailing slash dropped."""
    if "//" in arg or (arg.endswith("/") and arg != "/"):
        out = []
        prev = ""
        for ch in arg:
            if ch == "/" and prev == "/":
                continue
            out.append(ch)
            prev = ch
        arg = "".join(out)
        if len(arg) > 1 and arg.endswith("/"):
            arg = arg[:-1]
    return arg


def java_absolute_path(path: str) -> str:
    """``File.getAbsolutePath()``: the working directory prepended, nothing else normalised."""
    if path.startswith("/"):
        return path
    cwd = os.getcwd()
    return cwd if path == "" else cwd.rstrip("/") + "/" + path


def file_name(path: str) -> str:
    """``File.getName()``: the text after the last ``/``."""
    return path.rsplit("/", 1)[-1]


def file_suffix(path: str) -> str:
    """The suffix DumpLogSegments dispatches on: from the LAST ``.`` of the file name.

    A name with no ``.`` is a usage error (Kafka dies with StringIndexOutOfBoundsException).
    """
    name = file_name(path)
    dot = name.rfind(".")
    if dot < 0:
        raise UsageError(
            f"the file name {name!r} has no '.', so its kind (.log, .index, .timeindex, .snapshot, "
            ".txnindex, .checkpoint) is unknown (Kafka: StringIndexOutOfBoundsException: begin -1)",
            path=path,
        )
    return name[dot:]


def sibling_path(path: str, suffix: str) -> str:
    """The absolute path of the same segment's file with another suffix, as DumpLogSegments builds it."""
    absolute = java_absolute_path(path)
    parent = absolute.rsplit("/", 1)[0] or "/"
    return parent.rstrip("/") + "/" + file_name(path).split(".", 1)[0] + suffix


def kraft_snapshot_id(path: str) -> Tuple[int, int]:
    """(end offset, epoch) of a ``<20-digit offset>-<10-digit epoch>.checkpoint`` name (Snapshots.parse)."""
    name = file_name(path)
    head, mid = name[:20], name[21:31]
    if len(name) < 31 or not head.isdigit() or not mid.isdigit():
        raise UsageError(
            f"{name!r} is not a KRaft snapshot name (<20-digit end offset>-<10-digit epoch>.checkpoint)",
            path=path,
        )
    return int(head), int(mid)


def deprecated_decoder_notice(class_name: Optional[str]) -> Optional[str]:
    """The line Kafka prints to stdout when given a deprecated kafka.serializer.* decoder class."""
    if class_name in DEPRECATED_DECODERS:
        return f"{class_name} is deprecated. Please use {DEPRECATED_DECODERS[class_name]} instead"
    return None


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


def _v2_batch_line(batch: RecordBatch, position: int) -> str:
    """format_batch_head + format_batch_tail + newline for a v2 batch with a known codec, from the
    raw header fields (no property calls: dump-segment prints one per batch)."""
    a = batch.attributes
    base_sequence = batch.base_sequence
    delta = batch.last_offset_delta
    last_sequence = -1 if base_sequence == -1 else increment_sequence(base_sequence, delta)
    last_offset = batch.base_offset + delta
    if not _LONG_MIN <= last_offset <= _LONG_MAX:
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
    if not (_LONG_MIN <= offset <= _LONG_MAX and _LONG_MIN <= timestamp <= _LONG_MAX):
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
    if not _LONG_MIN <= offset <= _LONG_MAX:
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


# ------------------------------------------------------------------------------ options and the dump


class DumpOptions:
    """What to dump and how (DumpLogSegmentsOptions).

    `parser` renders keys and values when `print_data` is set (None: Kafka's default,
    UTF-8 strings); `decoder_notices` are the deprecation lines Kafka prints for each
    ``.log``/``.checkpoint`` file; `json_decoder` names the decoder given on the command line
    (``--json`` then writes what it decodes as JSON values instead of base64).
    """

    __slots__ = (
        "deep_iteration",
        "print_data",
        "skip_record_metadata",
        "verify_index_only",
        "index_sanity_check",
        "max_message_size",
        "max_bytes",
        "parser",
        "json_lines",
        "decoder_notices",
        "json_decoder",
    )

    def __init__(
        self,
        *,
        deep_iteration: bool = False,
        print_data: bool = False,
        skip_record_metadata: bool = False,
        verify_index_only: bool = False,
        index_sanity_check: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_bytes: int = MAX_INT32,
        parser: Any = None,
        json_lines: bool = False,
        decoder_notices: Sequence[str] = (),
        json_decoder: Optional[str] = None,
    ) -> None:
        if max_message_size < 0:
            raise UsageError(f"--max-message-size must not be negative (got {max_message_size})")
        if max_bytes < 0:
            raise UsageError(f"--max-bytes must not be negative (got {max_bytes})")
        self.print_data = print_data
        self.deep_iteration = deep_iteration or print_data
        self.skip_record_metadata = skip_record_metadata
        self.verify_index_only = verify_index_only
        self.index_sanity_check = index_sanity_check
        self.max_message_size = max_message_size
        self.max_bytes = max_bytes
        self.parser = parser if parser is not None or not print_data else make_parser()
        self.json_lines = json_lines
        self.decoder_notices = tuple(decoder_notices)
        #: with --json: the name of the decoder the user gave (keys/values then come out decoded), or None
        self.json_decoder = json_decoder

    @classmethod
    def from_command_line(cls, *, message_decoders: Dict[str, bool], key_decoder_class: Optional[str] = None,
                          key_decoder: Optional[str] = None, value_decoder_class: Optional[str] = None,
                          value_decoder: Optional[str] = None, print_data_log: bool = False,
                          json_lines: bool = False, **rest: Any) -> "DumpOptions":
        """DumpLogSegmentsOptions from kafka-dump-log's flags: `message_decoders` maps each of
        :data:`MESSAGE_DECODERS` to its flag; any decoder implies --print-data-log; a class and a friendly
        decoder for the same side is a usage error; Kafka's deprecation lines for the decoder classes
        (value first, then key, as Kafka builds them) go with text output; `rest` are the plain options."""
        key_name = _one_decoder(key_decoder_class, key_decoder, "key")
        value_name = _one_decoder(value_decoder_class, value_decoder, "value")
        unknown = set(message_decoders) - set(MESSAGE_DECODERS)
        if unknown:
            raise ValueError(f"unknown message decoders: {sorted(unknown)}")
        given = [name for name in MESSAGE_DECODERS if message_decoders.get(name)]
        flags = {name.replace("-", "_"): bool(message_decoders.get(name)) for name in MESSAGE_DECODERS}
        parser = make_parser(**flags, key_decoder=key_name, value_decoder=value_name)
        json_decoder = given[0] if given else None
        if json_decoder is None and (key_name is not None or value_name is not None):
            json_decoder = f"key={key_name or 'string'},value={value_name or 'string'}"
        notices = []
        if not given and not json_lines:
            notices = [n for n in map(deprecated_decoder_notice, (value_decoder_class, key_decoder_class)) if n]
        print_data = print_data_log or bool(given) or key_name is not None or value_name is not None
        return cls(print_data=print_data, parser=parser, json_lines=json_lines, decoder_notices=notices,
                   json_decoder=json_decoder, **rest)


#: kafka-dump-log's record decoders of internal topics, in its options' order (--offsets-decoder, ...).
MESSAGE_DECODERS = ("offsets", "transaction-log", "cluster-metadata", "remote-log-metadata", "share-group-state")


def _one_decoder(class_name: Optional[str], friendly: Optional[str], which: str) -> Optional[str]:
    if class_name is not None and friendly is not None:
        raise UsageError(f"give either --{which}-decoder-class or --{which}-decoder, not both")
    return friendly if friendly is not None else class_name


def files_to_dump(files_options: Sequence[str], paths: Sequence[str]) -> List[str]:
    """The files of every ``--files a,b`` (Kafka's split) in order, then the positional paths."""
    files: List[str] = []
    for value in files_options:
        files.extend(split_files_option(value))
    return files + list(paths)


def dump_files(files: Sequence[str], out: TextIO, err: TextIO, options: DumpOptions) -> int:
    """Dump each file in order, as ``kafka-dump-log --files`` does; return the exit status.

    0: nothing wrong found; 1: the data has problems (invalid batches, index mismatches,
    corrupt snapshots, trailing bytes). Where Kafka's tool dies, the KstoreError is raised
    (text mode) after the same output; JSON mode reports it as an error line and goes on.
    """
    dumper: _Dumper = _JsonDumper(out, err, options) if options.json_lines else _TextDumper(out, err, options)
    try:
        return dumper.run(files)
    finally:
        out.flush()
        err.flush()


# ------------------------------------------------------------------------------ index verification (shared)


def _slice_end(log: memoryview, position: int, size: int, log_path: str) -> int:
    """FileRecords.slice(position, size): the end of the slice, with Kafka's range checks."""
    if position < 0:
        raise CorruptIndexError(f"Invalid position: {position} in read from {log_path}")
    if position > len(log):
        raise CorruptIndexError(
            f"Slice from position {position} exceeds end position of {log_path} ({len(log)} bytes)"
        )
    end = position + size
    if end > MAX_INT32 or end > len(log):
        end = len(log)
    return end


def first_batch_at(log: memoryview, position: int, max_size: int, log_path: str) -> Batch:
    """The first batch within `max_size` bytes at `position` of a log (DumpLogSegments.dumpIndex)."""
    end = _slice_end(log, position, max_size, log_path)
    for batch in read_batches(log, start=position, end=end, path=log_path):
        return batch
    raise CorruptIndexError(
        f"no complete batch within --max-message-size {max_size} bytes at position {position} "
        f"of {log_path} (Kafka: NoSuchElementException)"
    )


def _located(exc: KstoreError, path: str, position: Optional[int]) -> KstoreError:
    """Give an error the file (and byte position) it is about, when it has none yet."""
    if exc.path is None:
        exc.path = path
        if exc.position is None:
            exc.position = position
    return exc


def _zero_tail_stop(i: int, offset: int, base: int) -> bool:
    # "since it is a sparse file, in the event of a crash there may be many zero entries, stop if we see one"
    return i > 0 and offset == base


# ------------------------------------------------------------------------------ the two writers


class _Dumper:
    def __init__(self, out: TextIO, err: TextIO, options: DumpOptions) -> None:
        self.out = out
        self.err = err
        self.o = options
        self.status = ExitStatus.OK

    def problem(self, status: ExitStatus = ExitStatus.PROBLEMS) -> None:
        if status > self.status:
            self.status = status

    def run(self, files: Sequence[str]) -> int:
        raise NotImplementedError


class _TextDumper(_Dumper):
    """Kafka's exact text."""

    def __init__(self, out: TextIO, err: TextIO, options: DumpOptions) -> None:
        super().__init__(out, err, options)
        self.index_mismatches: Dict[str, array] = {}
        self.time_mismatches: Dict[str, List[Tuple[int, int]]] = {}
        self.time_out_of_order: Dict[str, List[Tuple[int, int]]] = {}
        self.time_not_found: Dict[str, List[Tuple[int, int]]] = {}
        self.non_consecutive: Dict[str, array] = {}
        # Kafka's five maps are scala mutable.HashMaps keyed by absolute path: their report blocks come in
        # hash order, which depends on every put (see ScalaHashMapOrder), so each put is replayed here.
        self.index_mismatches_order = ScalaHashMapOrder()
        self.time_mismatches_order = ScalaHashMapOrder()
        self.time_out_of_order_order = ScalaHashMapOrder()
        self.time_not_found_order = ScalaHashMapOrder()
        self.non_consecutive_order = ScalaHashMapOrder()
        self._native_flags = self.native_flags() if _native_format_v2 is not None else None
        # With the native formatter, a UTF-8 stdout gets its bytes straight from C.
        raw = _Utf8Out.over(out) if self._native_flags is not None else None
        if raw is not None:
            self.out = raw  # type: ignore[assignment]
            self._native_flags |= _NATIVE_BYTES

    # stderr lines: flush stdout first so a shared pipe keeps the call order
    def error_line(self, line: str) -> None:
        self.out.flush()
        self.err.write(line + "\n")
        self.err.flush()

    def run(self, files: Sequence[str]) -> int:
        write = self.out.write
        for arg in files:
            path = java_file_path(arg)
            write(f"Dumping {path}\n")
            suffix = file_suffix(path)
            if suffix in (LOG_SUFFIX, CHECKPOINT_SUFFIX):
                self.dump_log(path)
            elif suffix == INDEX_SUFFIX:
                self.dump_index(path)
            elif suffix == TIME_INDEX_SUFFIX:
                self.dump_time_index(path)
            elif suffix == SNAPSHOT_SUFFIX:
                self.dump_snapshot(path)
            elif suffix == TXN_INDEX_SUFFIX:
                self.dump_txn_index(path)
            else:
                self.error_line(f"Ignoring unknown file {path}")
        self.print_summaries()
        if getattr(self.o.parser, "skipped", 0):
            self.problem()  # Kafka's parser printed "skipping" for records it could not decode
        return int(self.status)

    # ---------------------------------------------------------------- .log / .checkpoint
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
            parser = o.parser
            # Only Kafka's default (StringDecoder keys and values) is native.
            string = decoder_for(None)
            if type(parser) is not DecoderMessageParser or parser._key is not string or parser._value is not string:
                return None
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
        o = self.o
        write = self.out.write
        flags = self._native_flags
        if flags is not None and batch.magic == 2 and not batch.is_legacy and not batch.is_control:
            if self.dump_records_native(path, batch, flags):
                return
        records, failure = records_as_iterated(batch)
        pairs = self.non_consecutive
        absolute = None
        last = self._last_offset
        skip = o.skip_record_metadata
        control = batch.is_control
        parser = o.parser if o.print_data and not control else None
        # Kafka's default parser (StringDecoder keys and values) inline: no call per record.
        string = decoder_for(None)
        default_parser = (type(parser) is DecoderMessageParser and parser._key is string  # type: ignore[attr-defined]
                          and parser._value is string)  # type: ignore[attr-defined]
        v2 = batch.magic >= 2
        ts_label = f" {batch.timestamp_type_name}: "
        # One write per batch; what a failing record had printed so far goes out before the error.
        parts: List[str] = []
        append = parts.append
        for record in records:
            offset = record.offset
            if not _LONG_MIN <= offset <= _LONG_MAX:
                offset = java_long(offset)  # Java's baseOffset + offsetDelta wraps
            if last == -1:
                last = offset
            elif offset != last + 1 and offset != java_long(last + 1):
                if absolute is None:
                    absolute = java_absolute_path(path)
                seq = pairs.get(absolute)
                if seq is None:
                    seq = pairs[absolute] = array("q")
                seq.append(last)
                seq.append(offset)
                self.non_consecutive_order.put(absolute)
            last = offset
            self._last_offset = last
            prefix = "| "
            line = ""
            try:
                if not skip:
                    timestamp = record.timestamp
                    if not _LONG_MIN <= timestamp <= _LONG_MAX:
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
                write("".join(parts))
                raise _located(exc, path, batch.position) from None
            append(line)
            append("\n")
        if parts:
            write("".join(parts))
        self._last_offset = last
        if failure is not None:
            raise _located(failure, path, batch.position)

    _last_offset = -1

    # ---------------------------------------------------------------- .index
    def dump_index(self, path: str) -> None:
        o = self.o
        write = self.out.write
        base = base_offset_from_name(path)
        log_path = sibling_path(path, LOG_SUFFIX)
        log = map_file(log_path)
        index = OffsetIndex(path, base)
        if index.entries == 0:
            write(f"{path} is empty.\n")
            return
        if o.index_sanity_check:
            index.sanity_check()
            write(f"{path} passed sanity check.\n")
            return
        for i in range(index.entries):
            offset, position = index.entry(i)
            if _zero_tail_stop(i, offset, index.base_offset):
                return
            try:
                last = java_long(first_batch_at(log, position, o.max_message_size, log_path).last_offset)
            except KstoreError as exc:
                raise _located(exc, path, i * index.entry_size) from None
            if last != offset:
                absolute = java_absolute_path(path)
                seq = self.index_mismatches.get(absolute)
                if seq is None:
                    seq = self.index_mismatches[absolute] = array("q")
                seq.append(offset)
                seq.append(last)
                self.index_mismatches_order.put(absolute)
                self.problem()
            if not o.verify_index_only:
                write(f"offset: {offset} position: {position}\n")

    # ---------------------------------------------------------------- .timeindex
    def dump_time_index(self, path: str) -> None:
        o = self.o
        write = self.out.write
        base = base_offset_from_name(path)
        log_path = sibling_path(path, LOG_SUFFIX)
        log = map_file(log_path)
        index = _sibling_offset_index(path, base)
        time_index = TimeIndex(path, base)
        if o.index_sanity_check:
            time_index.sanity_check()
            write(f"{path} passed sanity check.\n")
            return
        absolute = java_absolute_path(path)
        try:
            self._check_time_index(path, absolute, time_index, index, log, log_path)
        except KstoreError as exc:
            raise _located(exc, path, None) from None

    def _check_time_index(self, path: str, absolute: str, time_index: TimeIndex, index: OffsetIndex,
                          log: memoryview, log_path: str) -> None:
        o = self.o
        write = self.out.write
        for kind, timestamp, offset, a, b in verify_time_index(time_index, index, log, log_path):
            # TimeIndexDumpErrors puts a file's buffer into its map only when it creates it
            if kind == "not-found":
                if absolute not in self.time_not_found:
                    self.time_not_found_order.put(absolute)
                self.time_not_found.setdefault(absolute, []).append((a, b))
                self.problem()
            elif kind == "checked":
                if a is not None:
                    if absolute not in self.time_mismatches:
                        self.time_mismatches_order.put(absolute)
                    self.time_mismatches.setdefault(absolute, []).append(a)
                    self.problem()
                if b is not None:
                    if absolute not in self.time_out_of_order:
                        self.time_out_of_order_order.put(absolute)
                    self.time_out_of_order.setdefault(absolute, []).append(b)
                    self.problem()
            if not o.verify_index_only:
                write(f"timestamp: {timestamp} offset: {offset}\n")

    # ---------------------------------------------------------------- .snapshot / .txnindex
    def dump_snapshot(self, path: str) -> None:
        write = self.out.write
        data = map_file(path)
        try:
            snapshot = parse_snapshot(data, path)
        except CorruptSnapshotError as exc:
            self.error_line(exc.message)
            self.problem()
            return
        for entry in snapshot.producers:
            write(format_snapshot_entry(entry) + "\n")

    def dump_txn_index(self, path: str) -> None:
        write = self.out.write
        for txn in TransactionIndex(path, base_offset_from_name(path)):
            write(
                f"version: {txn.version} producerId: {txn.producer_id} firstOffset: {txn.first_offset}"
                f" lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}\n"
            )

    # ---------------------------------------------------------------- end-of-run reports (stderr)
    def print_summaries(self) -> None:
        lines: List[str] = []
        for absolute in self.index_mismatches_order.order():
            seq = self.index_mismatches[absolute]
            lines.append(f"Mismatches in :{absolute}")
            # Kafka prepends to a Scala List: most recent first.
            for k in range(len(seq) - 2, -1, -2):
                lines.append(f"  Index offset: {seq[k]}, log offset: {seq[k + 1]}")
        for absolute in self.time_mismatches_order.order():
            pairs = self.time_mismatches[absolute]
            lines.append("Found timestamp mismatch in :" + absolute)
            lines.extend(f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs)
        for absolute in self.time_out_of_order_order.order():
            pairs = self.time_out_of_order[absolute]
            lines.append("Found out of order timestamp in :" + absolute)
            lines.extend(f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs)
        for absolute in self.time_not_found_order.order():
            pairs = self.time_not_found[absolute]
            lines.append("The following indexed offsets are not found in the log.")
            lines.extend(f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs)
        for absolute in self.non_consecutive_order.order():
            seq = self.non_consecutive[absolute]
            lines.append(f"Non-consecutive offsets in {absolute}")
            for k in range(len(seq) - 2, -1, -2):
                lines.append(f"  {seq[k]} is followed by {seq[k + 1]}")
        for line in lines:
            self.error_line(line)


def _sibling_offset_index(path: str, base: int) -> OffsetIndex:
    index_path = sibling_path(path, INDEX_SUFFIX)
    try:
        return OffsetIndex(index_path, base)
    except FileUnreadableError as exc:
        exc.message = (
            f"{exc.message} (the offset index beside {file_name(path)} is needed to check it; "
            "Kafka would create an empty one and fail with 'Invalid max index size: -1')"
        )
        raise


def verify_time_index(
    time_index: TimeIndex, index: OffsetIndex, log: memoryview, log_path: str
) -> Iterator[Tuple[str, int, int, Any, Any]]:
    """Check each time-index entry against the log, as DumpLogSegments.dumpTimeIndex does.

    Yields (kind, timestamp, offset, a, b) per entry up to the zero tail, kind being
    ``"not-found"`` (a, b = indexed offset, found batch last offset or -1) or ``"checked"``
    (a = (index ts, log max ts) on a mismatch else None, b = (ts, previous ts) when out of
    order else None).
    """
    previous = -1
    base = time_index.base_offset
    for i in range(time_index.entries):
        timestamp, offset = time_index.entry(i)
        if _zero_tail_stop(i, offset, base):
            return
        position = index.lookup(offset)[1]
        _slice_end(log, position, MAX_INT32, log_path)
        found = None
        for batch in read_batches(log, start=position, path=log_path):
            if batch.last_offset >= offset:
                found = batch
                break
        if found is None:
            yield "not-found", timestamp, offset, offset, -1
        elif found.last_offset != offset:
            yield "not-found", timestamp, offset, offset, found.last_offset
        else:
            max_ts = -1
            for record in found.records():
                if record.timestamp > max_ts:
                    max_ts = record.timestamp
            mismatch = (timestamp, max_ts) if max_ts != timestamp else None
            out_of_order = (timestamp, previous) if previous >= timestamp else None
            yield "checked", timestamp, offset, mismatch, out_of_order
        previous = timestamp


class _JsonDumper(_Dumper):
    """JSON Lines: one object per line; problems as ``{"type": "error"}`` lines."""

    def emit(self, obj: Dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")

    def error(self, path: str, position: Optional[int], message: str, status: ExitStatus = ExitStatus.PROBLEMS) -> None:
        self.emit({"type": "error", "file": path, "position": position, "message": message})
        self.problem(status)

    def failed(self, path: str, exc: KstoreError) -> None:
        message = exc.message
        if exc.path is not None and exc.path != path:
            message = f"{exc.path}: {message}"
        self.error(path, exc.position, message, exc.exit_status)

    def run(self, files: Sequence[str]) -> int:
        for arg in files:
            path = java_file_path(arg)
            self.emit({"type": "file", "file": path})
            suffix = file_suffix(path)
            handler: Optional[Callable[[str], None]] = {
                LOG_SUFFIX: self.dump_log,
                CHECKPOINT_SUFFIX: self.dump_log,
                INDEX_SUFFIX: self.dump_index,
                TIME_INDEX_SUFFIX: self.dump_time_index,
                SNAPSHOT_SUFFIX: self.dump_snapshot,
                TXN_INDEX_SUFFIX: self.dump_txn_index,
            }.get(suffix)
            if handler is None:
                self.emit({"type": "skipped", "file": path, "message": f"Ignoring unknown file {path}"})
                continue
            try:
                handler(path)
            except UsageError:
                raise
            except KstoreError as exc:
                self.failed(path, exc)
        return int(self.status)

    # ---------------------------------------------------------------- .log / .checkpoint
    def dump_log(self, path: str) -> None:
        o = self.o
        name = file_name(path)
        if name.endswith(LOG_SUFFIX):
            base_offset_from_name(path)
        elif name != BOOTSTRAP_CHECKPOINT:
            kraft_snapshot_id(path)
        buf = map_file(path)
        limit = min(o.max_bytes, len(buf))
        valid = 0
        for batch in read_batches(buf, end=limit, path=path, check_crc=True):
            obj = self.batch_json(path, batch)
            self.emit(obj)
            if not batch.is_valid:
                self.error(path, batch.position, "batch is not valid (CRC mismatch or size below the batch overhead)")
            if batch.compression not in CODEC_NAMES:
                self.error(path, batch.position, f"Unknown compression type id: {batch.compression}")
            elif o.deep_iteration:
                self.dump_records(path, batch)
            valid += batch.size
        trailing = limit - valid
        if trailing > 0 and o.max_bytes == MAX_INT32:
            self.error(path, valid, f"Found {trailing} invalid bytes at the end of {name}")

    def batch_json(self, path: str, batch: Batch) -> Dict[str, Any]:
        try:
            base_offset: Optional[int] = batch.base_offset
        except KstoreError as exc:
            base_offset = None
            self.failed(path, exc)
        return {
            "type": "batch",
            "file": path,
            "position": batch.position,
            "size": batch.size,
            "magic": batch.magic,
            "baseOffset": base_offset,
            "lastOffset": java_long(batch.last_offset),
            "count": batch.count,
            "compression": batch.compression_name,
            "crc": batch.crc,
            "isValid": batch.is_valid,
            "timestampType": batch.timestamp_type_name,
            "maxTimestamp": batch.max_timestamp,
            "producerId": batch.producer_id,
            "producerEpoch": batch.producer_epoch,
            "baseSequence": batch.base_sequence,
            "lastSequence": batch.last_sequence,
            "partitionLeaderEpoch": batch.partition_leader_epoch,
            "isTransactional": batch.is_transactional,
            "isControl": batch.is_control,
            "deleteHorizonMs": batch.delete_horizon_ms,
        }

    def dump_records(self, path: str, batch: Batch) -> None:
        o = self.o
        records, failure = records_as_iterated(batch)
        decoder = o.json_decoder if o.print_data and not batch.is_control else None
        for record in records:
            try:
                obj = record_json(batch, record, print_data=o.print_data,
                                  parser=o.parser if decoder is not None else None, decoder=decoder)
                self.emit(obj)
                if "decodeError" in obj:
                    self.problem()  # the record was not decoded: said in the line and in the exit status
            except KstoreError as exc:
                self.error(path, batch.position, f"record at offset {record.offset}: {exc.message}")
        if failure is not None:
            self.failed(path, failure)

    # ---------------------------------------------------------------- indexes
    def dump_index(self, path: str) -> None:
        o = self.o
        base = base_offset_from_name(path)
        log_path = sibling_path(path, LOG_SUFFIX)
        log = map_file(log_path)
        index = OffsetIndex(path, base)
        if o.index_sanity_check:
            index.sanity_check()
            return
        for i in range(index.entries):
            offset, position = index.entry(i)
            if _zero_tail_stop(i, offset, base):
                self.zero_tail_note(path, i, index.entries, index.entry_size)
                return
            last = java_long(first_batch_at(log, position, o.max_message_size, log_path).last_offset)
            if not o.verify_index_only:
                self.emit({"type": "index", "offset": offset, "position": position})
            if last != offset:
                self.error(path, i * index.entry_size, f"Index offset: {offset}, log offset: {last}")

    def zero_tail_note(self, path: str, slot: int, entries: int, entry_size: int) -> None:
        self.emit(
            {
                "type": "note",
                "file": path,
                "position": slot * entry_size,
                "message": f"{entries - slot} unused slot(s) from slot {slot} on (a preallocated, untrimmed index) are not listed",
            }
        )

    def dump_time_index(self, path: str) -> None:
        o = self.o
        base = base_offset_from_name(path)
        log_path = sibling_path(path, LOG_SUFFIX)
        log = map_file(log_path)
        index = _sibling_offset_index(path, base)
        time_index = TimeIndex(path, base)
        if o.index_sanity_check:
            time_index.sanity_check()
            return
        slot = 0
        for kind, timestamp, offset, a, b in verify_time_index(time_index, index, log, log_path):
            if not o.verify_index_only:
                self.emit({"type": "timeindex", "timestamp": timestamp, "offset": offset})
            where = slot * time_index.entry_size
            if kind == "not-found":
                self.error(path, where, f"Indexed offset: {a}, found log offset: {b}")
            else:
                if a is not None:
                    self.error(path, where, "Index timestamp: %d, log timestamp: %d" % a)
                if b is not None:
                    self.error(path, where, "Index timestamp: %d, Previously indexed timestamp: %d" % b)
            slot += 1
        if slot < time_index.entries:
            self.zero_tail_note(path, slot, time_index.entries, time_index.entry_size)

    # ---------------------------------------------------------------- .snapshot / .txnindex
    def dump_snapshot(self, path: str) -> None:
        data = map_file(path)
        try:
            snapshot = parse_snapshot(data, path)
        except CorruptSnapshotError as exc:
            self.error(path, None, exc.message)
            return
        for entry in snapshot.producers:
            meta = entry.has_batch_metadata
            self.emit(
                {
                    "type": "snapshot",
                    "producerId": entry.producer_id,
                    "producerEpoch": entry.producer_epoch,
                    "coordinatorEpoch": entry.coordinator_epoch,
                    "currentTxnFirstOffset": entry.open_transaction_first_offset,
                    "lastTimestamp": entry.timestamp,
                    "firstSequence": entry.first_sequence if meta else None,
                    "lastSequence": entry.last_sequence if meta else None,
                    "lastOffset": entry.last_offset if meta else None,
                    "offsetDelta": entry.offset_delta if meta else None,
                    "timestamp": entry.timestamp if meta else None,
                }
            )

    def dump_txn_index(self, path: str) -> None:
        for txn in TransactionIndex(path, base_offset_from_name(path)):
            self.emit(
                {
                    "type": "txnindex",
                    "version": txn.version,
                    "producerId": txn.producer_id,
                    "firstOffset": txn.first_offset,
                    "lastOffset": txn.last_offset,
                    "lastStableOffset": txn.last_stable_offset,
                }
            )


def _b64(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else base64.b64encode(data).decode("ascii")


def record_json(batch: Batch, record: Record, *, print_data: bool = False, parser: Any = None,
                decoder: Optional[str] = None) -> Dict[str, Any]:
    """A record as a JSON-ready dict (``--json --deep-iteration``).

    Keys and values are base64, unless ``parser`` (the decoder named ``decoder``) decodes them: then
    they are the decoded JSON values (objects, numbers, strings), ``"decoder"`` names it, and a record
    the decoder skips keeps its base64 and carries Kafka's text in ``"decodeError"``.
    Raises KstoreError when a control record's key or value cannot be decoded, or where Kafka's
    parser aborts.
    """
    obj: Dict[str, Any] = {
        "type": "record",
        "offset": record.offset,
        "timestamp": record.timestamp,
        "keySize": record.key_size,
        "valueSize": record.value_size,
        "sequence": record.sequence,
        "headerKeys": [java_utf8(k) for k in record.header_key_bytes()],
    }
    if record.is_legacy:
        obj["crc"] = record.crc
        obj["isValid"] = record.is_valid
    if print_data:
        key: Any = _b64(record.key)
        value: Any = _b64(record.value)
        if parser is not None:
            offset = record.offset
            if not _LONG_MIN <= offset <= _LONG_MAX:
                offset = java_long(offset)
            decoded = parser.decode_json(offset, record.key, record.value)
            obj["decoder"] = decoder
            if decoded.key is not RAW:
                key = decoded.key
            if decoded.value is not RAW:
                value = decoded.value
            if decoded.error is not None:
                obj["decodeError"] = decoded.error
        obj["key"] = key
        obj["value"] = value
        obj["headers"] = [
            {"key": java_utf8(header_key), "value": _b64(h.value)}
            for header_key, h in zip(record.header_key_bytes(), record.headers)
        ]
    if batch.is_control:
        obj["control"] = control_json(record)
    return obj


def control_json(record: Record) -> Dict[str, Any]:
    """``{"type": "COMMIT", "coordinatorEpoch": 7}``, or the KRaft record's decoded fields."""
    type_id = control_type_id(record)
    name = CONTROL_TYPE_NAMES.get(type_id, "UNKNOWN")
    out: Dict[str, Any] = {"type": name}
    if name == "UNKNOWN":
        out["typeId"] = type_id
    decoded = decode_control(type_id, record.value)
    if decoded:
        for k, v in decoded.items():
            if type_id in (0, 1) and k == "version":
                continue
            out.setdefault(k, v)
    return out
