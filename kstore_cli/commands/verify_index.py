"""``kstore verify-index``: check every index against its .log, changing nothing."""

from __future__ import annotations

import json
import os

import click

from kstore_cli.commands._console import is_tty as _is_tty
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.segment.logdir import resolve
from kstore_cli.segment.recovery import ERROR, verify_partition


@click.command(name="verify-index")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding, and one summary per partition.")
@click.option("--quiet", "-q", is_flag=True, help="Print only problems (and notes), no per-partition summary.")
@click.pass_context
def command(ctx: click.Context, paths, as_json: bool, quiet: bool) -> None:
    """Check every .index, .timeindex and .txnindex against its .log (read-only).

    PATH is a .log file, a partition directory or a data directory. Checks: Kafka's
    --index-sanity-check tests (same messages), entry sizes, entries strictly increasing,
    offset entries at batch starts and consistent with the batches (an entry written by a
    multi-batch append carries the append's last offset: not an error), time entries equal
    to a batch's max timestamp and the running maximum, a rolled segment's final time entry,
    .txnindex equal to what the ABORT markers give, missing indexes, indexes without a log,
    and the log's own tail. Zero slots of the active segment's preallocated indexes (and a
    preallocated zero tail of its .log) are notes, not errors.

    \b
    Exit status: 0 healthy (notes allowed), 1 problems found, 3 unreadable.

    \b
    Example:
      kstore verify-index /var/lib/kafka/data
      kstore verify-index --json /var/lib/kafka/data/orders-0 | jq 'select(.severity=="error")'
    """
    targets = resolve(paths)
    if not targets:
        raise UsageError("no partitions found in " + ", ".join(paths))
    tty = _is_tty() and not as_json
    console = None
    if tty:
        from rich.console import Console

        console = Console()
    unhealthy = False
    for target in targets:
        findings, plan = verify_partition(target.partition, only=target.only)
        errors = sum(1 for f in findings if f.severity == ERROR)
        notes = len(findings) - errors
        unhealthy = unhealthy or errors > 0
        checked = len(plan.segments)
        if as_json:
            for f in findings:
                obj = f.to_dict()
                obj["type"] = "finding"
                click.echo(json.dumps(obj, sort_keys=True))
            click.echo(json.dumps({"type": "partition", "partition": target.partition.path, "segments": checked,
                                   "errors": errors, "notes": notes, "healthy": errors == 0}, sort_keys=True))
        elif console is not None:
            from rich.table import Table

            status = "[green]healthy[/]" if errors == 0 else f"[red]{errors} problem(s)[/]"
            table = Table(title=f"{target.partition.path}: {checked} segment(s), {status}", title_justify="left")
            for col in ("segment", "file", "severity", "check", "message"):
                table.add_column(col, overflow="fold")
            for f in findings:
                sev = "[red]error[/]" if f.severity == ERROR else "[yellow]note[/]"
                table.add_row("" if f.segment is None else str(f.segment),
                              os.path.basename(f.file) if f.file else "", sev, f.check, f.message)
            if findings or not quiet:
                console.print(table)
        else:
            for f in findings:
                click.echo(f"{f.file or target.partition.path}: {f.severity}: {f.check}: {f.message}")
            if not quiet:
                click.echo(f"{target.partition.path}: {checked} segment(s), "
                           + ("healthy" if errors == 0 else f"{errors} problem(s)")
                           + (f", {notes} note(s)" if notes else ""))
    if unhealthy:
        ctx.exit(int(ExitStatus.PROBLEMS))
