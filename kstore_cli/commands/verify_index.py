"""``kstore verify-index``: check every index against its .log, changing nothing."""

from __future__ import annotations

import functools
import json
import os
from typing import Optional

import click

from kstore_cli.commands._render import is_tty
from kstore_cli.commands._render import console, new_table
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, jobs_option, json_option, kafka_version_option, topics_option
from kstore_cli.errors import ExitStatus
from kstore_cli.operations.runner import usable_cores
from kstore_cli.operations.verify import ERROR, NOTE, WARNING, Finding, FindingGroup, PartitionVerdict, VerifyRun


@click.command(name="verify-index")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@json_option("One JSON object per finding, and one summary per partition.")
@click.option("--quiet", "-q", is_flag=True, help="Print only problems (and notes), no per-partition summary.")
@click.option("--verbose", "-v", is_flag=True,
              help="One line per finding; by default one check on several segments of a partition, or on many "
                   "partitions of a topic (the data dir's checks), is one line with their ranges.")
@topics_option
@kafka_version_option
@jobs_option("Partitions checked at once, each in its own process [default: the usable cores].")
@click.pass_context
def command(ctx: click.Context, paths, as_json: bool, quiet: bool, topics: Optional[str], kafka_version,
            verbose: bool, jobs: Optional[int]) -> None:
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
    Each data dir is judged by the rules of the broker its files show (ZooKeeper or KRaft mode, which
    Kafka releases), or of --kafka-version; severities are doctor's. Partitions are checked in --jobs
    processes; the output is the same for any --jobs.

    \b
    Exit status: 0 healthy (notes allowed), 1 errors or warnings found, 3 unreadable.

    \b
    Example:
      kstore verify-index /var/lib/kafka/data
      kstore verify-index --json /var/lib/kafka/data/orders-0 | jq 'select(.severity=="error")'
    """
    run = VerifyRun(paths, topics, kafka_version=kafka_version, jobs=jobs or usable_cores())
    grouped = not (as_json or verbose)
    render = _json if as_json else (_Table(grouped) if is_tty() else functools.partial(_text, grouped=grouped))
    unhealthy = any(f.severity != NOTE for f in run.layout)
    for f in run.layout_groups() if grouped else run.layout:
        render(f, quiet)
    for verdict in run.partitions():
        unhealthy = unhealthy or not verdict.healthy
        render(verdict, quiet)
    if unhealthy:
        exit_with(ExitStatus.PROBLEMS)


def _finding_dict(f: Finding) -> dict:
    obj = f.to_dict()
    obj["type"] = "finding"
    return obj


def _json(item, quiet: bool) -> None:
    if isinstance(item, Finding):
        click.echo(json.dumps(_finding_dict(item), sort_keys=True))
        return
    for f in item.findings:
        click.echo(json.dumps(_finding_dict(f), sort_keys=True))
    click.echo(json.dumps(item.to_dict(), sort_keys=True))


def _text(item, quiet: bool, grouped: bool = False) -> None:
    if isinstance(item, Finding):
        click.echo(f"{item.file}: {item.severity}: {item.check}: {item.message}")
        return
    for f in item.grouped_findings() if grouped else item.findings:
        click.echo(f"{f.file or item.partition}: {f.severity}: {f.check}: {f.message}")
    if not quiet:
        click.echo(f"{item.partition}: {item.segments} segment(s), "
                   + ("healthy" if item.healthy else f"{item.errors + item.warnings} problem(s)")
                   + (f", {item.notes} note(s)" if item.notes else ""))


class _Table:
    """A rich table per partition on a terminal (data-dir findings as plain lines)."""

    def __init__(self, grouped: bool) -> None:
        self.console = console()
        self.grouped = grouped

    def __call__(self, item, quiet: bool) -> None:
        if isinstance(item, Finding):
            _text(item, quiet)
            return
        if not item.findings and quiet:
            return
        verdict: PartitionVerdict = item
        status = "[green]healthy[/]" if verdict.healthy else f"[red]{verdict.errors + verdict.warnings} problem(s)[/]"
        table = new_table(f"{verdict.partition}: {verdict.segments} segment(s), {status}",
                          ("segment", "file", "severity", "check", "message"))
        for f in verdict.grouped_findings() if self.grouped else verdict.findings:
            sev = {ERROR: "[red]error[/]", WARNING: "[yellow]warning[/]"}.get(f.severity, "[cyan]note[/]")
            table.add_row("" if f.segment is None else str(f.segment),
                          f.subject if isinstance(f, FindingGroup) else os.path.basename(f.file) if f.file else "",
                          sev, f.check, f.message)
        self.console.print(table)
