"""``kstore salvage``: keep every intact batch of a damaged partition, into a new directory or in place."""

from __future__ import annotations

import os
from typing import Optional

import click

from kstore_cli.commands._options import ExistingPath, force_option, json_option
from kstore_cli.commands._emit import emit, finish
from kstore_cli.operations.salvage import SalvageRun, describe, salvage


@click.command(name="salvage")
@click.argument("partition_dir", type=ExistingPath(file_okay=False))
@click.option("--output-dir", type=click.Path(file_okay=False),
              help="Write the salvaged partition as OUTPUT_DIR/<partition>/ (the input is only read).")
@click.option("--in-place", is_flag=True, help="Rewrite the damaged segments in place, damaged bytes quarantined.")
@click.option("--quarantine-dir", type=click.Path(file_okay=False),
              help="With --in-place: where damaged bytes go [default: <data dir>/../kstore-quarantine].")
@click.option("--dry-run", is_flag=True, help="Report what would be kept and left out; write nothing.")
@force_option
@json_option("JSON Lines: one line per damaged range (type gap), then a summary.")
def command(partition_dir: str, output_dir: Optional[str], in_place: bool,
            quarantine_dir: Optional[str], dry_run: bool, force: bool, as_json: bool) -> None:
    """Keep every intact batch of a damaged partition, not only those before the first damage.

    Kafka's recovery cuts the log at the first invalid batch and deletes every later segment. Salvage
    goes on past each damaged region: it looks for the next batch that is whole, passes its CRC and
    continues the log, and keeps it byte for byte. Records inside a damaged batch are not guessed at.
    Each gap is reported with its file, byte range and the offsets it can have held; offset gaps are
    legal in Kafka's log (as after compaction), so the result is a partition Kafka loads, with its
    indexes rebuilt, leader epochs trimmed and a producer snapshot at the log end.

    With --output-dir the input is only read. With --in-place the damaged bytes (and producer
    snapshots past the first damage) are copied to the quarantine dir first, with a manifest; each
    .log is replaced atomically; the broker's .lock is respected (--force overrides).

    \b
    Exit status: 0 nothing damaged (a zero-filled preallocated tail is not damage) or --in-place
    done, 1 damaged ranges found (with --dry-run or --output-dir: the input still holds them),
    2 usage, 3 unreadable.

    \b
    Example:
      kstore salvage --dry-run /var/lib/kafka/data/orders-0
      kstore salvage --output-dir /srv/salvaged /var/lib/kafka/data/orders-0
    """
    run = salvage(partition_dir, output_dir=output_dir, in_place=in_place, quarantine_dir=quarantine_dir,
                  dry_run=dry_run, force=force)
    emit(as_json, lambda: [*(gap.to_dict() for gap in run.gaps()), run.summary()], lambda: _render_text(run))
    finish(run)


def _render_text(run: SalvageRun) -> None:
    """What is kept, a line per gap, and where the result went."""
    click.echo(describe(run.plan))
    for gap in run.gaps():
        last = "the log end" if gap.next_offset is None else gap.next_offset - 1
        most = "" if gap.records_at_most is None else f" (at most {gap.records_at_most} record(s))"
        click.echo(f"  {gap.kind}: {os.path.basename(gap.log)} bytes {gap.start}-{gap.end} ({gap.end - gap.start} "
                   f"bytes), offsets {gap.first_offset}..{last} not kept{most}")
    if run.report is not None:
        click.echo(f"written: {run.report.destination}" + (f"; damaged bytes in {run.report.quarantine_dir}"
                                                          if run.report.quarantine_dir else ""))
