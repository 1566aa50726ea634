"""``kstore verify-index``: check every index against its .log, changing nothing."""

from __future__ import annotations

import json
import os

import click

from kstore_cli.commands._options import json_option

from kstore_cli.commands._console import is_tty as _is_tty
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.segment import startup
from kstore_cli.segment.verify import ERROR, NOTE, Finding, verify_partition


#: Startup findings that say nothing about the files' consistency: notes here, errors in doctor (a KRaft
#: broker treats a log without partition.metadata as stray; partitions built by tools often have none).
_NOTES_HERE = frozenset({"partition-metadata-missing"})


def _as_finding(issue: "startup.Issue") -> Finding:
    """A data-dir check's issue in verify-index's terms: errors stay errors, what Kafka fixes itself is a note."""
    where = issue.partition or issue.data_dir or ""
    error = issue.severity == startup.ERROR and issue.check not in _NOTES_HERE
    return Finding(os.path.basename(where), None, issue.file or where, ERROR if error else NOTE, issue.check,
                   issue.message + (f" (at byte {issue.position})" if issue.position is not None else ""))


@click.command(name="verify-index")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@json_option("One JSON object per finding, and one summary per partition.")
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

    The data dir is checked as `kstore doctor` checks it (except the lock): meta.properties,
    the checkpoint files' format and bounds, directories a broker cannot parse, partition.metadata
    and topic IDs, partitions without logs. A folder of several brokers' data dirs is searched.

    \b
    Exit status: 0 healthy (notes allowed), 1 problems found, 3 unreadable.

    \b
    Example:
      kstore verify-index /var/lib/kafka/data
      kstore verify-index --json /var/lib/kafka/data/orders-0 | jq 'select(.severity=="error")'
    """
    found = startup.survey(paths)
    # The same data-dir checks as doctor (meta.properties, checkpoints, stray dirs, topic IDs), except the
    # lock: a live broker holding it is what a monitoring run expects.
    layout = [_as_finding(i) for i in startup.layout_issues(found, check_lock=False)]
    if not found.targets and not layout:
        raise UsageError("no partitions found in " + ", ".join(paths))
    tty = _is_tty() and not as_json
    console = None
    if tty:
        from rich.console import Console

        console = Console()
    unhealthy = any(f.severity == ERROR for f in layout)
    for f in layout:
        if as_json:
            obj = f.to_dict()
            obj["type"] = "finding"
            click.echo(json.dumps(obj, sort_keys=True))
        else:
            click.echo(f"{f.file}: {f.severity}: {f.check}: {f.message}")
    for partition, only in found.targets:
        target = _Target(partition, only)
        findings, plan = verify_partition(partition, only=only)
        findings += [_as_finding(i) for i in startup.partition_issues(found, partition, plan, whole_partition=only is None)
                     if not i.check.startswith("leftover-")]  # verify_partition lists leftovers itself
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


class _Target:
    __slots__ = ("partition", "only")

    def __init__(self, partition, only) -> None:
        self.partition = partition
        self.only = only
