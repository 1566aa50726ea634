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

The work is split as DumpLogSegments splits its concerns: :mod:`.options` (DumpLogSegmentsOptions and the
decoders of internal topics' records), :mod:`.files` (the files and their names), :mod:`.text` (the per-file
dispatcher, the index, time-index, snapshot and transaction-index dumps, the end-of-run reports),
:mod:`.text_log` (the log segment dump, with the native formatter), :mod:`.lines` (batch and record lines),
:mod:`.indexes` (the index checks both outputs share) and :mod:`.json_lines` (``--json``). This module is
the entry point, and keeps the names commands and tests import.

Never imports click or rich.
"""

from __future__ import annotations

from typing import Sequence, TextIO

from kstore_cli.dump.files import (
    BOOTSTRAP_CHECKPOINT,
    CHECKPOINT_SUFFIX,
    file_name,
    file_suffix,
    files_to_dump,
    java_absolute_path,
    java_file_path,
    kraft_snapshot_id,
    sibling_path,
    split_files_option,
)
from kstore_cli.dump.indexes import first_batch_at, verify_time_index
from kstore_cli.dump.json_lines import JsonDumper, control_json, record_json
from kstore_cli.dump.lines import (
    RECORD_INDENT,
    check_codec,
    control_type_id,
    format_batch_head,
    format_batch_line,
    format_batch_tail,
    format_control,
    format_record_data,
    format_record_line,
    format_record_metadata,
    format_snapshot_entry,
    header_keys_text,
    java_bool,
    optional_long,
    records_as_iterated,
)
from kstore_cli.dump.options import (
    DEFAULT_MAX_MESSAGE_SIZE,
    DEPRECATED_DECODERS,
    MESSAGE_DECODERS,
    Dumper,
    DumpOptions,
    deprecated_decoder_notice,
)
from kstore_cli.dump.text import TextDumper

__all__ = [
    "BOOTSTRAP_CHECKPOINT", "CHECKPOINT_SUFFIX", "DEFAULT_MAX_MESSAGE_SIZE", "DEPRECATED_DECODERS", "MESSAGE_DECODERS",
    "RECORD_INDENT", "DumpOptions", "check_codec", "control_json", "control_type_id", "deprecated_decoder_notice",
    "dump_files", "file_name", "file_suffix", "files_to_dump", "first_batch_at", "format_batch_head",
    "format_batch_line", "format_batch_tail", "format_control", "format_record_data", "format_record_line",
    "format_record_metadata", "format_snapshot_entry", "header_keys_text", "java_absolute_path", "java_bool",
    "java_file_path", "kraft_snapshot_id", "optional_long", "record_json", "records_as_iterated", "sibling_path",
    "split_files_option", "verify_time_index",
]


def dump_files(files: Sequence[str], out: TextIO, err: TextIO, options: DumpOptions) -> int:
    """Dump each file in order, as ``kafka-dump-log --files`` does; return the exit status.

    0: nothing wrong found; 1: the data has problems (invalid batches, index mismatches,
    corrupt snapshots, trailing bytes). Where Kafka's tool dies, the KstoreError is raised
    (text mode) after the same output; JSON mode reports it as an error line and goes on.
    """
    dumper: Dumper = JsonDumper(out, err, options) if options.json_lines else TextDumper(out, err, options)
    try:
        return dumper.run(files)
    finally:
        out.flush()
        err.flush()
