"""``--json``: the dump as JSON Lines, one object per line; problems as ``{"type": "error", ...}`` lines, and the
dump goes on where it can."""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Dict, Optional, Sequence

from kstore_cli.codecs import CODEC_NAMES
from kstore_cli.errors import CorruptSnapshotError, ExitStatus, KstoreError, UsageError
from kstore_cli.java import MAX_INT64, MIN_INT64, java_long
from kstore_cli.log.index import OffsetIndex, TransactionIndex
from kstore_cli.log.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    base_offset_from_name,
)
from kstore_cli.log.snapshot import parse_snapshot
from kstore_cli.parsers import RAW, decode_control
from kstore_cli.record.batch import CONTROL_TYPE_NAMES, MAX_INT32, Batch, Record
from kstore_cli.record.reader import map_file, read_batches
from kstore_cli.record.text import java_utf8
from kstore_cli.dump.files import BOOTSTRAP_CHECKPOINT, CHECKPOINT_SUFFIX, file_name, file_suffix, java_file_path, kraft_snapshot_id, sibling_path
from kstore_cli.dump.indexes import first_batch_at, open_time_index, verify_time_index, zero_tail_stop
from kstore_cli.dump.lines import control_type_id, records_as_iterated
from kstore_cli.dump.options import Dumper

class JsonDumper(Dumper):
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
            if zero_tail_stop(i, offset, base):
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
        log_path, log, index, time_index = open_time_index(path)
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
            if not MIN_INT64 <= offset <= MAX_INT64:
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
