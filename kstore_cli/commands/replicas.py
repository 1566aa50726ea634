"""``kstore replicas``: compare the copies of each partition as Kafka's replication would reconcile them."""

from __future__ import annotations

import json
import os
from typing import Optional

import click

from kstore_cli.commands._options import ExistingPath, json_option
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.segment.replicas import compare


@click.command(name="replicas")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--leader", "leader_path", type=ExistingPath(file_okay=False),
              help="The copy to take as the leader [default: the highest leader epoch, then log end offset].")
@json_option("JSON Lines: one line per partition with all its copies.")
@click.pass_context
def command(ctx: click.Context, paths, leader_path: Optional[str], as_json: bool) -> None:
    """Compare the copies of every partition found in two or more of PATHS, as Kafka's replication would.

    Per copy: log start and end offset, high watermark, leader epochs. The copy with the highest leader
    epoch (then log end offset) is the leader, or --leader; every other copy truncates where a follower
    would after OffsetsForLeaderEpoch (Kafka's rule), and what it holds from there is its diverged data.
    Batches below that point are compared byte for byte. Read-only.

    \b
    Exit status: 0 the copies agree (a copy that is only behind agrees), 1 a copy diverges or a batch
    differs, 2 usage, 3 unreadable.

    \b
    Example:
      kstore replicas /mnt/broker1/data /mnt/broker2/data /mnt/broker3/data
    """
    found = compare(paths, leader_path)
    if not found:
        raise UsageError("no partition has two or more copies in " + ", ".join(paths))
    for pc in found:
        if as_json:
            click.echo(json.dumps(pc.to_dict(), sort_keys=True))
            continue
        click.echo(f"{pc.topic}-{pc.partition}: {'DIVERGED' if pc.divergent else 'copies agree'}")
        for c in pc.copies:
            epoch = f"epoch {c.latest_epoch}" if c.epochs else "no epochs"
            line = (f"  {c.role:<8} {os.path.dirname(c.path)}  offsets {c.log_start_offset}..{c.log_end_offset}"
                    f"  hw {c.high_watermark}  {epoch}")
            if c.role != "leader":
                line += f"  truncates to {c.truncate_to} ({c.rule})"
                if c.diverged:
                    line += f"; diverged offsets {c.diverged[0]}..{c.diverged[1]}"
                if c.mismatches:
                    line += f"; {len(c.mismatches)} batch(es) differ below it (first at {c.mismatches[0]})"
            click.echo(line)
    if any(pc.divergent for pc in found):
        ctx.exit(int(ExitStatus.PROBLEMS))
