"""``kstore dump-segment``: a drop-in for Kafka's ``kafka-dump-log.sh`` (the work is in kstore_cli.dump.dumplog)."""

from __future__ import annotations

import io
import sys
from typing import Optional, TextIO, Tuple

import click

from kstore_cli import __version__
from kstore_cli.commands._options import record_format_options
from kstore_cli.java import MAX_INT32

DEFAULT_DECODER_CLASS = "org.apache.kafka.tools.api.StringDecoder"
FRIENDLY_DECODERS = ["string", "hex", "base64", "int", "long"]


def _open_utf8(stream: TextIO) -> Tuple[TextIO, bool]:
    """A UTF-8 text stream over `stream`'s bytes (Kafka writes UTF-8 whatever the locale)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        return stream, False
    stream.flush()
    tty = False
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        pass
    wrapper = io.TextIOWrapper(buffer, encoding="utf-8", errors="backslashreplace", newline="", line_buffering=tty)
    if not tty:
        # Fewer, larger writes to a pipe or file (the default hands 8 KiB pieces to the buffer).
        try:
            wrapper._CHUNK_SIZE = 1 << 16  # type: ignore[attr-defined]
        except (AttributeError, ValueError):  # pragma: no cover - not CPython's TextIOWrapper
            pass
    return wrapper, True


def _release(stream: TextIO, wrapped: bool) -> None:
    stream.flush()
    if wrapped:
        stream.detach()  # type: ignore[attr-defined]  # leave sys.stdout's buffer open


def _wire_decoder(first_file: str, json_lines: bool, decoder_given: bool, key_format: Optional[str],
                  value_format: Optional[str], schemas_from: Optional[str], schemas_topic: str):
    """The --key-format/--value-format decoder (None without them): with --json only, and no decoder option."""
    if not key_format and not value_format:
        return None
    if not json_lines:
        raise click.UsageError("--key-format and --value-format go with --json")
    if decoder_given:
        raise click.UsageError("--key-format/--value-format and the decoder options do not go together")
    from kstore_cli.cluster.wire_format import make_wire_decoder

    return make_wire_decoder(key_format or "binary", value_format or "binary", near=first_file,
                             schemas_from=schemas_from, topic=schemas_topic)


def _wire_notes(wire, err: TextIO) -> None:
    """The records --key-format/--value-format left undecoded, and the registry records not applied, said."""
    if wire.undecodable:
        err.write(f"kstore: {wire.undecodable} records with a key or value not decoded (their decodeError says why)\n")
    if wire.store is not None and wire.store.problems:
        err.write(f"kstore: warning: {len(wire.store.problems)} records of {wire.store.partition_path} not applied "
                  "(kstore schemas names them)\n")


HELP = """Dump log segments, indexes, snapshots and KRaft checkpoints exactly as Kafka's
    kafka-dump-log.sh does (same options, same output byte for byte).

    Files may be given with --files a,b,c (Kafka's way), as arguments, or both. Each file's
    kind comes from its suffix: .log and .checkpoint (batches and records), .index,
    .timeindex, .txnindex, .snapshot; other files are ignored with a note on stderr.

    \b
    Example:
      kstore dump-segment --deep-iteration --print-data-log \\
          /var/lib/kafka/orders-0/00000000000000000000.log
      kstore dump-segment --files 00000000000000000000.index,00000000000000000000.timeindex
      kstore dump-segment --json --deep-iteration 00000000000000000000.log | jq .

    \b
    Exit status:
      0  nothing wrong found (gaps between offsets and ignored files are fine:
         compacted topics have gaps)
      1  the data has problems: a batch with isvalid false, index or time-index
         mismatches or offsets not found, a corrupt snapshot, trailing invalid
         bytes, a record the chosen decoder could not decode (Kafka prints
         "skipping" for it), or a damaged file that stopped the dump (Kafka's tool would die
         with a stack trace; kstore prints one "kstore: error:" line instead)
      2  usage error (e.g. no files, or a file name without a '.')
      3  a file is missing or cannot be read

    Kafka's own usage text is not reproduced; this help replaces it. --json writes one
    object per line (type batch, record, index, timeindex, txnindex, snapshot, file,
    note, skipped, error) and goes on after problems where it can. Record keys and values
    are base64; with a decoder option they are what the decoder decoded, as JSON values
    ("decoder" names it; a record it cannot decode keeps its base64, gets "decodeError"
    and makes the exit status 1), e.g. the offsets group X committed:

    \b
      kstore dump-segment --json --offsets-decoder __consumer_offsets-0/*.log \\
        | jq -c 'select(.key.data.group? == "X") | [.key.data.topic, .key.data.partition, .value.data.offset]'

    """


@click.command(
    "dump-segment",
    help=HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("paths", nargs=-1, metavar="[FILE]...")
@click.option("--files", "files_opts", multiple=True, metavar="FILE1,FILE2,...",
              help="Comma-separated files to dump (Kafka's required option); dumped before positional FILEs.")
@click.option("--deep-iteration", is_flag=True, help="Print one line per record (implied by --print-data-log).")
@click.option("--print-data-log", is_flag=True, help="Print record keys and values (implied by any decoder option).")
@click.option("--skip-record-metadata", is_flag=True, help="Leave out the per-record metadata fields.")
@click.option("--verify-index-only", is_flag=True, help="Check .index/.timeindex entries against the log without listing them.")
@click.option("--index-sanity-check", is_flag=True, help="Run only the index sanity check on .index/.timeindex files.")
@click.option("--max-message-size", type=click.IntRange(0, MAX_INT32), default=5 * 1024 * 1024, show_default=True,
              help="Bytes read at each offset-index position when checking an .index.")
@click.option("--max-bytes", type=click.IntRange(0, MAX_INT32), default=MAX_INT32, show_default=True,
              help="Read only the first N bytes of each .log/.checkpoint (no trailing-bytes report then).")
@click.option("--offsets-decoder", is_flag=True, help="Decode __consumer_offsets records.")
@click.option("--transaction-log-decoder", is_flag=True, help="Decode __transaction_state records.")
@click.option("--cluster-metadata-decoder", is_flag=True, help="Decode KRaft __cluster_metadata records.")
@click.option("--remote-log-metadata-decoder", is_flag=True, help="Decode __remote_log_metadata records.")
@click.option("--share-group-state-decoder", is_flag=True, help="Decode __share_group_state records.")
@click.option("--key-decoder-class", is_flag=False, flag_value=DEFAULT_DECODER_CLASS, default=None, metavar="[CLASS]",
              help="Kafka decoder class for keys (StringDecoder, IntegerDecoder, LongDecoder); "
                   "the value may be left out.")
@click.option("--value-decoder-class", is_flag=False, flag_value=DEFAULT_DECODER_CLASS, default=None, metavar="[CLASS]",
              help="Kafka decoder class for values; the value may be left out.")
@click.option("--key-decoder", type=click.Choice(FRIENDLY_DECODERS), default=None, help="Decode keys as this.")
@click.option("--value-decoder", type=click.Choice(FRIENDLY_DECODERS), default=None, help="Decode values as this.")
@click.option("--json", "json_lines", is_flag=True, help="Write JSON Lines (one object per line) instead of Kafka's text.")
@record_format_options
@click.version_option(__version__, "--version", prog_name="kstore dump-segment", message="%(prog)s %(version)s")
def command(
    paths: Tuple[str, ...],
    files_opts: Tuple[str, ...],
    deep_iteration: bool,
    print_data_log: bool,
    skip_record_metadata: bool,
    verify_index_only: bool,
    index_sanity_check: bool,
    max_message_size: int,
    max_bytes: int,
    offsets_decoder: bool,
    transaction_log_decoder: bool,
    cluster_metadata_decoder: bool,
    remote_log_metadata_decoder: bool,
    share_group_state_decoder: bool,
    key_decoder_class: Optional[str],
    value_decoder_class: Optional[str],
    key_decoder: Optional[str],
    value_decoder: Optional[str],
    json_lines: bool,
    key_format: Optional[str],
    value_format: Optional[str],
    schemas_from: Optional[str],
    schemas_topic: str,
) -> int:
    from kstore_cli.dump.dumplog import DumpOptions, dump_files, files_to_dump

    files = files_to_dump(files_opts, paths)
    if not files:
        raise click.UsageError('Missing required argument "[files]"')
    plain = dict(deep_iteration=deep_iteration, skip_record_metadata=skip_record_metadata,
                 verify_index_only=verify_index_only, index_sanity_check=index_sanity_check,
                 max_message_size=max_message_size, max_bytes=max_bytes)
    decoders = {"offsets": offsets_decoder, "transaction-log": transaction_log_decoder,
                "cluster-metadata": cluster_metadata_decoder, "remote-log-metadata": remote_log_metadata_decoder,
                "share-group-state": share_group_state_decoder}
    decoder_given = any(decoders.values()) or any((key_decoder_class, value_decoder_class, key_decoder, value_decoder))
    wire = _wire_decoder(files[0], json_lines, decoder_given, key_format, value_format, schemas_from, schemas_topic)
    if wire is not None:
        options = DumpOptions(print_data=True, parser=wire, json_lines=True, json_decoder=wire.name, **plain)
    else:
        options = DumpOptions.from_command_line(
            message_decoders=decoders, key_decoder_class=key_decoder_class, key_decoder=key_decoder,
            value_decoder_class=value_decoder_class, value_decoder=value_decoder, print_data_log=print_data_log,
            json_lines=json_lines, **plain)
    out, out_wrapped = _open_utf8(sys.stdout)
    try:
        err, err_wrapped = _open_utf8(sys.stderr)
        try:
            status = dump_files(files, out, err, options)
            if wire is not None:
                _wire_notes(wire, err)
            return status
        finally:
            _release(err, err_wrapped)
    finally:
        _release(out, out_wrapped)
