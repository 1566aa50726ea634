"""``kstore salvage``: keep every intact batch of a damaged partition, into a new directory or in place."""

from __future__ import annotations

import json
import os
from typing import Optional

import click

from kstore_cli.commands._options import ExistingPath, force_option, json_option
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.log import fileops
from kstore_cli.log.logdir import Partition, Target, is_partition_dir
from kstore_cli.operations.salvage import describe, plan_salvage, salvage_in_place, salvage_to
from kstore_cli.log.scope import check_quarantine_dir, output_dir_guard, refuse_named


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
@click.pass_context
def command(ctx: click.Context, partition_dir: str, output_dir: Optional[str], in_place: bool,
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
    if not is_partition_dir(partition_dir):
        raise UsageError("expected a partition directory (<topic>-<partition>)", path=partition_dir)
    if sum(bool(x) for x in (output_dir, in_place, dry_run)) != 1:
        raise UsageError("give exactly one of --output-dir DIR, --in-place and --dry-run")
    partition = Partition(os.path.abspath(partition_dir))
    if not dry_run:
        refuse_named([partition_dir], [Target(partition)], "salvage")
    if in_place:
        check_quarantine_dir(quarantine_dir, [partition_dir], [Target(partition)])
    plan = plan_salvage(partition)
    report = None
    if output_dir:
        with output_dir_guard(output_dir, inputs=[partition_dir], new_partitions=[partition.name], force=force):
            report = salvage_to(plan, output_dir)
    elif in_place:
        with fileops.lock_data_dirs({partition.data_dir: [partition.path]}, force=force):
            plan = plan_salvage(partition)  # again under the lock
            report = salvage_in_place(plan, quarantine_dir)
    gaps = plan.damaged + plan.zero_tails
    if as_json:
        for gap in sorted(gaps, key=lambda g: (g.log, g.start)):
            click.echo(json.dumps(gap.to_dict(), sort_keys=True))
        click.echo(json.dumps({"type": "summary", "partition": partition.path, "batches_kept": plan.batches_kept,
                               "damaged_ranges": len(plan.damaged), "zero_tails": len(plan.zero_tails),
                               "log_end_offset": plan.log_end_offset, "dry_run": dry_run,
                               "destination": report.destination if report else None,
                               "quarantine_dir": report.quarantine_dir if report else None}, sort_keys=True))
    else:
        click.echo(describe(plan))
        for gap in sorted(gaps, key=lambda g: (g.log, g.start)):
            last = "the log end" if gap.next_offset is None else gap.next_offset - 1
            click.echo(f"  {gap.kind}: {os.path.basename(gap.log)} bytes {gap.start}-{gap.end} ({gap.end - gap.start} "
                       f"bytes), offsets {gap.first_offset}..{last} not kept")
        if report is not None:
            click.echo(f"written: {report.destination}" + (f"; damaged bytes in {report.quarantine_dir}"
                                                          if report.quarantine_dir else ""))
    # In place, damage left out and quarantined is salvage done (a rerun finds nothing): 0, as
    # rebuild-index --truncate; a dry run or a copy leaves the damaged input as it was: 1.
    if plan.damaged and not in_place:
        ctx.exit(int(ExitStatus.PROBLEMS))
