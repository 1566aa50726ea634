"""``kstore find``: the record at an offset or timestamp, through the indexes, as the broker finds it."""

from __future__ import annotations

import json
from typing import Optional

import click

from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, TIME, json_option, record_format_options

from kstore_cli.dump.dumplog import format_batch_line, format_record_line, record_json
from kstore_cli.errors import ExitStatus
from kstore_cli.log.logdir import Lookup


@click.command(name="find")
@click.argument("partition_dir", type=ExistingPath(file_okay=False))
@click.option("--offset", type=int, help="Find the record at this offset (or the next one present).")
@click.option("--timestamp", type=TIME, metavar="TIME",
              help="Find the first record with a timestamp >= this (epoch ms or ISO-8601).")
@click.option("--count", "-n", type=click.IntRange(min=1), default=1, show_default=True,
              help="Print this many records from there on.")
@click.option("--no-data", is_flag=True, help="Print record metadata only, not keys and payloads.")
@json_option(
    "Records as JSON lines (dump-segment's record keys; key/value in base64), then a lookup summary.")
@record_format_options
@click.pass_context
def command(ctx: click.Context, partition_dir: str, offset: Optional[int], timestamp: Optional[int], count: int,
            no_data: bool, as_json: bool, key_format: Optional[str], value_format: Optional[str],
            schemas_from: Optional[str], schemas_topic: str) -> None:
    """Print the record at --offset N, or the first record with timestamp >= --timestamp MS.

    The lookup is the one the broker does: binary search of the segments by base offset, of
    the sparse offset index (largest entry <= N), then a forward scan to the batch holding N;
    for a timestamp, the first segment whose largest timestamp reaches MS, its time index,
    then the offset index and a scan (findOffsetByTimestamp). Segments without usable index
    files are scanned from their first byte, and the summary says so. The summary (on stderr,
    or the last JSON line) gives the bytes read to get there.

    \b
    Exit status: 0 found, 1 nothing at or after the target (or, with --key-format/--value-format, a key or
    value not decoded: its line has "decodeError"), 2 usage, 3 unreadable.

    \b
    Example:
      kstore find /var/lib/kafka/data/orders-0 --offset 123456
      kstore find /var/lib/kafka/data/orders-0 --timestamp 1700000000000 --count 5 --json
    """
    lookup = Lookup(partition_dir, offset=offset, timestamp=timestamp, count=count)
    wire = _wire_decoder(partition_dir, as_json, no_data, key_format, value_format, schemas_from, schemas_topic)
    parser = None
    if not no_data and not as_json:
        from kstore_cli.parsers import make_parser

        parser = make_parser()
    last_batch = None
    for segment, batch, record in lookup.records():
        if as_json:
            obj = record_json(batch, record, print_data=not no_data, parser=wire,
                              decoder=None if wire is None else wire.name)
            obj["segment"] = segment.base_offset
            obj["batchPosition"] = batch.position
            click.echo(json.dumps(obj, sort_keys=True))
        else:
            if batch is not last_batch:
                click.echo(format_batch_line(batch))
                last_batch = batch
            click.echo(format_record_line(batch, record, parser=parser))
    if as_json:
        summary = lookup.summary()
        if wire is not None:
            summary["undecodable"] = wire.undecodable
        click.echo(json.dumps(summary, sort_keys=True))
    else:
        click.echo(_summary_line(lookup), err=True)
    if lookup.first is None or (wire is not None and wire.undecodable):
        exit_with(ExitStatus.PROBLEMS)


def _wire_decoder(partition_dir: str, as_json: bool, no_data: bool, key_format: Optional[str],
                  value_format: Optional[str], schemas_from: Optional[str], schemas_topic: str):
    """The --key-format/--value-format decoder (None without them); they go with --json and data."""
    if not key_format and not value_format:
        return None
    if not as_json or no_data:
        raise click.UsageError("--key-format and --value-format go with --json (and not with --no-data)")
    from kstore_cli.cluster.wire_format import make_wire_decoder

    return make_wire_decoder(key_format or "binary", value_format or "binary", near=partition_dir,
                             schemas_from=schemas_from, topic=schemas_topic)


def _summary_line(lookup: Lookup) -> str:
    if lookup.first is None:
        return f"nothing at or after {lookup.target} in {lookup.partition.path}"
    segment, position, _ = lookup.first
    stats = lookup.first_stats
    msg = (f"{lookup.target}: segment {segment}, batch at byte {position}; read {stats.bytes_read} bytes "
           f"({stats.index_bytes} of index, {stats.log_bytes} of log, {stats.batches_scanned} batches)")
    if stats.segments_scanned:
        msg += ("; no usable index for segment(s) " + ", ".join(map(str, stats.segments_scanned))
                + ": scanned them instead")
    return msg
