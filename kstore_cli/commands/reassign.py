"""``kstore reassign --generate``: the kafka-reassign-partitions.sh JSON that restores replication after brokers
are lost, from the metadata log and the copies in the data dirs (read-only)."""

from __future__ import annotations

import json
from typing import List, Optional, Tuple

import click

from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, topics_option
from kstore_cli.commands._render import is_tty, size
from kstore_cli.errors import ExitStatus
from kstore_cli.operations.reassign import ReassignPlan, generate, reassignment_json


def _broker_ids(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[List[int]]:
    """--brokers 1,2,3 (ReassignPartitionsCommand.parseGenerateAssignmentArgs: no duplicates)."""
    if value is None:
        return None
    try:
        ids = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of broker ids") from None
    duplicates = sorted({b for b in ids if ids.count(b) > 1})
    if duplicates:
        raise click.BadParameter(f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}")
    if not ids:
        raise click.BadParameter("no broker id given")
    return ids


def _kafka_json(assignment: dict) -> str:
    return json.dumps(reassignment_json(assignment), separators=(",", ":"), ensure_ascii=False)


def _summary(plan: ReassignPlan) -> List[str]:
    human = is_tty()
    lines = [f"metadata: {plan.metadata_dir} up to offset {plan.metadata_end_offset}; live brokers: "
             f"{','.join(map(str, plan.live_brokers)) or 'none'}"]
    for m in plan.moves:
        if m.leader_bytes is None:
            adds = f"{_ids(m.fetch_bytes)} fetch the leader's log (its size unknown: no live replica's dirs given)"
        else:
            adds = ", ".join(f"broker {b} fetches {size(n, human)}" for b, n in m.fetch_bytes.items())
        lines.append(f"{m.topic}-{m.partition}: {m.current} -> {m.proposed}: {adds}")
    if not plan.moves and not plan.unrestorable:
        lines.append("nothing to reassign: every replica is on a live broker")
        return lines
    unknown = sum(m.leader_bytes is None for m in plan.moves)
    lines.append(f"{len(plan.moves)} partitions to reassign, {size(plan.bytes_moved, human)} to copy"
                 + (f" (and the logs of {unknown} partitions of unknown size)" if unknown else ""))
    return lines


def _ids(brokers) -> str:
    return "brokers " + ",".join(map(str, brokers)) if len(brokers) > 1 else f"broker {next(iter(brokers))}"


@click.command("reassign")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--generate", "generate_plan", is_flag=True,
              help="Propose the reassignment (the one action that needs no live cluster).")
@click.option("--brokers", callback=_broker_ids, metavar="IDS",
              help="The live brokers, comma-separated (default: those the metadata log has registered and unfenced).")
@topics_option
def command(paths: Tuple[str, ...], generate_plan: bool, brokers: Optional[List[int]], topics: Optional[str]) -> None:
    """The kafka-reassign-partitions.sh JSON that restores every partition's replication factor after brokers are lost.

    PATHS: the surviving brokers' data dirs (a broker is meta.properties' node id), at least one holding
    __cluster_metadata-0 (the newest is used). Each partition with a replica on a lost broker keeps its live
    replicas, the one holding the most bytes first (the preferred leader); each lost replica goes to a live
    broker, those already holding a copy first (fewest bytes to fetch), then unused racks, then the least loaded.
    Prints, as the tool does, "Current partition replica assignment" and "Proposed partition reassignment
    configuration", each with its JSON; the moves and bytes on stderr. A partition no live broker holds is named
    (kstore replicas, merge, salvage), exit 1.

    \b
    Example:
        kstore reassign --generate /data/broker-1 /data/broker-2 --brokers 1,2,4 | tail -1 > plan.json
        kafka-reassign-partitions.sh --bootstrap-server HOST:9092 --execute --reassignment-json-file plan.json
    """
    if not generate_plan:
        raise click.UsageError("give --generate (--execute, --verify and --cancel need a live cluster: "
                               "run kafka-reassign-partitions.sh with the plan)")
    plan = generate(paths, brokers, topics)
    current = {(m.topic, m.partition): m.current for m in plan.moves}
    proposed = {(m.topic, m.partition): m.proposed for m in plan.moves}
    click.echo(f"Current partition replica assignment\n{_kafka_json(current)}\n")
    click.echo(f"Proposed partition reassignment configuration\n{_kafka_json(proposed)}")
    for line in _summary(plan):
        click.echo(f"kstore: {line}", err=True)
    for m in plan.moves:
        if m.note:
            click.echo(f"kstore: {m.topic}-{m.partition}: {m.note}", err=True)
    for u in plan.unrestorable:
        click.echo(f"kstore: {u.topic}-{u.partition}: replicas {u.replicas}: {u.reason}", err=True)
    for p in plan.problems:
        click.echo(f"kstore: warning: {p}", err=True)
    if plan.unrestorable or plan.problems or any(m.note for m in plan.moves):
        exit_with(ExitStatus.PROBLEMS)
