"""Kafka's exact text (DumpLogSegments): the per-file dispatcher, the index, time-index, producer-snapshot and
transaction-index dumps, and the end-of-run reports on stderr (the log segment dump is :mod:`.text_log`'s)."""

from __future__ import annotations

from array import array
from typing import Dict, List, Sequence, TextIO, Tuple

from kstore_cli.errors import CorruptSnapshotError, KstoreError
from kstore_cli.java import java_long
from kstore_cli.log.index import OffsetIndex, TimeIndex, TransactionIndex
from kstore_cli.log.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    base_offset_from_name,
)
from kstore_cli.log.snapshot import parse_snapshot
from kstore_cli.record.reader import map_file
from kstore_cli.record.text import ScalaHashMapOrder
from kstore_cli.dump.files import CHECKPOINT_SUFFIX, file_suffix, java_absolute_path, java_file_path, located, sibling_path
from kstore_cli.dump.indexes import first_batch_at, open_time_index, verify_time_index, zero_tail_stop
from kstore_cli.dump.lines import format_snapshot_entry
from kstore_cli.dump.options import DumpOptions
from kstore_cli.dump.text_log import TextLogDump


class TextDumper(TextLogDump):
    """Kafka's exact text."""

    def __init__(self, out: TextIO, err: TextIO, options: DumpOptions) -> None:
        super().__init__(out, err, options)
        self.index_mismatches: Dict[str, array] = {}
        self.time_mismatches: Dict[str, List[Tuple[int, int]]] = {}
        self.time_out_of_order: Dict[str, List[Tuple[int, int]]] = {}
        self.time_not_found: Dict[str, List[Tuple[int, int]]] = {}
        # Kafka's five maps are scala mutable.HashMaps keyed by absolute path: their report blocks come in
        # hash order, which depends on every put (see ScalaHashMapOrder), so each put is replayed here.
        self.index_mismatches_order = ScalaHashMapOrder()
        self.time_mismatches_order = ScalaHashMapOrder()
        self.time_out_of_order_order = ScalaHashMapOrder()
        self.time_not_found_order = ScalaHashMapOrder()

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
            if zero_tail_stop(i, offset, index.base_offset):
                return
            try:
                last = java_long(first_batch_at(log, position, o.max_message_size, log_path).last_offset)
            except KstoreError as exc:
                raise located(exc, path, i * index.entry_size) from None
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
        log_path, log, index, time_index = open_time_index(path)
        if o.index_sanity_check:
            time_index.sanity_check()
            write(f"{path} passed sanity check.\n")
            return
        absolute = java_absolute_path(path)
        try:
            self._check_time_index(path, absolute, time_index, index, log, log_path)
        except KstoreError as exc:
            raise located(exc, path, None) from None

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
