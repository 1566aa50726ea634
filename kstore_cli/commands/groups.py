"""``kstore groups``: committed offsets per group, topic and partition, read from ``__consumer_offsets`` (read-only)."""

from __future__ import annotations

import json
from typing import Optional, Tuple

import click

from kstore_cli.commands._render import is_tty
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, json_option, topics_option
from kstore_cli.commands._render import Column, print_table

from kstore_cli.errors import ExitStatus
from kstore_cli.log.logdir import topic_matcher
from kstore_cli.cluster.groups import DEFAULT_OFFSETS_PARTITIONS, OFFSETS_TOPIC, GroupsState, load_groups, reset_offsets_csv


def _json(state: GroupsState) -> str:
    """JSON Lines: a line per group (its offsets inside), then the summary."""
    lines = [json.dumps({
        "type": "group", "group": g.group_id, "group_type": g.kind, "protocol_type": g.protocol_type,
        "generation": g.generation, "members": g.members, "coordinator_partition": g.coordinator_partition,
        "offsets": [{"topic": c.topic, "partition": c.partition, "offset": c.offset,
                     "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                     "commit_timestamp": c.commit_timestamp, "log_end_offset": c.log_end_offset,
                     "high_watermark": c.high_watermark, "lag": c.lag}
                    for _k, c in sorted(g.offsets.items())],
    }, sort_keys=True) for _n, g in sorted(state.groups.items())]
    lines.append(json.dumps({
        "type": "summary", "offsets_topic_partitions": state.num_partitions,
        "loaded_partitions": state.loaded_partitions, "missing_partitions": state.missing_partitions,
        "unknown_groups": [{"group": g, "partition": p} for g, p in sorted(state.unknown_groups.items())],
        "skipped_records": [{"file": f, "offset": o, "reason": r} for f, o, r in state.skipped],
    }, sort_keys=True))
    return "\n".join(lines)


_COLUMNS = (Column("topic"), Column("partition"), Column("offset"), Column("log_end_offset"),
            Column("high_watermark"), Column("lag"))


def _render_text(state: GroupsState) -> None:
    """A table per group on a terminal (topic names fold to its width); in a pipe one TSV with the group first."""
    groups = [g for _n, g in sorted(state.groups.items())]
    rows = {g.group_id: [(c.topic, c.partition, c.offset, c.log_end_offset, c.high_watermark, c.lag)
                         for _k, c in sorted(g.offsets.items())] for g in groups}
    if not groups:
        return
    if not is_tty():
        print_table(None, (Column("group"),) + _COLUMNS, [(g.group_id,) + r for g in groups for r in rows[g.group_id]])
        return
    for g in groups:
        extra = f" generation {g.generation}" if g.generation is not None else ""
        members = f", {g.members} members" if g.kind == "classic" else ""
        title = f"group {g.group_id} ({g.kind}{extra}{members}; {OFFSETS_TOPIC}-{g.coordinator_partition})"
        print_table(title, _COLUMNS, rows[g.group_id], tty=True)


def _warnings(state: GroupsState) -> list:
    out = []
    if not state.loaded_partitions:
        out.append(f"no {OFFSETS_TOPIC} partition found in the given paths")
    elif state.missing_partitions:
        missing = ", ".join(str(n) for n in state.missing_partitions)
        out.append(f"{OFFSETS_TOPIC} partitions missing from the given paths (of {state.num_partitions}): "
                   f"{missing}; groups they coordinate are not shown (a group lives in partition "
                   f"abs(javaStringHashCode(group)) % {state.num_partitions}, as Kafka's GroupCoordinator.partitionFor)")
    for g, p in sorted(state.unknown_groups.items()):
        out.append(f"group {g}: unknown, its offsets live in {OFFSETS_TOPIC}-{p}, which is not in the given paths")
    for f, o, r in state.skipped:
        out.append(f"{f}: record at offset {o} not loaded: {r}")
    return out


@click.command("groups")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--group", "groups", multiple=True, help="Only this group (repeatable).")
@topics_option
@click.option("--topic", "exact_topics", multiple=True, hidden=True,
              help="Deprecated (use --topics): only offsets of this topic (repeatable).")
@click.option("--offsets-partitions", type=int, default=DEFAULT_OFFSETS_PARTITIONS, show_default=True,
              help=f"Partitions of {OFFSETS_TOPIC} (the cluster's offsets.topic.num.partitions).")
@json_option("JSON Lines: a line per group with its offsets, then a summary.")
@click.option("--format", "fmt", type=click.Choice(["table", "reset-offsets"]), default="table", show_default=True,
              help="reset-offsets: the CSV kafka-consumer-groups.sh --reset-offsets --from-file takes "
                   "(TOPIC,PARTITION,OFFSET with one --group, else GROUP,TOPIC,PARTITION,OFFSET).")
def command(paths: Tuple[str, ...], groups: Tuple[str, ...], topics: Optional[str], exact_topics: Tuple[str, ...],
            offsets_partitions: int, as_json: bool, fmt: str) -> None:
    """Committed offsets per group, topic and partition from the __consumer_offsets partitions in PATHS,
    as the group coordinator would load them, with log end offset, high watermark and lag.

    A group's offsets live in __consumer_offsets-N with N = abs(javaStringHashCode(group)) %
    --offsets-partitions; partitions missing from PATHS are named and the exit status is 1.

    \b
    Example (restore positions on a rebuilt cluster):
        kstore groups /var/lib/kafka --group orders-app --format reset-offsets > orders-app.csv
        kafka-consumer-groups.sh --bootstrap-server HOST:9092 --group orders-app \\
          --reset-offsets --from-file orders-app.csv --execute
    """
    wanted = topic_matcher(",".join(filter(None, (topics, *exact_topics))))
    state = load_groups(paths, num_partitions=offsets_partitions, groups=list(groups) or None,
                        topics=wanted if topics or exact_topics else None)
    if as_json:
        click.echo(_json(state))
    elif fmt == "reset-offsets":
        click.echo(reset_offsets_csv(list(state.groups.values()), single_group=len(groups) == 1), nl=False)
    else:
        _render_text(state)
    warnings = _warnings(state)
    for w in warnings:
        click.echo(f"kstore: warning: {w}", err=True)
    incomplete = bool(not state.loaded_partitions or state.unknown_groups or state.skipped
                      or (groups and len(state.groups) < len(groups)))
    if incomplete or state.missing_partitions:
        exit_with(ExitStatus.PROBLEMS)
