"""``kstore compact``: one pass of Kafka's log cleaner per partition, offline and crash-safe."""

from __future__ import annotations

import json
import os
from typing import List, Optional

import click

from kstore_cli.commands._options import (
    json_option,
    SizeType,
    cluster_metadata_option,
    force_option,
    no_partitions,
    now_option,
    topics_option,
)

from kstore_cli.commands._console import byte_progress, exit_with_problems, human_bytes, is_tty
from kstore_cli.errors import ExitStatus, KstoreError, UsageError
from kstore_cli.segment import fileops
from kstore_cli.segment.cleaner import PassResult, compact_partition
from kstore_cli.segment.config import DEFAULT_SOURCE, CleanerSettings, ConfigResolver, TopicConfig, compaction_flags
from kstore_cli.segment.logdir import Partition, group_by_data_dir, partitions_of, resolve
from kstore_cli.segment.retention import DataDirState, apply_retention, now_ms, plan_partition

METADATA_LOG_TOPIC = "__cluster_metadata"


def _row(result: PassResult, policy: str, dry_run: bool, retention: Optional[dict]) -> dict:
    row = result.to_dict()
    row["policy"] = policy
    row["dryRun"] = dry_run
    row["retention"] = retention
    return row


def _status(row: dict, dry_run: bool) -> str:
    if row.get("problem"):
        return f"not handled: {row['problem']}"
    if row.get("skipped"):
        return f"skipped: {row['skipped']}"
    if not row["cleaned"]:
        why = row.get("reason") or "; ".join(row["notes"]) or "nothing to clean"
        return f"not cleaned ({why})"
    s = row["stats"]
    verb = "would remove" if dry_run else "removed"
    return (f"{'would clean' if dry_run else 'cleaned'} [{row['firstDirtyOffset']}, {row['endOffset']}): {verb} "
            f"{row['recordsRemoved']} record(s) ({s['tombstonesRemoved']} tombstones, {s['markersRemoved']} markers), "
            f"{row['bytesBefore']} -> {row['bytesAfter']} bytes, dirty ratio {row['dirtyRatio']:.3f}")


#: The topic-level settings a pass depends on, printed with where each came from.
SETTINGS = ("cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
            "min.cleanable.dirty.ratio", "segment.bytes", "segment.index.bytes")


def settings_of(config: TopicConfig, cleaner: CleanerSettings) -> dict:
    """{setting: {"value", "source"}}: the topic's cleaning settings and the dedupe buffer."""
    out = {k: {"value": config.to_dict([k])[k], "source": config.source(k)} for k in SETTINGS}
    out["log.cleaner.dedupe.buffer.size"] = {
        "value": cleaner.dedupe_buffer_bytes,
        "source": cleaner.sources.get("log.cleaner.dedupe.buffer.size", DEFAULT_SOURCE)}
    return out


def settings_line(settings: dict) -> str:
    return "  settings: " + ", ".join(f"{k}={v['value']} ({v['source']})" for k, v in settings.items())


def _render_text(rows: List[dict], dry_run: bool) -> None:
    for row in rows:
        click.echo(f"{row['partition']}: {_status(row, dry_run)}")
        if row.get("settings"):
            click.echo(settings_line(row["settings"]))
        for note in row.get("notes", []):
            click.echo(f"  note: {note}")
        retention = row.get("retention")
        if retention and retention.get("segmentsDeleted"):
            click.echo(f"  retention: {'would delete' if dry_run else 'deleted'} {retention['segmentsDeleted']} "
                       f"segment(s)")


def _render_table(rows: List[dict], dry_run: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kstore compact" + (" (dry run: nothing changed)" if dry_run else ""), title_justify="left")
    for col in ("partition", "dirty range", "ratio", "records removed", "tombstones", "markers", "bytes before",
                "bytes after", "note"):
        table.add_column(col, overflow="fold")
    for row in rows:
        name = os.path.basename(row["partition"])
        if row.get("problem") or row.get("skipped") or not row["cleaned"]:
            note = row.get("problem") or row.get("skipped") or row.get("reason") or "; ".join(row.get("notes", []))
            ratio = f"{row['dirtyRatio']:.3f}" if "dirtyRatio" in row else "-"
            table.add_row(name, "-", ratio, "-", "-", "-", "-", "-", note)
            continue
        s = row["stats"]
        table.add_row(name, f"[{row['firstDirtyOffset']}, {row['endOffset']})", f"{row['dirtyRatio']:.3f}",
                      str(row["recordsRemoved"]), str(s["tombstonesRemoved"]), str(s["markersRemoved"]),
                      human_bytes(row["bytesBefore"]), human_bytes(row["bytesAfter"]), "; ".join(row["notes"]))
    Console().print(table)
    for row in rows:
        if row.get("settings"):
            click.echo(f"{os.path.basename(row['partition'])}:")
            click.echo(settings_line(row["settings"]))


def _skip_row(partition: Partition, why: str, policy: str, dry_run: bool, problem: bool = False) -> dict:
    return {"partition": partition.path, "topic": partition.topic, "partitionId": partition.partition,
            "cleaned": False, "policy": policy, "dryRun": dry_run, "notes": [],
            ("problem" if problem else "skipped"): why}


@click.command(name="compact")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
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
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="A broker server.properties: log.cleaner.* settings and topic defaults (log.cleanup.policy, ...).")
@click.option("--topic-config", type=click.Path(dir_okay=False),
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
@click.pass_context
def command(ctx: click.Context, paths, delete_retention_ms: Optional[int], min_compaction_lag_ms: Optional[int],
            max_compaction_lag_ms: Optional[int], min_cleanable_dirty_ratio: Optional[float],
            segment_bytes: Optional[int], max_index_bytes: Optional[int], policy: Optional[str],
            dedupe_buffer_bytes: Optional[int],
            now: Optional[int], config_file: Optional[str], topic_config: Optional[str], force_clean: bool,
            dry_run: bool, as_json: bool, quiet: bool, force: bool, topics: Optional[str],
            no_cluster_metadata: bool) -> None:
    """Compact partitions exactly as Kafka's log cleaner does: one cleaner pass per partition.

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
    retention (kstore retain's rules) runs after the pass, as the broker's cleaner thread does.

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
    flags = compaction_flags(delete_retention_ms=delete_retention_ms, min_compaction_lag_ms=min_compaction_lag_ms,
                             max_compaction_lag_ms=max_compaction_lag_ms,
                             min_cleanable_dirty_ratio=min_cleanable_dirty_ratio, segment_bytes=segment_bytes,
                             max_index_bytes=max_index_bytes)
    if policy is not None:
        flags["cleanup.policy"] = ((policy,), "--policy")
    settings = CleanerSettings.from_files(config_file, dedupe_buffer_bytes=dedupe_buffer_bytes)
    explicit = set()
    for raw in paths:
        path = os.path.abspath(raw)
        if os.path.isfile(path):
            raise UsageError("compact works on whole partitions: give a partition or data directory, not a file",
                             path=raw)
    targets = resolve(paths, topics)
    for raw in paths:
        explicit.add(os.path.abspath(raw))
    if not targets:
        raise UsageError(no_partitions(paths, topics))
    resolver = ConfigResolver.from_files(config_file, topic_config, flags, data_dirs=list(group_by_data_dir(targets)),
                                         cluster_metadata=not no_cluster_metadata)
    for target in targets:
        # A partition named on the command line is compacted whatever a data dir scan would skip,
        # but never on Kafka's default (delete) or another non-compact policy without --policy:
        # compaction keeps only the latest record per key, irreversibly.
        part = target.partition
        config = resolver.for_topic(part.topic, part.data_dir)
        if (part.path in explicit and not config.compact and part.topic != METADATA_LOG_TOPIC
                and part.partition >= 0):
            raise UsageError(
                f"cleanup.policy={','.join(config.cleanup_policy)} ({config.source('cleanup.policy')}): compacting "
                "would keep only the latest record per key of a topic that keeps every record; give --policy "
                "compact to compact it anyway, or set cleanup.policy in --topic-config or --config",
                path=part.path)
    now = now_ms() if now is None else now
    groups = group_by_data_dir(targets)
    rows: List[dict] = []
    tty = is_tty() and not as_json and not quiet
    progress_cm, advance = byte_progress(tty, "compacting",
                                         lambda: sum(s.log_size for t in targets for s in t.partition.segments))
    worst = ExitStatus.PROBLEMS  # raised to the worst status of an error that stopped a partition
    try:
        with fileops.lock_data_dirs({d: [t.partition.path for t in ts] for d, ts in groups.items()},
                                    force=force, enabled=not dry_run):
            for data_dir in sorted(groups):
                state = DataDirState(data_dir)
                in_use = dry_run and not force and fileops.is_locked(data_dir)
                for partition in partitions_of(groups[data_dir]):
                    config = resolver.for_topic(partition.topic, data_dir)
                    policy = ",".join(config.cleanup_policy)
                    if partition.topic == METADATA_LOG_TOPIC:
                        rows.append(_skip_row(partition, "the KRaft metadata log is not compacted by the log cleaner",
                                              policy, dry_run))
                        continue
                    if partition.partition < 0:
                        rows.append(_skip_row(partition, "not a <topic>-<partition> directory", policy, dry_run,
                                              problem=True))
                        continue
                    if not config.compact and partition.path not in explicit:
                        rows.append(_skip_row(partition, f"cleanup.policy={policy} ({config.source('cleanup.policy')})",
                                              policy, dry_run))
                        continue
                    try:
                        result = compact_partition(partition, config, state, now=now, settings=settings,
                                                   force_clean=force_clean, dry_run=dry_run, progress=advance)
                    except UsageError:
                        raise
                    except KstoreError as exc:
                        rows.append(_skip_row(partition, str(exc), policy, dry_run, problem=True))
                        worst = max(worst, exc.exit_status)
                        continue
                    if in_use:
                        result.notes.append("the data dir is locked by a running process: a real run would refuse")
                    retention = None
                    if config.compact and not dry_run:
                        # The cleaner thread's deleteOldSegments after cleaning (compact,delete: all rules;
                        # compact: the log start offset rule only).
                        rplan = plan_partition(Partition(partition.path), config, state, now=now)
                        if rplan.active and (rplan.deletions or rplan.checkpoint_offset is not None):
                            apply_retention(state, [rplan])
                            retention = {"segmentsDeleted": len(rplan.deletions),
                                         "logStartOffset": rplan.new_log_start_offset}
                    row = _row(result, policy, dry_run, retention)
                    row["settings"] = settings_of(config, settings)
                    rows.append(row)
    finally:
        if progress_cm is not None:
            progress_cm.stop()
    problems = [r for r in rows if r.get("problem")]
    if as_json:
        cleaned = [r for r in rows if r.get("cleaned")]
        for row in rows:  # JSON Lines: a line per partition, then the summary
            click.echo(json.dumps({"type": "partition", **row}, sort_keys=True))
        click.echo(json.dumps({
            "type": "summary",
            "dryRun": dry_run,
            "now": now,
            "partitions": len(rows),
            "partitionsCleaned": len(cleaned),
            "recordsRemoved": sum(r["recordsRemoved"] for r in cleaned),
            "bytesBefore": sum(r["bytesBefore"] for r in cleaned),
            "bytesAfter": sum(r["bytesAfter"] for r in cleaned),
            "problems": len(problems),
        }, sort_keys=True))
    elif not quiet:
        if tty:
            _render_table(rows, dry_run)
        else:
            _render_text(rows, dry_run)
    if problems:
        exit_with_problems(ctx, problems, worst)
