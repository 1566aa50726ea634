"""``kstore inspect``: one line per partition: segments, offsets, sizes, formats, producers, transactions, health."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

import click

from kstore_cli.commands._render import human_bytes
from kstore_cli.commands._render import is_tty as _is_tty
from kstore_cli.commands._render import console
from kstore_cli.commands._options import ExistingPath, format_time_ms, jobs_option, json_option, topics_option
from kstore_cli.log.logdir import loaded, nothing_found, resolve_partitions
from kstore_cli.operations.runner import usable_cores
from kstore_cli.operations.summary import PartitionSummary, summarize_partitions


def _short(ids: List[int], limit: int = 4) -> str:
    text = ",".join(map(str, ids[:limit]))
    return text + (f",+{len(ids) - limit}" if len(ids) > limit else "")


COLUMNS = ("partition", "segs", "offsets", "start", "bytes", "time range", "formats", "producers",
           "txns", "indexes", "leftovers")


def _cells(row: PartitionSummary, human: bool) -> List[str]:
    """One partition's cells: human sizes and UTC dates for a terminal, raw numbers in a pipe."""
    if row.max_timestamp is None:
        times = "-"
    elif human:
        first, last = format_time_ms(row.min_timestamp), format_time_ms(row.max_timestamp)
        times = f"{first}..{last[11:] if last[:11] == first[:11] else last}"  # the day once when shared
    else:
        times = f"{row.min_timestamp}..{row.max_timestamp}"
    return [
        os.path.basename(row.partition), str(row.segments),
        f"{row.base_offsets[0] if row.base_offsets else '-'}..{'-' if row.last_offset is None else row.last_offset}",
        f"{row.log_start_offset}", human_bytes(row.size_bytes) if human else str(row.size_bytes), times,
        "v" + "/v".join(map(str, row.magics)) + " " + ",".join(row.codecs) if row.magics else "-",
        _short(row.producer_ids) or "-",
        f"{len(row.open_transactions)} open/{row.aborted_transactions} aborted", row.index_health,
        ",".join(row.leftover_files + row.orphan_indexes) or "-",
    ]


def _render_tables(rows: List[PartitionSummary], skipped: List[Tuple[str, str]]) -> None:
    """One table per data dir; a terminal too narrow for one gets a block of lines per partition."""
    from rich import box
    from rich.table import Table

    out = console()
    by_dir: Dict[str, List[PartitionSummary]] = {}
    for row in rows:
        by_dir.setdefault(os.path.dirname(row.partition), []).append(row)
    for data_dir, drows in by_dir.items():
        all_cells = [_cells(row, human=True) for row in drows]
        # Cells are never wrapped or cut (a name, an offset or a time broken mid-token misleads): a
        # terminal too narrow for the table gets each partition as a block of "column: value" lines.
        longest = [max(len(text) for text in [col] + [c[i] for c in all_cells]) for i, col in enumerate(COLUMNS)]
        if sum(longest) + 2 * len(COLUMNS) + 2 > out.width:
            out.print(data_dir, style="italic", soft_wrap=True)
            for row, c in zip(drows, all_cells):
                out.print(f"  [bold]{c[0]}[/]", soft_wrap=True)
                for col, value in zip(COLUMNS[1:], c[1:]):
                    style = "red" if col == "indexes" and row.problems else ""
                    out.print(f"    {col}: {value}", style=style, soft_wrap=True)
            continue
        out.print(data_dir, style="italic", soft_wrap=True)
        table = Table(box=box.SIMPLE_HEAD)
        for col, width in zip(COLUMNS, longest):
            table.add_column(col, no_wrap=True, min_width=width)
        for row, c in zip(drows, all_cells):
            if row.problems:
                c[9] = f"[red]{c[9]}[/]"
            table.add_row(*c)
        out.print(table)
    for path, why in skipped:
        out.print(f"skipped {path}: {why}", soft_wrap=True)


#: From this many partitions on, a terminal's bar counts partitions: their number is known without listing
#: them here (each is listed by the --jobs process that reads it); fewer are listed first to count bytes.
COUNT_BAR_FROM = 100


def _read_with_bar(partitions, jobs: int, skipped: List[Tuple[str, str]]) -> List[PartitionSummary]:
    """Every partition's summary (a terminal's tables need a data dir's rows together), with a progress
    bar for large dirs: partitions done for many, bytes read for a few over 64 MiB."""
    from rich.progress import Progress

    if len(partitions) >= COUNT_BAR_FROM:
        rows: List[PartitionSummary] = []
        walked = len(skipped)  # a child found to be no partition counts as done too
        with Progress(console=console(), transient=True) as bar:
            task = bar.add_task("reading partitions", total=len(partitions))
            for row in summarize_partitions(partitions, jobs=jobs, skipped=skipped):
                rows.append(row)
                bar.update(task, completed=len(rows) + len(skipped) - walked)
        return rows
    total = sum(os.path.getsize(s.log) for p in partitions for s in loaded(p).segments)
    if total <= 64 * 1024 * 1024:
        return list(summarize_partitions(partitions, jobs=jobs, skipped=skipped))
    with Progress(console=console(), transient=True) as bar:
        task = bar.add_task("reading segments", total=total)
        return list(summarize_partitions(partitions, jobs=jobs, progress=lambda n: bar.advance(task, n),
                                         skipped=skipped))


@click.command(name="inspect")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@topics_option
@json_option("One JSON object per partition (and per skipped directory).")
@jobs_option("Partitions read at once, each in its own process [default: the usable cores].")
@click.pass_context
def command(ctx: click.Context, paths, topics: Optional[str], as_json: bool, jobs: Optional[int]) -> None:
    """Summarise partitions: segments, offsets, log start offset, sizes, time range, record
    formats and codecs, producer ids, open and aborted transactions, index health, and
    leftover .deleted/.cleaned/.swap files. One table per data dir on a terminal (with a
    progress bar for large dirs), plain lines in a pipe, JSON lines with --json.

    PATH is a .log file (its partition is shown), a partition directory or a data directory.
    Read-only; index health is what verify-index reports. Partitions are read in --jobs processes;
    the output is the same for any --jobs.

    \b
    Example:
      kstore inspect /var/lib/kafka/data
      kstore inspect --json /var/lib/kafka/data/orders-0
    """
    # Lazy: a data dir's partitions are listed in the --jobs processes that read them, not all here first
    skipped: List[Tuple[str, str]] = []  # the data dirs' children their walk left alone
    partitions = resolve_partitions(paths, topics, skipped=skipped)
    if not partitions:
        raise nothing_found(paths, topics)
    tty = _is_tty() and not as_json
    jobs = jobs or usable_cores()
    if as_json:
        for row in summarize_partitions(partitions, jobs=jobs, skipped=skipped):
            click.echo(json.dumps(row.to_dict(), sort_keys=True))
        for path, why in _in_walk_order(skipped):
            click.echo(json.dumps({"type": "skipped", "path": path, "reason": why}, sort_keys=True))
        return
    if tty:
        rows = _read_with_bar(partitions, jobs, skipped)
        _render_tables(rows, _in_walk_order(skipped))
        return
    click.echo("\t".join(COLUMNS))
    for row in summarize_partitions(partitions, jobs=jobs, skipped=skipped):
        click.echo("\t".join(_cells(row, human=False)))
    for path, why in _in_walk_order(skipped):
        click.echo(f"# skipped {path}: {why}")


def _in_walk_order(skipped: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The skipped children in the order of the data dirs' walk (the walk's own, then those found by the
    processes that listed them)."""
    return sorted(skipped, key=lambda entry: os.path.split(entry[0]))
