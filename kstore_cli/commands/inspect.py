"""``kstore inspect``: one line per partition: segments, offsets, sizes, formats, producers, transactions, health."""

from __future__ import annotations

import json
import os
from typing import Dict, List

import click

from kstore_cli.commands._options import json_option

from kstore_cli.commands._console import is_tty as _is_tty
from kstore_cli.codecs import CODEC_NAMES
from kstore_cli.errors import UsageError
from kstore_cli.segment.logdir import DataDir, Partition, find_data_dirs, is_partition_dir, resolve
from kstore_cli.segment.recovery import ERROR, verify_partition
from kstore_cli.segment.unified_log import DataDirState, log_offsets


def _data_dir_state(data_dir: str, cache: Dict[str, DataDirState]) -> DataDirState:
    if data_dir not in cache:
        cache[data_dir] = DataDirState(data_dir, tolerant=True)  # a report goes on past a bad checkpoint
    return cache[data_dir]


def inspect_partition(partition: Partition, checkpoints: Dict[str, DataDirState], progress=None) -> dict:
    """Everything inspect reports about one partition, as a JSON-ready dict."""
    findings, plan = verify_partition(partition, progress=progress)
    results = [s.result for s in plan.segments if s.result is not None]
    first_base = partition.segments[0].base_offset if partition.segments else None
    offsets = log_offsets(partition, _data_dir_state(partition.data_dir, checkpoints),
                          log_end_offset=results[-1].next_offset if results else None)
    last_offsets = [r.last_offset for r in results if r.last_offset is not None]
    timestamps = [r.min_timestamp for r in results if r.min_timestamp is not None]
    max_ts = [r.max_timestamp for r in results if r.max_timestamp >= 0]
    magics = sorted(set().union(*[r.magics for r in results])) if results else []
    codecs = sorted(set().union(*[r.codecs for r in results])) if results else []
    pids = sorted(set().union(*[r.producer_ids for r in results])) if results else []
    aborted = [t for r in results for t in r.aborted]
    open_txns = plan.final_state.open_transactions() if plan.final_state is not None else []
    errors = [f for f in findings if f.severity == ERROR]
    return {
        "type": "partition",
        "partition": partition.path,
        "topic": partition.topic,
        "partitionId": partition.partition,
        "segments": len(partition.segments),
        "baseOffsets": [s.base_offset for s in partition.segments],
        "logStartOffset": offsets.log_start_offset if partition.segments else None,
        "logStartOffsetSource": offsets.log_start_offset_source,
        "lastOffset": max(last_offsets) if last_offsets else None,
        "logEndOffset": results[-1].next_offset if results else first_base,
        "sizeBytes": sum(r.log_size for r in results),
        "minTimestamp": min(timestamps) if timestamps else None,
        "maxTimestamp": max(max_ts) if max_ts else None,
        "batches": sum(r.batches for r in results),
        "magics": magics,
        "codecs": [CODEC_NAMES.get(c, f"unknown({c})") for c in codecs],
        "producerIds": pids,
        "openTransactions": [{"producerId": p, "firstOffset": f} for p, f in open_txns],
        "abortedTransactions": len(aborted),
        "snapshots": sorted(partition.snapshots),
        "indexHealth": "ok" if not errors else f"{len(errors)} problem(s)",
        "problems": [f.to_dict() for f in errors],
        "notes": len(findings) - len(errors),
        "leftoverFiles": [os.path.basename(p) for p in partition.leftovers],
        "orphanIndexes": [os.path.basename(p) for p in partition.orphan_indexes],
    }


def _short(ids: List[int], limit: int = 4) -> str:
    text = ",".join(map(str, ids[:limit]))
    return text + (f",+{len(ids) - limit}" if len(ids) > limit else "")


@click.command(name="inspect")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@json_option("One JSON object per partition (and per skipped directory).")
@click.pass_context
def command(ctx: click.Context, paths, as_json: bool) -> None:
    """Summarise partitions: segments, offsets, log start offset, sizes, time range, record
    formats and codecs, producer ids, open and aborted transactions, index health, and
    leftover .deleted/.cleaned/.swap files. One table per data dir on a terminal (with a
    progress bar for large dirs), plain lines in a pipe, JSON lines with --json.

    PATH is a .log file (its partition is shown), a partition directory or a data directory.
    Read-only; index health is what verify-index reports.

    \b
    Example:
      kstore inspect /var/lib/kafka/data
      kstore inspect --json /var/lib/kafka/data/orders-0
    """
    targets = resolve(paths)
    if not targets:
        raise UsageError("no partitions found in " + ", ".join(paths))
    seen = set()
    partitions = []
    for t in targets:
        if t.partition.path not in seen:
            seen.add(t.partition.path)
            partitions.append(t.partition)
    skipped = []
    for raw in paths:
        if os.path.isdir(raw) and not is_partition_dir(raw):
            for data_dir in find_data_dirs(raw) or [raw]:  # a folder of several brokers' data dirs
                skipped.extend(DataDir(data_dir).skipped)
    checkpoints: Dict[str, DataDirState] = {}
    tty = _is_tty() and not as_json
    rows = []
    total = sum(os.path.getsize(s.log) for p in partitions for s in p.segments)
    if tty and total > 64 * 1024 * 1024:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("reading segments", total=total)
            for p in partitions:
                rows.append(inspect_partition(p, checkpoints, progress=lambda n: bar.advance(task, n)))
    else:
        rows = [inspect_partition(p, checkpoints) for p in partitions]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True))
        for path, why in skipped:
            click.echo(json.dumps({"type": "skipped", "path": path, "reason": why}, sort_keys=True))
        return
    columns = ("partition", "segs", "offsets", "start", "bytes", "time range", "formats", "producers",
               "txns", "indexes", "leftovers")

    def cells(row: dict) -> List[str]:
        txn = f"{len(row['openTransactions'])} open/{row['abortedTransactions']} aborted"
        return [
            os.path.basename(row["partition"]), str(row["segments"]),
            f"{row['baseOffsets'][0] if row['baseOffsets'] else '-'}..{row['lastOffset'] if row['lastOffset'] is not None else '-'}",
            f"{row['logStartOffset']}", str(row["sizeBytes"]),
            f"{row['minTimestamp']}..{row['maxTimestamp']}" if row["maxTimestamp"] is not None else "-",
            "v" + "/v".join(map(str, row["magics"])) + " " + ",".join(row["codecs"]) if row["magics"] else "-",
            _short(row["producerIds"]) or "-", txn, row["indexHealth"],
            ",".join(row["leftoverFiles"] + row["orphanIndexes"]) or "-",
        ]

    if tty:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        by_dir: Dict[str, List[dict]] = {}
        for row in rows:
            by_dir.setdefault(os.path.dirname(row["partition"]), []).append(row)
        for data_dir, drows in by_dir.items():
            table = Table(title=data_dir, title_justify="left")
            for col in columns:
                table.add_column(col, overflow="fold")
            for row in drows:
                c = cells(row)
                if row["problems"]:
                    c[9] = f"[red]{c[9]}[/]"
                table.add_row(*c)
            console.print(table)
        for path, why in skipped:
            console.print(f"skipped {path}: {why}")
        return
    click.echo("\t".join(columns))
    for row in rows:
        click.echo("\t".join(cells(row)))
    for path, why in skipped:
        click.echo(f"# skipped {path}: {why}")
