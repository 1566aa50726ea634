"""``kstore rebuild-index``: regenerate .index/.timeindex/.txnindex the way Kafka's recovery does."""

from __future__ import annotations

import os
from typing import Optional

import click

from kstore_cli.commands._options import (
    ExistingPath,
    SIZE,
    cluster_metadata_option,
    dry_run_option,
    force_option,
    jobs_option,
    json_option,
    topics_option,
)

from kstore_cli.commands._render import echo_skipped
from kstore_cli.commands._render import is_tty as _is_tty
from kstore_cli.commands._emit import emit, finish
from kstore_cli.commands._render import new_table, print_rich
from kstore_cli.operations.runner import usable_cores
from kstore_cli.operations.rebuild import IndexRebuild, PartitionRebuild, RebuildRequest


def _render_table(result: PartitionRebuild) -> None:
    if not result.results():
        return
    table = new_table(result.partition, ("segment", "status", "files", "detail"))
    if result.config is not None:
        table.add_row("", "[red]not handled[/]" if result.config.refused else "config", "", result.config.detail())
    for seg in result.segments:
        files = " ".join(f"{k}:{v}" for k, v in seg.written) or "-"
        detail = seg.message or "; ".join(f"{k}: {r}" for k, r in seg.reasons.items())
        if seg.problem is not None:
            detail = seg.problem.message + ("; " + detail if detail else "")
        style = {"damaged": "red", "zero-tail": "yellow", "truncated": "yellow", "rebuilt": "green"}.get(seg.status, "")
        table.add_row(str(seg.segment), f"[{style}]{seg.status}[/]" if style else seg.status, files, detail)
    if result.cut is not None:
        table.add_row("", result.cut.status, "", result.cut.cost.text("cuts"))
    if result.dropped is not None:
        table.add_row("later", result.dropped.status, f"{len(result.dropped.files)} files", result.dropped.message)
    if result.quarantine is not None:
        table.add_row("", "quarantine", "", result.quarantine.dir)
    print_rich(table)


def _render_text(result: PartitionRebuild) -> None:
    if result.config is not None:
        click.echo(result.config.text())
    healthy = 0
    for seg in result.segments:
        if seg.status == "unchanged" and not seg.message:
            healthy += 1
            continue
        files = ", ".join(f"{k} {v}" + (f": {seg.reasons[k]}" if k in seg.reasons else "") for k, v in seg.written)
        line = f"{seg.log}: {seg.status}"
        if files:
            line += f" ({files})"
        if seg.problem is not None:
            line += f": {seg.problem.kind} at byte {seg.problem.position}: {seg.problem.message}"
        if seg.message:
            line += f"; {seg.message}"
        click.echo(line)
    if result.cut is not None:
        click.echo(result.cut.text())
    if result.dropped is not None:
        click.echo(f"{result.partition}: {len(result.dropped.files)} later files {result.dropped.status}: "
                   + ", ".join(os.path.basename(f) for f in result.dropped.files))
    if result.quarantine is not None:
        click.echo(f"{result.partition}: quarantined into {result.quarantine.dir}")
    if healthy:
        click.echo(f"{result.partition}: {healthy} segment(s) with nothing to rebuild")


@click.command(name="rebuild-index")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--index-interval-bytes", type=SIZE,
              help="index.interval.bytes for every partition [default: from --topic-config, --config, else 4096].")
@click.option("--config", "config_file", type=ExistingPath(dir_okay=False),
              help="A broker server.properties (log.index.interval.bytes).")
@click.option("--topic-config", type=ExistingPath(dir_okay=False),
              help="Per-topic overrides (index.interval.bytes), INI sections named by topic or glob, as for retain.")
@click.option("--all", "all_indexes", is_flag=True,
              help="Rewrite every index that differs from what Kafka's recovery writes, not only the wrong ones.")
@click.option("--truncate", is_flag=True,
              help="Cut a damaged tail where Kafka's recovery would, keeping the cut bytes in the quarantine dir.")
@click.option("--quarantine-dir", type=click.Path(file_okay=False),
              help="Where cut bytes and dropped segments go [default: <data dir>/../kstore-quarantine].")
@dry_run_option("Report what would change; write nothing.")
@force_option
@topics_option
@cluster_metadata_option
@json_option("One JSON object per line.")
@jobs_option("Partitions rebuilt at once, each in its own process [default: the usable cores].")
def command(paths, index_interval_bytes: Optional[int], config_file: Optional[str],
            topic_config: Optional[str], all_indexes: bool, truncate: bool, quarantine_dir: Optional[str],
            dry_run: bool, force: bool, topics: Optional[str], no_cluster_metadata: bool, as_json: bool,
            jobs: Optional[int]) -> None:
    """Regenerate the wrong or missing .index, .timeindex and .txnindex files as Kafka's recovery writes them.

    PATH is a .log file, a partition directory or a data directory (every partition in it;
    -delete/-future/-stray directories are skipped). Only the index files that verify-index calls
    wrong (Kafka's sanity check rejects them or its lookups through them answer wrongly) and the
    missing ones are rebuilt, each named with its reason; indexes another writer laid out
    differently (a leader of any Kafka version, a follower, the cleaner) are kept. --all rewrites
    every index that differs from recovery's. Files are replaced atomically. The data dir's .lock is
    taken first, so a running broker makes this refuse (unless --force). index.interval.bytes comes
    from the flag, else --topic-config, else the cluster metadata log in the data dirs, else
    --config (log.index.interval.bytes), else 4096. A partition whose topic config in the metadata
    log Kafka rejects is not handled (exit 1); an older incarnation of a recreated topic (its
    partition.metadata topic ID is not the metadata's) does not take the new topic's settings
    from the metadata log, and the output says which index.interval.bytes it got instead.

    A segment whose tail is damaged (partial batch, CRC mismatch, size field < 14, invalid
    marker) or zero-filled (preallocated) is reported and nothing in its partition changes
    (exit 1). With --truncate the .log is cut where Kafka's recovery cuts it; the cut bytes go
    to <quarantine dir>/<partition>/<UTC time>/<segment>.log.tail (a zero-filled tail is just
    dropped), later segments and snapshots past the new end (which Kafka deletes) are moved
    there too, with a kstore-quarantine.json describing it all. Partitions run in --jobs processes
    (under the lock this process holds); the output is the same for any --jobs.

    \b
    Exit status: 0 done (or nothing to do), 1 damage left in place, 2 usage, 3 unreadable.

    \b
    Example:
      kstore rebuild-index --index-interval-bytes 4096 /var/lib/kafka/data/orders-0
      kstore rebuild-index --dry-run --all --config /etc/kafka/server.properties /var/lib/kafka/data
      kstore rebuild-index --dry-run /var/lib/kafka/data
      kstore rebuild-index --truncate --quarantine-dir /srv/quarantine /var/lib/kafka/data/orders-0
    """
    rebuild = IndexRebuild(RebuildRequest(
        paths, topics=topics, index_interval_bytes=index_interval_bytes, config_file=config_file,
        topic_config=topic_config, cluster_metadata=not no_cluster_metadata, all_indexes=all_indexes,
        truncate=truncate, quarantine_dir=quarantine_dir, dry_run=dry_run, force=force, jobs=jobs or usable_cores()))
    echo_skipped(rebuild.selection.skipped, as_json)
    render = _render_table if _is_tty() and not as_json else _render_text
    finish(rebuild.run(on_result=lambda result: emit(as_json, lambda: [item.to_dict() for item in result.results()],
                                                     lambda: render(result))))
