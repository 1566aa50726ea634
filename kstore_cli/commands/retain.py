"""``kstore retain``: Kafka's time/size/log-start-offset retention, offline and cron-safe."""

from __future__ import annotations

import os
from typing import List, Optional

import click

from kstore_cli.commands._render import human_bytes
from kstore_cli.commands._render import is_tty as _is_tty
from kstore_cli.commands._emit import emit, finish
from kstore_cli.commands._options import (
    ExistingPath,
    SizeType,
    cluster_metadata_option,
    force_option,
    json_option,
    kafka_defaults_option,
    now_option,
    topics_option,
)
from kstore_cli.commands._render import human_duration, new_table, print_lines, print_rich
from kstore_cli.log.config import retention_flags
from kstore_cli.operations.retention import PartitionRetention, RetainRequest, RetentionPlan, retain


def _status(result: PartitionRetention, dry_run: bool) -> str:
    plan = result.plan
    if plan.problem:
        return f"not handled: {plan.problem}"
    if plan.skipped:
        return f"skipped: {plan.skipped}"
    n = len(plan.deletions)
    verb = "would delete" if dry_run else "deleted"
    text = f"{verb} {n} segment(s), {result.bytes_freed} bytes {'to free' if dry_run else 'freed'}" if n else "nothing to delete"
    if plan.log_start_offset != plan.new_log_start_offset:
        text += f"; log start offset {plan.log_start_offset} -> {plan.new_log_start_offset}"
    else:
        text += f"; log start offset {plan.log_start_offset}"
    if result.bytes_deferred:
        text += f"; {result.bytes_deferred} bytes kept as .deleted for the delete delay"
    if plan.roll_offset is not None:
        text += f"; {'would roll' if dry_run else 'rolled'} an empty segment at {plan.roll_offset}"
    return text


def _settings_line(plan: RetentionPlan) -> str:
    """Each retention setting with where it came from (a flag, a file and section, Kafka's default)."""
    return "  settings: " + ", ".join(f"{k}={v['value']} ({v['source']})" for k, v in plan.settings().items())


def _render_text(results: List[PartitionRetention], dry_run: bool) -> None:
    for result in results:
        plan = result.plan
        click.echo(f"{plan.partition.path}: {_status(result, dry_run)}")
        if plan.config is not None:
            click.echo(_settings_line(plan))
        if plan.problem or plan.skipped:
            continue
        for d in plan.deletions:
            click.echo(f"  {'would delete' if dry_run else 'deleted'} segment {d.base_offset} ({d.rule}: "
                       f"{d.reason}): " + ", ".join(os.path.basename(f) for f in d.files)
                       + f" ({d.bytes} bytes)")
        for f in plan.pending:
            click.echo(f"  {'would finish' if dry_run else 'finished'} an interrupted deletion: {os.path.basename(f)}")
        for f in plan.leftovers:
            click.echo(f"  {'would remove' if dry_run else 'removed'} leftover {os.path.basename(f)}")
        for note in plan.notes:
            click.echo(f"  note: {note}")


def _policy(plan: RetentionPlan) -> str:
    """cleanup.policy, retention.ms and retention.bytes in human units ('delete ms=7 d bytes=10.0 GiB')."""
    c = {k: v["value"] for k, v in plan.settings().items()}
    ms, size = c["retention.ms"], c["retention.bytes"]
    ms = human_duration(ms) if isinstance(ms, int) and ms >= 0 else ms
    size = human_bytes(size) if isinstance(size, int) and size >= 0 else size
    return f"{c['cleanup.policy']} ms={ms} bytes={size}"


def _render_table(results: List[PartitionRetention], dry_run: bool) -> None:
    table = new_table("kstore retain" + (" (dry run: nothing changed)" if dry_run else ""),
                      ("partition", "policy", "segments deleted", "freed", "log start offset", "note"))
    for result in results:
        plan = result.plan
        name = os.path.basename(plan.partition.path)
        policy = _policy(plan) if plan.config is not None else ""
        if plan.problem or plan.skipped:
            table.add_row(name, policy, "-", "-", "-", f"[red]{plan.problem}[/]" if plan.problem else plan.skipped)
            continue
        lso = str(plan.log_start_offset)
        if plan.new_log_start_offset != plan.log_start_offset:
            lso += f" -> {plan.new_log_start_offset}"
        note = "; ".join(plan.notes)
        if plan.roll_offset is not None:
            note = f"rolled empty segment at {plan.roll_offset}" + ("; " + note if note else "")
        table.add_row(name, policy, str(len(plan.deletions)), human_bytes(result.bytes_freed), lso, note)
    print_rich(table)
    for result in results:
        if result.plan.config is not None:
            print_lines(f"{os.path.basename(result.plan.partition.path)}:", _settings_line(result.plan))


@click.command(name="retain")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--retention-ms", type=int, help="retention.ms for every topic (-1: unlimited).")
@click.option("--retention-minutes", type=int, help="The same in minutes.")
@click.option("--retention-hours", type=int, help="The same in hours.")
@click.option("--retention-bytes", type=SizeType(min=-1), help="retention.bytes for every partition (bytes or 10G; "
              "-1: unlimited).")
@click.option("--log-start-offset", type=click.IntRange(min=0),
              help="Move the log start offset of every partition named up to this offset first (like "
                   "DeleteRecords; never past a partition's high watermark).")
@click.option("--config", "config_file", type=ExistingPath(dir_okay=False),
              help="A broker server.properties: log.retention.{ms,minutes,hours}, log.retention.bytes, "
                   "log.cleanup.policy, ...")
@click.option("--topic-config", type=ExistingPath(dir_okay=False),
              help="Per-topic overrides: INI sections named by topic or glob with topic-level keys "
                   "(retention.ms, retention.bytes, cleanup.policy, ...); JSON also accepted.")
@now_option
@click.option("--delete-delay-ms", type=click.IntRange(min=0), default=0, show_default=True,
              help="Keep the renamed .deleted files this long; a later run removes them.")
@click.option("--dry-run", is_flag=True, help="Print what would be deleted and the bytes freed; change nothing.")
@json_option("JSON Lines: a line per partition (what was deleted and why), then a summary.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success (for cron); problems still go to stderr.")
@force_option
@topics_option
@cluster_metadata_option
@kafka_defaults_option
def command(paths, retention_ms: Optional[int], retention_minutes: Optional[int],
            retention_hours: Optional[int], retention_bytes: Optional[int], log_start_offset: Optional[int],
            config_file: Optional[str], topic_config: Optional[str], now: Optional[int], delete_delay_ms: int,
            dry_run: bool, as_json: bool, quiet: bool, force: bool, topics: Optional[str],
            no_cluster_metadata: bool, kafka_defaults: bool) -> None:
    """Delete old segments exactly as Kafka's retention does (UnifiedLog.deleteOldSegments).

    PATH is a partition directory or a data directory (every partition in it; -delete, -future
    and -stray directories are skipped). Per partition, in Kafka's order: segments entirely
    below the log start offset, then segments while the log exceeds retention.bytes (never
    going below it), then segments whose largest timestamp is more than retention.ms before
    --now (from the time index, else the batches, else the .log mtime). Only a prefix of the
    log goes, never at or above the high watermark (replication-offset-checkpoint, when
    present), never an empty last segment; when every segment goes, an empty segment is rolled
    at the log end offset first. Topics with cleanup.policy=compact only get the log start
    offset rule (__consumer_offsets and __transaction_state are compact unless overridden).

    Files are renamed *.deleted, then removed (or kept --delete-delay-ms for a later run);
    producer snapshots of deleted segments go too; log-start-offset-checkpoint and
    leader-epoch-checkpoint are updated atomically. The data dir's .lock is held throughout,
    so a running broker or another kstore makes this refuse (unless --force). A crash at any
    point leaves a directory that the broker loads and a rerun finishes.

    Policy: flags, then --topic-config, then the cluster metadata log's topic configs, then
    --config, then Kafka's defaults. A source must be given (a --retention-* flag, --config,
    --topic-config, data dirs holding the metadata log, or --kafka-defaults): without one retain
    refuses. retention.ms or retention.bytes that only Kafka's default sets (7 days, no size limit)
    deletes nothing unless --kafka-defaults: a cron line that lost its options must not delete a
    week-old copy. The metadata log's configs apply only to a partition whose partition.metadata
    topic ID is the metadata's for its topic; another incarnation (a deleted and recreated topic's
    old log) is not handled (exit 1). Text output names, per partition, where each setting came from.

    \b
    Exit status: 0 done (including nothing to do), 1 a partition could not be handled,
    2 usage, 3 unreadable.

    \b
    Example:
      kstore retain --retention-hours 72 /var/lib/kafka/data
      kstore retain --dry-run --config /etc/kafka/server.properties --topic-config topics.ini /var/lib/kafka/data
      kstore retain --quiet --retention-ms -1 --retention-bytes 10737418240 /srv/standby/kafka-data
    """
    flags = retention_flags(ms=retention_ms, minutes=retention_minutes, hours=retention_hours,
                            retention_bytes=retention_bytes)
    run = retain(RetainRequest(paths, topics=topics, flags=flags, config_file=config_file, topic_config=topic_config,
                               cluster_metadata=not no_cluster_metadata, kafka_defaults=kafka_defaults, now=now,
                               log_start_offset=log_start_offset,
                               delete_delay_ms=delete_delay_ms, dry_run=dry_run, force=force))
    # JSON Lines: a line per partition, then the summary
    emit(as_json, lambda: [*({"type": "partition", **r.to_dict()} for r in run.partitions), run.summary()],
         None if quiet else lambda: (_render_table if _is_tty() else _render_text)(run.partitions, dry_run))
    finish(run)
