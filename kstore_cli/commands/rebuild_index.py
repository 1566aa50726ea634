"""``kstore rebuild-index``: regenerate .index/.timeindex/.txnindex the way Kafka's recovery does."""

from __future__ import annotations

import json
import os
from typing import List, Optional

import click

from kstore_cli.commands._options import (
    SIZE,
    cluster_metadata_option,
    dry_run_option,
    force_option,
    json_option,
    no_partitions,
    topics_option,
)

from kstore_cli.commands._console import is_tty as _is_tty
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.segment import fileops
from kstore_cli.segment.config import ConfigResolver
from kstore_cli.segment.logdir import group_by_data_dir, resolve
from kstore_cli.segment.quarantine import default_quarantine_root
from kstore_cli.segment.recovery import ZERO_TAIL, ApplyReport, PartitionPlan, apply_plan
from kstore_cli.segment.verify import repair_plan


def _segment_rows(plan: PartitionPlan, applied: Optional[ApplyReport], truncate: bool, dry_run: bool) -> List[dict]:
    rows = []
    for splan in plan.segments:
        seg = splan.segment
        row = {
            "type": "segment",
            "partition": plan.partition.path,
            "segment": seg.base_offset,
            "log": seg.log,
            "status": splan.status,
            "files": {os.path.basename(c.path).split(".", 1)[1]: c.action for c in splan.changes},
        }
        reasons = {os.path.basename(c.path).split(".", 1)[1]: c.reason for c in splan.changed_files if c.reason}
        if reasons:
            row["reasons"] = reasons
        if splan.error is not None:
            row["message"] = str(splan.error)
        if splan.skipped is not None:
            row["message"] = splan.skipped
        result = splan.result
        if result is not None:
            row.update(logSize=result.log_size, validBytes=result.valid_bytes, nextOffset=result.next_offset,
                       abortedTransactions=len(result.aborted))
            if result.problem is not None:
                row["problem"] = result.problem.to_dict()
                row["truncatedBytes"] = result.truncated_bytes
                if not result.problem.truncatable:
                    row["message"] = "Kafka's recovery does not cut this (it raises); kstore leaves it alone"
                elif truncate and not dry_run and splan is plan.damaged:
                    row["status"] = "truncated"
                elif dry_run and truncate:
                    row["message"] = f"would cut {result.truncated_bytes} bytes at byte {result.valid_bytes}"
                else:
                    row["message"] = (f"valid data ends at byte {result.valid_bytes}; rerun with --truncate to cut "
                                      f"{result.truncated_bytes} bytes as Kafka's recovery would")
        if dry_run and row["status"] == "rebuilt":
            row["status"] = "would rebuild"
        rows.append(row)
    if plan.dropped_files:
        rows.append({
            "type": "dropped",
            "partition": plan.partition.path,
            "files": plan.dropped_files,
            "status": "quarantined" if (applied and applied.quarantined) else "would be dropped",
            "message": "files after the cut: Kafka's recovery deletes them; kstore moves them to the quarantine dir",
        })
    if applied is not None and applied.quarantine_dir:
        rows.append({"type": "quarantine", "partition": plan.partition.path, "dir": applied.quarantine_dir,
                     "moved": [{"from": a, "to": b} for a, b in applied.quarantined]})
    return rows


def _render_text(rows: List[dict], tty: bool) -> None:
    if tty:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        by_partition: dict = {}
        for row in rows:
            by_partition.setdefault(row["partition"], []).append(row)
        for partition, prows in by_partition.items():
            table = Table(title=partition, title_justify="left")
            for col in ("segment", "status", "files", "detail"):
                table.add_column(col)
            for row in prows:
                if row["type"] == "segment":
                    files = " ".join(f"{k}:{v}" for k, v in row["files"].items()
                                     if v not in ("unchanged", "kept")) or "-"
                    if row.get("reasons"):
                        detail_reasons = "; ".join(f"{k}: {r}" for k, r in row["reasons"].items())
                    else:
                        detail_reasons = ""
                    detail = row.get("message", "") or detail_reasons
                    if "problem" in row:
                        detail = row["problem"]["message"] + ("; " + detail if detail else "")
                    style = {"damaged": "red", "zero-tail": "yellow", "truncated": "yellow", "rebuilt": "green"}.get(
                        row["status"], "")
                    table.add_row(str(row["segment"]), f"[{style}]{row['status']}[/]" if style else row["status"],
                                  files, detail)
                elif row["type"] == "dropped":
                    table.add_row("later", row["status"], f"{len(row['files'])} files", row["message"])
                else:
                    table.add_row("", "quarantine", "", row["dir"])
            console.print(table)
        return
    healthy: dict = {}
    for row in rows:
        if row["type"] == "segment" and row["status"] == "unchanged" and not row.get("message"):
            healthy[row["partition"]] = healthy.get(row["partition"], 0) + 1
            continue
        if row["type"] == "segment":
            reasons = row.get("reasons", {})
            files = ", ".join(f"{k} {v}" + (f": {reasons[k]}" if k in reasons else "")
                              for k, v in row["files"].items() if v not in ("unchanged", "kept"))
            line = f"{row['log']}: {row['status']}"
            if files:
                line += f" ({files})"
            if "problem" in row:
                line += f": {row['problem']['kind']} at byte {row['problem']['position']}: {row['problem']['message']}"
            if row.get("message"):
                line += f"; {row['message']}"
            click.echo(line)
        elif row["type"] == "dropped":
            click.echo(f"{row['partition']}: {len(row['files'])} later files {row['status']}: " + ", ".join(
                os.path.basename(f) for f in row["files"]))
        else:
            click.echo(f"{row['partition']}: quarantined into {row['dir']}")
    for partition, count in healthy.items():
        click.echo(f"{partition}: {count} segment(s) with nothing to rebuild")


@click.command(name="rebuild-index")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--index-interval-bytes", type=SIZE,
              help="index.interval.bytes for every partition [default: from --topic-config, --config, else 4096].")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="A broker server.properties (log.index.interval.bytes).")
@click.option("--topic-config", type=click.Path(dir_okay=False),
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
@click.pass_context
def command(ctx: click.Context, paths, index_interval_bytes: Optional[int], config_file: Optional[str],
            topic_config: Optional[str], all_indexes: bool, truncate: bool, quarantine_dir: Optional[str],
            dry_run: bool, force: bool, topics: Optional[str], no_cluster_metadata: bool, as_json: bool) -> None:
    """Regenerate the wrong or missing .index, .timeindex and .txnindex files as Kafka's recovery writes them.

    PATH is a .log file, a partition directory or a data directory (every partition in it;
    -delete/-future/-stray directories are skipped). Only the index files that verify-index calls
    wrong (Kafka's sanity check rejects them or its lookups through them answer wrongly) and the
    missing ones are rebuilt, each named with its reason; indexes another writer laid out
    differently (a leader of any Kafka version, a follower, the cleaner) are kept. --all rewrites
    every index that differs from recovery's. Files are replaced atomically. The data dir's .lock is
    taken first, so a running broker makes this refuse (unless --force). index.interval.bytes comes
    from the flag, else --topic-config, else the cluster metadata log in the data dirs, else
    --config (log.index.interval.bytes), else 4096.

    A segment whose tail is damaged (partial batch, CRC mismatch, size field < 14, invalid
    marker) or zero-filled (preallocated) is reported and nothing in its partition changes
    (exit 1). With --truncate the .log is cut where Kafka's recovery cuts it; the cut bytes go
    to <quarantine dir>/<partition>/<UTC time>/<segment>.log.tail (a zero-filled tail is just
    dropped), later segments and snapshots past the new end (which Kafka deletes) are moved
    there too, with a kstore-quarantine.json describing it all.

    \b
    Exit status: 0 done (or nothing to do), 1 damage left in place, 2 usage, 3 unreadable.

    \b
    Example:
      kstore rebuild-index --index-interval-bytes 4096 /var/lib/kafka/data/orders-0
      kstore rebuild-index --dry-run --all --config /etc/kafka/server.properties /var/lib/kafka/data
      kstore rebuild-index --dry-run /var/lib/kafka/data
      kstore rebuild-index --truncate --quarantine-dir /srv/quarantine /var/lib/kafka/data/orders-0
    """
    targets = resolve(paths, topics)
    if not targets:
        raise UsageError(no_partitions(paths, topics))
    tty = _is_tty() and not as_json
    flags = {} if index_interval_bytes is None else {"index.interval.bytes": (index_interval_bytes, "--index-interval-bytes")}
    groups = group_by_data_dir(targets)
    resolver = ConfigResolver.from_files(config_file, topic_config, flags, data_dirs=list(groups),
                                         cluster_metadata=not no_cluster_metadata)
    problems = False
    with fileops.lock_data_dirs({d: [t.partition.path for t in ts] for d, ts in groups.items()},
                                force=force, enabled=not dry_run):
        for data_dir, dir_targets in groups.items():
            for target in dir_targets:
                interval = resolver.for_topic(target.partition.topic, data_dir).get("index.interval.bytes")
                plan = repair_plan(target.partition, only=target.only, index_interval_bytes=interval,
                                   all_indexes=all_indexes)
                damaged = plan.damaged
                unfixable = any(s.error is not None or (s.result is not None and s.result.problem is not None
                                                        and not s.result.problem.truncatable) for s in plan.segments)
                applied = None
                if damaged is not None and not truncate:
                    problems = True
                elif not dry_run:
                    if damaged is not None and quarantine_dir is None:
                        root = default_quarantine_root(target.partition)
                    else:
                        root = quarantine_dir
                    applied = apply_plan(plan, truncate=truncate, quarantine_root=root)
                elif damaged is not None:
                    problems = True
                if unfixable:
                    problems = True
                rows = _segment_rows(plan, applied, truncate, dry_run)
                if damaged is not None and damaged.result.problem.kind == ZERO_TAIL and not truncate:
                    for row in rows:
                        if row.get("segment") == damaged.segment.base_offset:
                            row["message"] = ("zero-filled preallocated tail (not corruption); rerun with --truncate "
                                              "to trim it as Kafka's recovery does")
                if as_json:
                    for row in rows:
                        click.echo(json.dumps(row, sort_keys=True))
                else:
                    _render_text(rows, tty)
    if problems:
        ctx.exit(int(ExitStatus.PROBLEMS))
