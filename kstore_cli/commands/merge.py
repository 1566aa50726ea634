"""``kstore merge``: one partition built from several copies, along the surviving leader-epoch lineage."""

from __future__ import annotations

import json
from typing import Optional

import click

from kstore_cli.commands._render import echo_skipped
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, json_option
from kstore_cli.errors import ExitStatus
from kstore_cli.operations.merge import merge
from kstore_cli.cluster.replicas import REASONS


@click.command(name="merge")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--output-dir", required=True, type=click.Path(file_okay=False),
              help="Where the merged partitions go (a new or empty dir; the inputs are only read).")
@click.option("--leader", "leader_path", type=ExistingPath(file_okay=False),
              help="The copy to take as the leader [default: the highest leader epoch, then log end offset].")
@click.option("--keep-diverged", type=click.Path(file_okay=False),
              help="Also write what only a diverged copy holds, as partition dirs under this dir.")
@json_option("JSON Lines: one line per merged partition.")
@click.pass_context
def command(ctx: click.Context, paths, output_dir: str, leader_path: Optional[str], keep_diverged: Optional[str],
            as_json: bool) -> None:
    """Build one partition from several copies: every offset once, from the surviving leader-epoch lineage.

    The leader's log (as `kstore replicas` chooses it) is taken byte for byte; older batches below its
    first segment come from a copy of the same lineage that still has them. Every offset of a copy that
    is not in the result is listed with why, as `kstore replicas` lists it (diverged: at or after the
    truncation point, from the base of the batch holding it, as Kafka truncates whole batches; differs:
    below it, other bytes), and written with --keep-diverged, whole batches. Copies with different topic
    ids (partition.metadata) are different topics: refused. The KRaft metadata log is left out (each copy
    named as skipped, with why). The output partitions have indexes, the
    merged leader-epoch checkpoint, a producer snapshot, partition.metadata and the offset checkpoints:
    Kafka loads them as they are. All or nothing: built in OUTPUT.kstore-tmp and renamed into place; a
    rerun after a kill finishes.

    \b
    Exit status: 0 merged, every offset of every copy is in the result; 1 merged, but offsets of a copy
    are not (listed), or the copies have different topic ids (nothing written); 2 usage, 3 unreadable.

    \b
    Example:
      kstore merge --output-dir /srv/merged --keep-diverged /srv/diverged /mnt/broker1/data /mnt/broker2/data
    """
    copies, results, skipped = merge(list(paths), output_dir, leader_path=leader_path, keep_diverged=keep_diverged)
    echo_skipped(skipped, as_json)
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_dict(), sort_keys=True))
            continue
        src = "; ".join(f"{a}..{b} from {c}" for c, a, b in r.sources)
        click.echo(f"{r.destination}: offsets {r.log_start_offset}..{r.log_end_offset - 1} ({src})")
        for c, a, b, reason in r.diverged:
            click.echo(f"  left out: offsets {a}..{b} of {c}: {REASONS[reason]}")
        for side in r.side_dirs:
            click.echo(f"  left-out batches written to {side}")
    if any(r.diverged for r in results):
        exit_with(ExitStatus.PROBLEMS)
