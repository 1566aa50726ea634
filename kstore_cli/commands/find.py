"""``kstore find``: the record at an offset or timestamp, through the indexes, as the broker finds it."""

from __future__ import annotations

import json
from typing import Optional

import click

from kstore_cli.commands._options import ExistingPath, TIME, json_option

from kstore_cli.dumplog import format_batch_line, format_record_line, record_json
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.segment.logdir import LookupStats, Partition, find_offset, find_timestamp, is_partition_dir


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
@click.pass_context
def command(ctx: click.Context, partition_dir: str, offset: Optional[int], timestamp: Optional[int], count: int,
            no_data: bool, as_json: bool) -> None:
    """Print the record at --offset N, or the first record with timestamp >= --timestamp MS.

    The lookup is the one the broker does: binary search of the segments by base offset, of
    the sparse offset index (largest entry <= N), then a forward scan to the batch holding N;
    for a timestamp, the first segment whose largest timestamp reaches MS, its time index,
    then the offset index and a scan (findOffsetByTimestamp). Segments without usable index
    files are scanned from their first byte, and the summary says so. The summary (on stderr,
    or the last JSON line) gives the bytes read to get there.

    \b
    Exit status: 0 found, 1 nothing at or after the target, 2 usage, 3 unreadable.

    \b
    Example:
      kstore find /var/lib/kafka/data/orders-0 --offset 123456
      kstore find /var/lib/kafka/data/orders-0 --timestamp 1700000000000 --count 5 --json
    """
    if (offset is None) == (timestamp is None):
        raise UsageError("give exactly one of --offset and --timestamp")
    if not is_partition_dir(partition_dir):
        raise UsageError("not a partition directory (it holds no segments)", path=partition_dir)
    partition = Partition(partition_dir)
    stats = LookupStats()
    if offset is not None:
        found = find_offset(partition, offset, stats)
        target = f"offset {offset}"
    else:
        found = find_timestamp(partition, timestamp, stats)
        target = f"timestamp {timestamp}"
    parser = None
    if not no_data and not as_json:
        from kstore_cli.parsers import make_parser

        parser = make_parser()
    printed = 0
    first = None
    last_batch = None
    for segment, batch, record in found:
        if first is None:
            first = (segment.base_offset, batch.position, record.offset, stats.to_dict())
        if as_json:
            obj = record_json(batch, record, print_data=not no_data)
            obj["segment"] = segment.base_offset
            obj["batchPosition"] = batch.position
            click.echo(json.dumps(obj, sort_keys=True))
        else:
            if batch is not last_batch:
                click.echo(format_batch_line(batch))
                last_batch = batch
            click.echo(format_record_line(batch, record, parser=parser))
        printed += 1
        if printed >= count:
            break
    summary = {"type": "lookup", "target": target, "found": first is not None, "records": printed}
    if first is not None:
        summary.update(segment=first[0], batchPosition=first[1], offset=first[2])
        summary.update(first[3])
    else:
        summary.update(stats.to_dict())
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
    else:
        if first is None:
            msg = f"nothing at or after {target} in {partition.path}"
        else:
            msg = (f"{target}: segment {first[0]}, batch at byte {first[1]}; read {summary['bytesRead']} bytes "
                   f"({summary['indexBytesRead']} of index, {summary['logBytesRead']} of log, "
                   f"{summary['batchesScanned']} batches)")
            if summary["scannedSegments"]:
                msg += "; no usable index for segment(s) " + ", ".join(map(str, summary["scannedSegments"])) + \
                       ": scanned them instead"
        click.echo(msg, err=True)
    if first is None:
        ctx.exit(int(ExitStatus.PROBLEMS))
