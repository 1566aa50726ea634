"""``kstore compact``: one pass of Kafka's log cleaner per partition, offline and crash-safe."""

from __future__ import annotations

import os
from typing import Optional

import click

from kstore_cli.commands._render import human_bytes, is_tty
from kstore_cli.commands._emit import emit, finish, with_progress
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
from kstore_cli.commands._render import new_table, print_lines, print_rich
from kstore_cli.log.config import compaction_flags
from kstore_cli.cleaner.log_cleaner import CompactRequest, CompactRun, LogCleaner, PartitionCompaction


def _status(p: PartitionCompaction, dry_run: bool) -> str:
    if p.problem is not None:
        return f"not handled: {p.problem}"
    if p.skipped is not None:
        return f"skipped: {p.skipped}"
    r = p.result
    if not r.cleaned:
        why = (r.plan.reason if r.plan is not None else "") or "; ".join(r.notes) or "nothing to clean"
        return f"not cleaned ({why})"
    s = r.stats
    verb = "would remove" if dry_run else "removed"
    return (f"{'would clean' if dry_run else 'cleaned'} [{r.plan.first_dirty_offset}, {r.end_offset}): {verb} "
            f"{s.records_removed} record(s) ({s.tombstones_removed} tombstones, {s.markers_removed} markers), "
            f"{r.bytes_before} -> {r.bytes_after} bytes, dirty ratio {r.plan.dirty_ratio:.3f}")


def settings_line(settings: dict) -> str:
    return "  settings: " + ", ".join(f"{k}={v['value']} ({v['source']})" for k, v in settings.items())


def _render_text(run: CompactRun) -> None:
    for p in run.partitions:
        click.echo(f"{p.partition.path}: {_status(p, run.dry_run)}")
        if p.settings:
            click.echo(settings_line(p.settings))
        for note in p.result.notes if p.result is not None else []:
            click.echo(f"  note: {note}")
        if p.retention is not None and p.retention.segments_deleted:
            click.echo(f"  retention: {'would delete' if run.dry_run else 'deleted'} {p.retention.segments_deleted} "
                       f"segment(s)")


def _render_table(run: CompactRun) -> None:
    table = new_table("kstore compact" + (" (dry run: nothing changed)" if run.dry_run else ""),
                      ("partition", "dirty range", "ratio", "records removed", "tombstones", "markers", "before",
                       "after", "note"))
    for p in run.partitions:
        name = os.path.basename(p.partition.path)
        r = p.result
        if r is None or not r.cleaned:
            note = p.problem or p.skipped or (r.plan.reason if r.plan is not None else "") or "; ".join(r.notes)
            ratio = f"{r.plan.dirty_ratio:.3f}" if r is not None and r.plan is not None else "-"
            table.add_row(name, "-", ratio, "-", "-", "-", "-", "-", note)
            continue
        s = r.stats
        table.add_row(name, f"[{r.plan.first_dirty_offset}, {r.end_offset})", f"{r.plan.dirty_ratio:.3f}",
                      str(s.records_removed), str(s.tombstones_removed), str(s.markers_removed),
                      human_bytes(r.bytes_before), human_bytes(r.bytes_after), "; ".join(r.notes))
    print_rich(table)
    for p in run.partitions:
        if p.settings:
            print_lines(f"{os.path.basename(p.partition.path)}:", settings_line(p.settings))


HELP = """Compact partitions exactly as Kafka's log cleaner does: one cleaner pass per partition.

    PATH is a partition directory or a data directory (its partitions whose cleanup.policy
    includes compact: __consumer_offsets, __transaction_state, and topics set so by
    --topic-config or --config; the others are listed as skipped). A partition directory whose
    policy has no compact (Kafka's default is delete) is refused unless --policy compact: a
    compacted topic keeps only the latest record per key. Text output names, per partition,
    where each setting came from (a flag, the --config file, a --topic-config section, Kafka's
    default). Per partition: the dirty range starts at the partition's
    cleaner-offset-checkpoint entry (reset to the log start offset when it is out of range) and
    ends before the active segment, open transactions, the high watermark and segments within
    --min-compaction-lag-ms; the latest record per key survives, tombstones and empty transaction
    markers get a delete horizon on their first pass and go once it has passed, aborted
    transactional data goes, empty batches stay where Kafka keeps them for producer state. New
    segments are written as .cleaned, swapped in with Kafka's protocol, and the checkpoint is
    advanced only after the swap. Memory stays within --dedupe-buffer-bytes; when the key map is
    full the pass ends early, and the next run continues. A partition is only cleaned when the
    broker would clean it (dirty ratio above min.cleanable.dirty.ratio, or a dirty segment older
    than max.compaction.lag.ms) unless --force-clean. With cleanup.policy=compact,delete,
    retention (kstore retain's rules) runs after the pass, as the broker's cleaner thread does;
    there too retention.ms and retention.bytes that only Kafka's defaults set delete nothing
    unless --kafka-defaults. The metadata log's configs apply only to a partition whose
    partition.metadata topic ID is the metadata's for its topic (else it is not handled, exit 1).

    The data dir's .lock is held throughout, so a running broker or another kstore makes this
    refuse (unless --force). A crash at any point leaves either the old or the new segments of
    the group being swapped, and the next run (or a broker's startup) finishes or rolls back;
    kstore-compact-intent.json, written in the partition directory before each swap (a broker
    ignores it), lets the next run finish the interrupted pass exactly, not clean it twice.

    \b
    Exit status: 0 done (including nothing to do), 1 a partition could not be handled
    (damaged data, locked), 2 usage, 3 a file could not be read or written (the other
    partitions are still handled; each failure is one "kstore: <partition>: ..." line).

    \b
    Example:
      kstore compact /var/lib/kafka/data/__consumer_offsets-7
      kstore compact --policy compact /srv/standby/orders-changelog-3
      kstore compact --dry-run --json --force-clean --config /etc/kafka/server.properties /var/lib/kafka/data
      kstore compact --topic-config topics.ini --delete-retention-ms 0 /srv/standby/orders-changelog-3
    """


@click.command(name="compact", help=HELP)
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--delete-retention-ms", type=int, help="delete.retention.ms: how long tombstones and empty "
              "transaction markers stay after their first cleaning [default: topic config, else 1 day].")
@click.option("--min-compaction-lag-ms", type=int, help="min.compaction.lag.ms: segments with records newer "
              "than this are not cleaned [default: 0].")
@click.option("--max-compaction-lag-ms", type=int, help="max.compaction.lag.ms: a dirty segment older than "
              "this makes the partition eligible whatever its dirty ratio.")
@click.option("--min-cleanable-dirty-ratio", type=float, help="min.cleanable.dirty.ratio [default: 0.5].")
@click.option("--segment-bytes", type=int, help="segment.bytes: the size limit when grouping segments.")
@click.option("--max-index-bytes", type=int, help="segment.index.bytes: the index size limit when grouping.")
@click.option("--policy", type=click.Choice(["compact"]), help="Compact as if cleanup.policy were compact, "
              "whatever the topic's resolved policy. Without it a partition directory whose policy has no "
              "compact (the default, delete) is refused: compacting such a topic removes records it keeps.")
@click.option("--dedupe-buffer-bytes", type=SizeType(min=24), help="Memory for the key -> offset map "
              "(log.cleaner.dedupe.buffer.size) [default: 134217728]; a pass ends early when it is full.")
@now_option
@click.option("--config", "config_file", type=ExistingPath(dir_okay=False),
              help="A broker server.properties: log.cleaner.* settings and topic defaults (log.cleanup.policy, ...).")
@click.option("--topic-config", type=ExistingPath(dir_okay=False),
              help="Per-topic overrides: INI sections named by topic or glob with topic-level keys "
                   "(cleanup.policy, delete.retention.ms, index.interval.bytes, ...); JSON also accepted.")
@click.option("--force-clean", is_flag=True, help="Clean even when the dirty ratio and lag rules say the broker "
              "would not yet.")
@click.option("--dry-run", is_flag=True, help="Report what a pass would remove (records, batches, bytes); "
              "change nothing.")
@json_option("JSON Lines: a line per partition (what the pass removed), then a summary.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success; problems still go to stderr.")
@force_option
@topics_option
@cluster_metadata_option
@kafka_defaults_option
def command(paths, delete_retention_ms: Optional[int], min_compaction_lag_ms: Optional[int],
            max_compaction_lag_ms: Optional[int], min_cleanable_dirty_ratio: Optional[float],
            segment_bytes: Optional[int], max_index_bytes: Optional[int], policy: Optional[str],
            dedupe_buffer_bytes: Optional[int],
            now: Optional[int], config_file: Optional[str], topic_config: Optional[str], force_clean: bool,
            dry_run: bool, as_json: bool, quiet: bool, force: bool, topics: Optional[str],
            no_cluster_metadata: bool, kafka_defaults: bool) -> None:
    """``kstore compact`` (its help is HELP)."""
    flags = compaction_flags(delete_retention_ms=delete_retention_ms, min_compaction_lag_ms=min_compaction_lag_ms,
                             max_compaction_lag_ms=max_compaction_lag_ms,
                             min_cleanable_dirty_ratio=min_cleanable_dirty_ratio, segment_bytes=segment_bytes,
                             max_index_bytes=max_index_bytes)
    if policy is not None:
        flags["cleanup.policy"] = ((policy,), "--policy")
    cleaner = LogCleaner(CompactRequest(
        paths, topics=topics, flags=flags, config_file=config_file, topic_config=topic_config,
        cluster_metadata=not no_cluster_metadata, kafka_defaults=kafka_defaults,
        dedupe_buffer_bytes=dedupe_buffer_bytes, now=now,
        force_clean=force_clean, dry_run=dry_run, force=force))
    run = with_progress(is_tty() and not as_json and not quiet, "compacting", cleaner.total_bytes, cleaner.run)
    # JSON Lines: a line per partition, then the summary
    emit(as_json, lambda: [*({"type": "partition", **p.to_dict()} for p in run.partitions), run.summary()],
         None if quiet else lambda: (_render_table if is_tty() else _render_text)(run))
    finish(run)
