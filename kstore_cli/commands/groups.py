"""``kstore groups``: committed offsets per group, topic and partition, read from ``__consumer_offsets`` (read-only)."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

import click

from kstore_cli.commands._render import is_tty
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, json_option, topics_option
from kstore_cli.commands._render import Column, cell, console, iso_time, new_table, print_lines, print_rich, print_table

from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.log.logdir import topic_matcher
from kstore_cli.cluster.group_members import Member
from kstore_cli.cluster.groups import (DEFAULT_OFFSETS_PARTITIONS, OFFSETS_TOPIC, Group, GroupsState, load_groups,
                                       reset_offsets_csv)


def _member_json(m: Member) -> dict:
    return {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "rack_id": m.rack_id, "session_timeout_ms": m.session_timeout_ms,
            "rebalance_timeout_ms": m.rebalance_timeout_ms, "subscribed_topics": m.subscribed_topics,
            "subscribed_topic_regex": m.subscribed_topic_regex, "member_epoch": m.member_epoch,
            "member_state": m.member_state, "assignment": _partitions_json(m.assignment),
            "target_assignment": _partitions_json(m.target_assignment)}


def _partitions_json(parts: Optional[List[Tuple[str, int]]]) -> Optional[List[dict]]:
    return None if parts is None else [{"topic": t, "partition": p} for t, p in parts]


def _group_json(g: Group) -> dict:
    return {
        "type": "group", "group": g.group_id, "group_type": g.kind, "protocol_type": g.protocol_type,
        "protocol": g.protocol, "leader": g.leader, "state": g.state, "generation": g.generation,
        "assignment_epoch": g.assignment_epoch, "members": len(g.members),
        "member_details": [_member_json(m) for m in g.members], "coordinator_partition": g.coordinator_partition,
        "last_commit_timestamp": g.last_commit_timestamp, "total_lag": g.total_lag,
        "lag_unknown_partitions": g.lag_unknown,
        "offsets": [{"topic": c.topic, "partition": c.partition, "offset": c.offset,
                     "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                     "commit_timestamp": c.commit_timestamp, "log_end_offset": c.log_end_offset,
                     "high_watermark": c.high_watermark, "lag": c.lag}
                    for _k, c in sorted(g.offsets.items())],
    }


def _json(state: GroupsState) -> str:
    """JSON Lines: a line per group (its members and offsets inside), then the summary."""
    lines = [json.dumps(_group_json(g), sort_keys=True) for _n, g in sorted(state.groups.items())]
    lines.append(json.dumps({
        "type": "summary", "offsets_topic_partitions": state.num_partitions,
        "loaded_partitions": state.loaded_partitions, "missing_partitions": state.missing_partitions,
        "unknown_groups": [{"group": g, "partition": p} for g, p in sorted(state.unknown_groups.items())],
        "skipped_records": [{"file": f, "offset": o, "reason": r} for f, o, r in state.skipped],
        "unresolved_topic_ids": state.unresolved_topic_ids,
        "member_problems": [{"file": f, "offset": o, "group": g, "reason": r} for f, o, g, r in state.member_problems],
    }, sort_keys=True))
    return "\n".join(lines)


_OFFSET_COLUMNS = (Column("topic"), Column("partition"), Column("offset"), Column("log_end_offset"),
                   Column("high_watermark"), Column("lag"), Column("commit_time", "time"))
#: kafka-consumer-groups.sh --describe --members --verbose: CONSUMER-ID, GROUP-INSTANCE-ID, HOST, CLIENT-ID,
#: #PARTITIONS, ASSIGNMENT.
_MEMBER_COLUMNS = (Column("consumer_id"), Column("group_instance_id"), Column("host"), Column("client_id"),
                   Column("partitions"), Column("assignment"))
#: kafka-consumer-groups.sh --describe --state, with the last commit and the total lag.
_STATE_COLUMNS = (Column("group"), Column("type"), Column("state"), Column("generation"), Column("members"),
                  Column("last_commit", "time"), Column("total_lag"))


#: Columns of names, which fold; the others (numbers, states, times) are kept whole where they fit.
_NAMES = {"topic", "group", "type", "consumer_id", "group_instance_id", "host", "client_id", "assignment"}


def _assignment(parts: Optional[List[Tuple[str, int]]]) -> Optional[str]:
    """``orders:0,2 payments:1``; None (shown ``-``) when not known."""
    if parts is None:
        return None
    by_topic: Dict[str, List[int]] = {}
    for topic, partition in parts:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items())) or "-"


def _rows(g: Group, view: str) -> List[tuple]:
    if view == "members":
        return [(m.member_id, m.group_instance_id, m.client_host, m.client_id,
                 None if m.assignment is None else len(m.assignment), _assignment(m.assignment))
                for m in g.members]
    return [(c.topic, c.partition, c.offset, c.log_end_offset, c.high_watermark, c.lag, c.commit_timestamp)
            for _k, c in sorted(g.offsets.items())]


def _title(g: Group) -> str:
    """group orders-app: classic consumer (range), generation 4, Stable, 2 members; last commit ...; total lag 12"""
    kind = g.kind + (f" {g.protocol_type}" if g.protocol_type else "") + (f" ({g.protocol})" if g.protocol else "")
    parts = [kind]
    if g.generation is not None:
        parts.append(f"{'generation' if g.kind == 'classic' else 'epoch'} {g.generation}")
    parts += [g.state, f"{len(g.members)} member{'' if len(g.members) == 1 else 's'}"]
    lag = "-" if g.total_lag is None else str(g.total_lag)
    if g.lag_unknown and g.total_lag is not None:
        lag += f" ({g.lag_unknown} of {len(g.offsets)} partitions unknown)"
    return (f"group {g.group_id}: {', '.join(parts)}; last commit {iso_time(g.last_commit_timestamp)}, "
            f"total lag {lag}; {OFFSETS_TOPIC}-{g.coordinator_partition}")


def _render_text(state: GroupsState, view: str) -> None:
    """A table per group on a terminal (cells fold to its width); in a pipe one TSV with the group first.
    `view`: offsets (default), members or state (a row per group)."""
    groups = [g for _n, g in sorted(state.groups.items())]
    if not groups:
        return
    if view == "state":
        rows = [(g.group_id, g.kind, g.state, g.generation, len(g.members), g.last_commit_timestamp, g.total_lag)
                for g in groups]
        (_tty_table if is_tty() else print_table)(None, _STATE_COLUMNS, rows)
        return
    columns = _MEMBER_COLUMNS if view == "members" else _OFFSET_COLUMNS
    if not is_tty():
        print_table(None, (Column("group"),) + columns, [(g.group_id,) + r for g in groups for r in _rows(g, view)])
        return
    for g in groups:
        if view == "members" and not g.members:
            print_lines(_title(g), f"group {g.group_id} has no members")
        else:
            _tty_table(_title(g), columns, _rows(g, view))


def _tty_table(title: Optional[str], columns: Tuple[Column, ...], rows: List[tuple]) -> None:
    """print_table's terminal table, names folding to the terminal's width: numbers and times are kept
    whole when they leave the names at least 16 characters (else they fold too)."""
    from rich.markup import escape

    table = new_table(title, columns)
    cells = [[escape(cell(v, c.unit, human=True)) for v, c in zip(row, columns)] for row in rows]
    whole = [i for i, c in enumerate(columns) if c.name not in _NAMES]
    need = sum(max([len(c.name)] + [len(r[i]) for r in cells]) + 2 for i, c in enumerate(columns) if i in whole)
    room = console().width - need - 16 * (len(columns) - len(whole))
    for i, rich_col in enumerate(table.columns):
        rich_col.no_wrap = i in whole and (room >= 0 or columns[i].unit == "time")
    for row in cells:
        table.add_row(*row)
    print_rich(table)


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
    for f, o, g, r in state.member_problems:
        out.append(f"{f}: record at offset {o}: group {g}: {r}")
    if state.unresolved_topic_ids:
        out.append("topic ids shown as ids (no partition-metadata record nor partition.metadata file names them): "
                   + ", ".join(state.unresolved_topic_ids))
    return out


@click.command("groups")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--group", "groups", multiple=True, help="Only this group (repeatable).")
@topics_option
@click.option("--topic", "exact_topics", multiple=True, hidden=True,
              help="Deprecated (use --topics): only offsets of this topic (repeatable).")
@click.option("--offsets-partitions", type=int, default=DEFAULT_OFFSETS_PARTITIONS, show_default=True,
              help=f"Partitions of {OFFSETS_TOPIC} (the cluster's offsets.topic.num.partitions).")
@click.option("--members", "members_view", is_flag=True,
              help="Text: a row per member (consumer_id, group_instance_id, host, client_id, partitions, "
                   "assignment), as kafka-consumer-groups.sh --describe --members --verbose.")
@click.option("--state", "state_view", is_flag=True,
              help="Text: a row per group (type, state, generation, members, last commit, total lag), as "
                   "kafka-consumer-groups.sh --describe --state.")
@json_option("JSON Lines: a line per group with its state, members and offsets, then a summary.")
@click.option("--format", "fmt", type=click.Choice(["table", "reset-offsets"]), default="table", show_default=True,
              help="reset-offsets: the CSV kafka-consumer-groups.sh --reset-offsets --from-file takes "
                   "(TOPIC,PARTITION,OFFSET with one --group, else GROUP,TOPIC,PARTITION,OFFSET).")
def command(paths: Tuple[str, ...], groups: Tuple[str, ...], topics: Optional[str], exact_topics: Tuple[str, ...],
            offsets_partitions: int, members_view: bool, state_view: bool, as_json: bool, fmt: str) -> None:
    """Committed offsets per group, topic and partition from the __consumer_offsets partitions in PATHS,
    as the group coordinator would load them, with log end offset, high watermark and lag; each group's
    state, members, last commit time and total lag (--members, --state: other views).

    A group's offsets live in __consumer_offsets-N with N = abs(javaStringHashCode(group)) %
    --offsets-partitions; partitions missing from PATHS are named and the exit status is 1.

    \b
    Example (restore positions on a rebuilt cluster):
        kstore groups /var/lib/kafka --group orders-app --format reset-offsets > orders-app.csv
        kafka-consumer-groups.sh --bootstrap-server HOST:9092 --group orders-app \\
          --reset-offsets --from-file orders-app.csv --execute
    """
    if members_view and state_view:
        raise UsageError("--members and --state do not go together")
    view = "members" if members_view else "state" if state_view else None
    if view and fmt == "reset-offsets":
        raise UsageError(f"--{view} and --format reset-offsets do not go together")
    wanted = topic_matcher(",".join(filter(None, (topics, *exact_topics))))
    state = load_groups(paths, num_partitions=offsets_partitions, groups=list(groups) or None,
                        topics=wanted if topics or exact_topics else None)
    if as_json:
        click.echo(_json(state))
    elif fmt == "reset-offsets":
        click.echo(reset_offsets_csv(list(state.groups.values()), single_group=len(groups) == 1), nl=False)
    else:
        _render_text(state, view or "offsets")
    warnings = _warnings(state)
    for w in warnings:
        click.echo(f"kstore: warning: {w}", err=True)
    incomplete = bool(not state.loaded_partitions or state.unknown_groups or state.skipped or state.member_problems
                      or (groups and len(state.groups) < len(groups)))
    if incomplete or state.missing_partitions:
        exit_with(ExitStatus.PROBLEMS)
