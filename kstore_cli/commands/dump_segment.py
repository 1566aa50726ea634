"""``kstore dump-segment``: a drop-in for Kafka's ``kafka-dump-log.sh`` (the work is in kstore_cli.segment.dumplog)."""

from __future__ import annotations

import io
import sys
from typing import List, Optional, TextIO, Tuple

import click

from kstore_cli import __version__
from kstore_cli.errors import UsageError
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


def _files(files_opts: Tuple[str, ...], paths: Tuple[str, ...]) -> List[str]:
    from kstore_cli.segment.dumplog import split_files_option

    files: List[str] = []
    for value in files_opts:
        files.extend(split_files_option(value))
    files.extend(paths)
    return files


def _decoder(class_name: Optional[str], friendly: Optional[str], which: str) -> Optional[str]:
    if class_name is not None and friendly is not None:
        raise UsageError(f"give either --{which}-decoder-class or --{which}-decoder, not both")
    return friendly if friendly is not None else class_name


@click.command(
    "dump-segment",
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
) -> int:
    """Dump log segments, indexes, snapshots and KRaft checkpoints exactly as Kafka's
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
    from kstore_cli.segment.dumplog import DumpOptions, deprecated_decoder_notice, dump_files
    from kstore_cli.parsers import make_parser

    files = _files(files_opts, paths)
    if not files:
        raise click.UsageError('Missing required argument "[files]"')
    key_name = _decoder(key_decoder_class, key_decoder, "key")
    value_name = _decoder(value_decoder_class, value_decoder, "value")
    decoder_flags = (offsets_decoder, transaction_log_decoder, cluster_metadata_decoder,
                     remote_log_metadata_decoder, share_group_state_decoder)
    print_data = print_data_log or any(decoder_flags) or key_name is not None or value_name is not None
    parser = make_parser(
        offsets=offsets_decoder,
        transaction_log=transaction_log_decoder,
        cluster_metadata=cluster_metadata_decoder,
        remote_log_metadata=remote_log_metadata_decoder,
        share_group_state=share_group_state_decoder,
        key_decoder=key_name,
        value_decoder=value_name,
    )
    json_decoder = next((name for name, given in zip(
        ("offsets", "transaction-log", "cluster-metadata", "remote-log-metadata", "share-group-state"),
        decoder_flags) if given), None)
    if json_decoder is None and (key_name is not None or value_name is not None):
        json_decoder = f"key={key_name or 'string'},value={value_name or 'string'}"
    notices: List[str] = []
    if not any(decoder_flags) and not json_lines:
        # Kafka builds its value decoder, then its key decoder, for every .log/.checkpoint file.
        for name in (value_decoder_class, key_decoder_class):
            notice = deprecated_decoder_notice(name)
            if notice:
                notices.append(notice)
    options = DumpOptions(
        deep_iteration=deep_iteration,
        print_data=print_data,
        skip_record_metadata=skip_record_metadata,
        verify_index_only=verify_index_only,
        index_sanity_check=index_sanity_check,
        max_message_size=max_message_size,
        max_bytes=max_bytes,
        parser=parser,
        json_lines=json_lines,
        decoder_notices=notices,
        json_decoder=json_decoder,
    )
    out, out_wrapped = _open_utf8(sys.stdout)
    try:
        err, err_wrapped = _open_utf8(sys.stderr)
        try:
            return dump_files(files, out, err, options)
        finally:
            _release(err, err_wrapped)
    finally:
        _release(out, out_wrapped)
