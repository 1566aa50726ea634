"""``kstore log-dirs``: what ``kafka-log-dirs.sh --describe`` reports, from the data dirs (read-only)."""

from __future__ import annotations

import json
from typing import Optional, Tuple

import click

from kstore_cli.commands._options import ExistingPath, topics_option
from kstore_cli.commands._render import Column, is_tty, print_table
from kstore_cli.operations.log_dirs import LogDirsReport, describe_log_dirs, kafka_json, topic_totals

_DIR_COLUMNS = (Column("broker"), Column("log_dir"), Column("partitions"), Column("future"),
                Column("size", "bytes"), Column("total_bytes", "bytes"), Column("usable_bytes", "bytes"))
_TOPIC_COLUMNS = (Column("topic"), Column("partitions"), Column("replicas"), Column("future"),
                  Column("size", "bytes"), Column("offset_lag"))


def _render_text(report: LogDirsReport) -> None:
    """A table of the data dirs, then one of the topics (TSV blocks in a pipe, a blank line between)."""
    tty = is_tty()
    dirs = [(b.broker, d.log_dir, sum(not r.is_future for r in d.replicas), sum(r.is_future for r in d.replicas),
             d.size, d.total_bytes, d.usable_bytes) for b in report.brokers for d in b.log_dirs]
    print_table("log dirs", _DIR_COLUMNS, dirs, tty=tty)
    topics = [(t.topic, t.partitions, t.replicas, t.future, t.size, t.offset_lag) for t in topic_totals(report)]
    if not tty:
        click.echo("")
    print_table("topics", _TOPIC_COLUMNS, topics, tty=tty)


@click.command("log-dirs")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@topics_option
@click.option("--json", "as_json", is_flag=True,
              help="The JSON kafka-log-dirs.sh --describe prints (Kafka's field names, one line).")
def command(paths: Tuple[str, ...], topics: Optional[str], as_json: bool) -> None:
    """Per broker and data dir, each partition's size and offset lag, as kafka-log-dirs.sh --describe reports them.

    PATHS are data dirs (one broker's, or a folder of several brokers'; the broker is meta.properties' node id).
    Sizes are UnifiedLog.size (the segments' .log files); the offset lag is ReplicaManager's: 0 for a current
    log (its high watermark never passes its log end), the current log's end offset minus a -future log's for a
    replica being moved between dirs. The text shows per dir the volume's total and usable bytes (KIP-827) and
    per topic the totals.

    \b
    Example:
        kstore log-dirs /var/lib/kafka --topics 'orders*'
        kstore log-dirs --json /data/broker-*/kafka-logs | jq '.brokers[].logDirs[].partitions[]'
    """
    report = describe_log_dirs(paths, topics)
    if as_json:
        click.echo(json.dumps(kafka_json(report), separators=(",", ":"), ensure_ascii=False))
    else:
        _render_text(report)
    for w in report.warnings:
        click.echo(f"kstore: warning: {w}", err=True)
