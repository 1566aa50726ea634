"""``kstore replicas``: compare the copies of each partition as Kafka's replication would reconcile them."""

from __future__ import annotations

import json
import os
from typing import Optional

import click

from kstore_cli.commands._render import echo_skipped
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, json_option
from kstore_cli.errors import ExitStatus
from kstore_cli.cluster.replicas import REASONS, compare


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
    Batches below that point are compared byte for byte. Every offset of a copy that `kstore merge` would
    not take is listed, with why (diverged: at or after the truncation point, a batch holding it included,
    as Kafka truncates whole batches; differs: below it, other bytes than the merged log's). Copies whose
    partition.metadata has different topic ids are different topics: each id is reconciled apart. The KRaft
    metadata log is left out, as merge leaves it (each copy named as skipped, with why). Read-only.

    \b
    Exit status: 0 the copies agree (a copy that is only behind agrees), 1 a copy diverges, a batch
    differs or the topic ids differ, 2 usage, 3 unreadable.

    \b
    Example:
      kstore replicas /mnt/broker1/data /mnt/broker2/data /mnt/broker3/data
    """
    found, skipped = compare(paths, leader_path)
    echo_skipped(skipped, as_json)
    for pc in found:
        if as_json:
            click.echo(json.dumps(pc.to_dict(), sort_keys=True))
            continue
        click.echo(f"{pc.topic}-{pc.partition}: {'DIVERGED' if pc.divergent else 'copies agree'}"
                   + (f" (topic id {pc.topic_id})" if pc.topic_id else ""))
        for tid, others in sorted(pc.other_topic_ids.items()):
            click.echo(f"  TOPIC ID DIFFERS: {', '.join(others)} ha{'s' if len(others) == 1 else 've'} topic id "
                       f"{tid}: another topic, compared apart")
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
            for first, last, reason in c.left_out:
                click.echo(f"    not in the merged log: offsets {first}..{last}: {REASONS[reason]}")
    if any(pc.divergent for pc in found):
        exit_with(ExitStatus.PROBLEMS)
