"""``kstore metadata``: the cluster as the KRaft metadata log describes it (topics, brokers, configs...)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import shlex
from typing import Any, Callable, Dict, List, Optional, Tuple

import click

from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.commands._options import ExistingPath, topics_option
from kstore_cli.cluster.metadata_image import MetadataImage, RESERVED_DIRECTORY_IDS, directory_label, image_json
from kstore_cli.cluster.metadata_loader import LoadResult, find_metadata, load_image
from kstore_cli.log.logdir import topic_matcher

#: topics Kafka creates itself: a recreate script leaves them commented out
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")
BOOTSTRAP_PLACEHOLDER = '"${BOOTSTRAP_SERVER:?set BOOTSTRAP_SERVER}"'


def parse_as_of(text: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
    """``--as-of``: an end offset (digits) or a time (ISO 8601, UTC unless it says otherwise) -> (offset, ms)."""
    if text is None:
        return None, None
    if text.isdigit():
        return int(text), None
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--as-of: expected an offset or an ISO 8601 time, found {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return None, int(when.timestamp() * 1000)


def _ids(values: List[int]) -> str:
    return ",".join(str(v) for v in values) or "-"


def only_topics(img: MetadataImage, wanted: Callable[[str], bool]) -> MetadataImage:
    """The image with only the topics ``wanted`` takes (their partitions and TOPIC configs along); the rest as is.
    ACLs on topic resources are kept: a PREFIXED or wildcard pattern is not a topic name to match."""
    topics = {tid: t for tid, t in img.topics.by_id.items() if wanted(t["name"])}
    keep = {t["name"] for t in topics.values()}
    configs = {k: v for k, v in img.configs.resource_data.items() if k[0] != "TOPIC" or k[1] in keep}
    set_at = {k: v for k, v in img.configs.set_at.items() if k[0] != "TOPIC" or k[1] in keep}
    return dataclasses.replace(img, topics=dataclasses.replace(img.topics, by_id=topics),
                               configs=dataclasses.replace(img.configs, resource_data=configs, set_at=set_at))


def render_text(result: LoadResult) -> None:
    img, src = result.image, result.source
    cluster_id = src["meta_properties"].get("cluster.id")
    click.echo(f"cluster id: {cluster_id or 'unknown (no meta.properties next to the metadata log)'}")
    click.echo(f"as of end offset {src['end_offset']}" + (f" (snapshot {src['snapshot']}, then "
               f"{src['log_records']} log record(s))" if src["snapshot"] else f" ({src['log_records']} log record(s))"))
    feats = ", ".join(f"{k}={v}" for k, v in sorted(img.features.finalized_versions.items()))
    click.echo(f"metadata.version: {img.features.metadata_version} (level {img.features.metadata_version_level})"
               + (f"; features: {feats}" if feats else ""))
    click.echo("")
    click.echo(f"brokers ({len(img.cluster.brokers)}):")
    for b in sorted(img.cluster.brokers.values(), key=lambda b: b["id"]):
        state = "fenced" if b["fenced"] else "active"
        if b["in_controlled_shutdown"]:
            state += ", in controlled shutdown"
        eps = " ".join(f"{e['listener']}://{e['host']}:{e['port']}" for e in b["endpoints"])
        click.echo(f"  {b['id']}  epoch {b['epoch']}  {state}  rack {b['rack'] or '-'}  {eps}  "
                   f"log dirs {','.join(b['log_dirs']) or '-'}")
    click.echo(f"controllers ({len(img.cluster.controllers)}):")
    for c in sorted(img.cluster.controllers.values(), key=lambda c: c["id"]):
        eps = " ".join(f"{e['listener']}://{e['host']}:{e['port']}" for e in c["endpoints"])
        click.echo(f"  {c['id']}  {eps}")
    click.echo(f"topics ({len(img.topics.by_id)}):")
    for t in sorted(img.topics.by_id.values(), key=lambda t: t["name"]):
        click.echo(f"  {t['name']}  id {t['id']}  {len(t['partitions'])} partition(s)")
        for n, p in sorted(t["partitions"].items()):
            extra = ""
            if p["elr"] or p["lastKnownElr"]:
                extra += f"  elr {_ids(p['elr'])}  last known elr {_ids(p['lastKnownElr'])}"
            if p["leaderRecoveryState"] != "RECOVERED":
                extra += f"  {p['leaderRecoveryState']}"
            click.echo(f"    {n}: leader {p['leader']} (epoch {p['leaderEpoch']})  replicas {_ids(p['replicas'])}"
                       f"  isr {_ids(p['isr'])}  dirs {','.join(map(directory_label, p['directories']))}{extra}")
    click.echo(f"configs ({len(img.configs.resource_data)}):")
    for (rtype, name), data in sorted(img.configs.resource_data.items()):
        label = f"{rtype.lower()} {name}" if name else f"{rtype.lower()} (cluster default)"
        for k, v in sorted(data.items()):
            click.echo(f"  {label}: {k}={v}")
    click.echo(f"next producer id: {img.producer_ids.next_producer_id}")
    click.echo(f"acls ({len(img.acls.acls)}):")
    for a in sorted(img.acls.acls.values(), key=lambda a: a["id"]):
        click.echo(f"  {a['permission_type']} {a['principal']} {a['operation']} on {a['resource_type']} "
                   f"{a['pattern_type']} {a['resource_name']} from {a['host']}")
    click.echo(f"client quotas ({len(img.client_quotas.entities)}):")
    for entity, quotas in sorted(img.client_quotas.entities.items(), key=lambda e: str(e[0])):
        who = ",".join(f"{k}={v if v is not None else '(default)'}" for k, v in entity)
        click.echo(f"  {who}: " + ", ".join(f"{k}={v}" for k, v in sorted(quotas.items())))
    users = sorted((m, u) for m, us in img.scram.mechanisms.items() for u in us)
    click.echo(f"scram users ({len(users)}): " + ", ".join(f"{u} ({m})" for m, u in users))
    click.echo(f"delegation tokens ({len(img.delegation_tokens.tokens)}): "
               + ", ".join(f"{t} (owner {o})" for t, o in sorted(img.delegation_tokens.tokens.items())))


def _topic_config_ok(value: str) -> bool:
    # TopicCommand splits each --config on "=" and needs exactly two parts (an empty value leaves one)
    return value != "" and "=" not in value and value == value.strip()


def _add_config_ok(value: str) -> bool:
    # ConfigCommand splits --add-config on commas outside [..] and on "="; it deletes every bracket from values
    return "=" not in value and "[" not in value and "]" not in value and value == value.strip()


def topic_commands(img: MetadataImage, bootstrap: str) -> Tuple[List[str], List[str]]:
    """``kafka-topics.sh --create`` per topic (its configs as ``--config``), ``kafka-configs.sh --alter`` per
    broker / cluster-default config set. Returns (script lines, what the tools' syntax cannot carry)."""
    lines = ["#!/bin/sh", "# Recreates the topics and the non-default configs of the cluster (kstore metadata).",
             "set -e"]
    left_out: List[str] = []
    q = shlex.quote
    if bootstrap != BOOTSTRAP_PLACEHOLDER:
        bootstrap = q(bootstrap)
    for t in sorted(img.topics.by_id.values(), key=lambda t: t["name"]):
        parts = [p for _n, p in sorted(t["partitions"].items())]
        if not parts:
            left_out.append(f"topic {t['name']}: no partitions in the image (kafka-topics.sh needs at least one)")
            continue
        rfs = {len(p["replicas"]) for p in parts}
        cmd = ["kafka-topics.sh", "--bootstrap-server", bootstrap, "--create", "--topic", q(t["name"])]
        if len(rfs) == 1:
            cmd += ["--partitions", str(len(parts)), "--replication-factor", str(rfs.pop())]
        else:
            # replication factors differ per partition: only an explicit assignment keeps them
            cmd += ["--replica-assignment", ",".join(":".join(str(r) for r in p["replicas"]) for p in parts)]
        for k, v in sorted(img.configs.resource_data.get(("TOPIC", t["name"]), {}).items()):
            if _topic_config_ok(v):
                cmd += ["--config", q(f"{k}={v}")]
            else:
                left_out.append(f"topic {t['name']}: {k}={v!r} (kafka-topics.sh --config cannot carry this value)")
        line = " ".join(cmd)
        if t["name"] in INTERNAL_TOPICS:
            lines.append(f"# internal topic, created by Kafka itself: {line}")
        else:
            lines.append(line)
    for (rtype, name), data in sorted(img.configs.resource_data.items()):
        if rtype not in ("BROKER", "BROKER_LOGGER") or not data:
            continue
        entity_type = "brokers" if rtype == "BROKER" else "broker-loggers"
        target = ["--entity-default"] if name == "" else ["--entity-name", q(name)]
        pairs = []
        for k, v in sorted(data.items()):
            if _add_config_ok(v):
                # a value holding a comma is bracketed, as kafka-configs.sh expects
                pairs.append(f"{k}=[{v}]" if "," in v else f"{k}={v}")
            else:
                left_out.append(f"{entity_type} {name or '(cluster default)'}: {k}={v!r} "
                                f"(kafka-configs.sh --add-config cannot carry this value)")
        if pairs:
            lines.append(" ".join(["kafka-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
                                   entity_type, *target, "--add-config", q(",".join(pairs))]))
    for item in left_out:
        lines.append(f"# NOT RECREATED: {item}")
    return lines, left_out


def _render_json(result) -> None:
    """The source line (with its problems, warnings and notes), then the image's lines."""
    src: Dict[str, Any] = {"type": "source", **result.source, "problems": result.problems,
                           "warnings": result.warnings, "notes": result.notes}
    click.echo(json.dumps(src))
    for obj in image_json(result.image):
        if obj["type"] == "topic":
            # beside each raw directory id, the name of a reserved one (DirectoryId), else null
            obj["partitions"] = [{**p, "directoryNames": [RESERVED_DIRECTORY_IDS.get(d) for d in p["directories"]]}
                                 for p in obj["partitions"]]
        click.echo(json.dumps(obj))


@click.command("metadata")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--as-of", "as_of", metavar="OFFSET|TIME",
              help="The cluster as of an end offset (records below it) or an ISO 8601 time (batches up to it).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: a source line, then one line per entity.")
@click.option("--format", "fmt", type=click.Choice(["table", "commands"]), default="table", show_default=True,
              help="commands: kafka-topics.sh/kafka-configs.sh lines that recreate topics and configs.")
@click.option("--bootstrap-server", default=BOOTSTRAP_PLACEHOLDER, show_default=False,
              help="The --bootstrap-server of the --format commands lines (default: $BOOTSTRAP_SERVER, required).")
@topics_option
def command(paths: Tuple[str, ...], as_of: Optional[str], as_json: bool, fmt: str, bootstrap_server: str,
            topics: Optional[str]) -> int:
    """The cluster from a KRaft metadata log: brokers, topics, configs, ACLs, quotas, features.

    PATH is a data dir holding __cluster_metadata-0, that dir itself, or a snapshot .checkpoint file.
    Replays the newest snapshot and the log after it as the controller does (metadata transactions:
    an aborted or unfinished one is left out). Read-only. SCRAM credentials and delegation tokens are
    listed by name only.

    \b
    Examples:
      kstore metadata /var/lib/kafka/data
      kstore metadata --as-of 2024-05-01T03:00:00Z --json /var/lib/kafka/data
      BOOTSTRAP_SERVER=new:9092 sh -c "$(kstore metadata --format commands /var/lib/kafka/data)"

    \b
    A torn tail (the last batch cut short or failing its CRC, nothing intact after it: how a crash
    leaves the log) is left out as Kafka's recovery cuts it, with a warning; damage with intact
    batches after it stops the image there too, as a problem.

    \b
    A metadata.version or record newer than kstore knows is read as far as kstore's schemas allow (a
    newer version with the fields kstore knows) and named; a record of a type kstore does not know is
    skipped and named.

    \b
    Exit status: 0 loaded (a torn tail left out too); 1 a record did not apply, a metadata.version
    or record newer than kstore knows, or the log is damaged; 2 usage; 3 unreadable.
    """
    if as_json and fmt == "commands":
        raise UsageError("--json and --format commands do not go together")
    offset, ms = parse_as_of(as_of)
    result = load_image(find_metadata(list(paths)), as_of_offset=offset, as_of_time=ms)
    if topics is not None:
        result.image = only_topics(result.image, topic_matcher(topics))
    if as_json:
        _render_json(result)
    elif fmt == "commands":
        lines, left_out = topic_commands(result.image, bootstrap_server)
        for line in lines:
            click.echo(line)
        for item in left_out:
            result.problems.append(f"not in the script: {item}")
    else:
        render_text(result)
    for note in result.notes:
        click.echo(f"kstore: note: {note}", err=True)
    for warning in result.warnings:
        click.echo(f"kstore: warning: {warning}", err=True)
    for problem in result.problems:
        click.echo(f"kstore: problem: {problem}", err=True)
    if result.problems:
        click.get_current_context().exit(int(ExitStatus.PROBLEMS))
    return int(ExitStatus.OK)
