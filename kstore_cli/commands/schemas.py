"""``kstore schemas``: Confluent Schema Registry's subjects, versions and ids read from its ``_schemas`` topic
(read-only, or the schemas written out as files with --write-to)."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

import click

from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, json_option, schemas_source_options
from kstore_cli.commands._render import Column, is_tty, print_lines, print_table
from kstore_cli.errors import ExitStatus
from kstore_cli.cluster.schema_registry import (SchemaStore, SchemaVersion, load_schema_store,
                                                write_schema_files)
from kstore_cli.log.logdir import topic_matcher


def _selected(store: SchemaStore, subjects: Optional[str], include_deleted: bool) -> List[SchemaVersion]:
    wanted = topic_matcher(subjects)
    return [sv for s, versions in store.by_subject(include_deleted).items() if wanted(s) for sv in versions]


def _json_lines(store: SchemaStore, versions: List[SchemaVersion],
                written: Optional[Dict[Tuple[str, int], str]]) -> None:
    files = written or {}
    for sv in versions:
        level, level_source = store.compatibility(sv.subject)
        mode, mode_source = store.mode(sv.subject)
        click.echo(json.dumps({
            "type": "schema", "subject": sv.subject, "version": sv.version, "id": sv.id, "schema_type": sv.schema_type,
            "references": [{"name": r.name, "subject": r.subject, "version": r.version} for r in sv.references],
            "deleted": sv.deleted, "compatibility": level, "compatibility_source": level_source, "mode": mode,
            "mode_source": mode_source, "offset": sv.offset, "timestamp": sv.timestamp, "schema": sv.schema,
            "file": files.get((sv.subject, sv.version))}, sort_keys=True))
    for subject, config in sorted(store.configs.items(), key=lambda kv: (kv[0] is not None, kv[0] or "")):
        click.echo(json.dumps({"type": "config", "subject": subject, "config": config}, sort_keys=True))
    for subject, mode in sorted(store.modes.items(), key=lambda kv: (kv[0] is not None, kv[0] or "")):
        click.echo(json.dumps({"type": "mode", "subject": subject, "mode": mode}, sort_keys=True))
    for p in store.problems:
        click.echo(json.dumps({"type": "problem", "file": p.path, "offset": p.offset, "reason": p.reason},
                              sort_keys=True))
    click.echo(json.dumps(_summary(store, versions, written), sort_keys=True))


def _summary(store: SchemaStore, versions: List[SchemaVersion], written: Optional[dict]) -> dict:
    return {"type": "summary", "topic": store.topic, "partition_dir": store.partition_path, "records": store.records,
            "keytypes": {k.lower(): n for k, n in sorted(store.keytypes.items())}, "tombstones": store.tombstones,
            "subjects": len({sv.subject for sv in versions}), "versions": len(versions),
            "deleted_versions": sum(sv.deleted for sv in versions), "ids": len(store.ids),
            "global_compatibility": store.compatibility(None)[0], "global_mode": store.mode(None)[0],
            "problems": len(store.problems), "notes": store.notes,
            "files_written": None if written is None else len(written)}


_COLUMNS = (Column("subject"), Column("version"), Column("id"), Column("type"), Column("compatibility"),
            Column("deleted"))


def _render_text(store: SchemaStore, versions: List[SchemaVersion], write_to: Optional[str],
                 written: Optional[dict]) -> None:
    """The table (compatibility: the subject's own level, else "LEVEL (global)" or "LEVEL (default)"); on a
    terminal a line on the store after it (in a pipe the TSV alone)."""
    rows = []
    for sv in versions:
        level, source = store.compatibility(sv.subject)
        rows.append((sv.subject, sv.version, sv.id, sv.schema_type,
                     level if source == "subject" else f"{level} ({source})", "yes" if sv.deleted else "no"))
    tty = is_tty()
    if rows:
        print_table(f"{store.topic}: {store.partition_path}", _COLUMNS, rows, tty=tty)
    if tty:
        level, level_source = store.compatibility(None)
        mode, mode_source = store.mode(None)
        print_lines(f"{store.records} records, {len(versions)} versions of {len({sv.subject for sv in versions})} "
                    f"subjects, {len(store.ids)} ids; global compatibility {level} ({level_source}), "
                    f"mode {mode} ({mode_source})")
    if written is not None:
        click.echo(f"kstore: {len(written)} schema files written under {write_to}", err=True)


@click.command("schemas")
@click.argument("paths", nargs=-1, type=ExistingPath())
@schemas_source_options
@click.option("--subjects", default=None, metavar="GLOBS",
              help="Only the subjects matching these comma-separated globs ('orders-*,payments-value').")
@click.option("--include-deleted", is_flag=True, help="Also the soft-deleted versions.")
@click.option("--write-to", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write each version's schema as DIR/<subject>/v<version>.avsc|.json|.proto (crash-safe; "
                   "never inside a Kafka data dir).")
@json_option("JSON Lines: a line per version (its schema text included), per config and mode, per record not "
             "applied, then a summary.")
def command(paths: Tuple[str, ...], schemas_topic: str, schemas_from: Optional[str], subjects: Optional[str],
            include_deleted: bool, write_to: Optional[str], as_json: bool) -> None:
    """Confluent Schema Registry's subjects, versions, ids, types, compatibility and deleted state, read from
    its _schemas topic in PATHS with no registry running, replayed as the registry's KafkaStore reads it.

    A record the registry would not apply (a malformed key or value, a schema under an id already taken)
    is named on stderr and makes the exit status 1.

    \b
    Example (keep every schema of a lost cluster as files):
        kstore schemas /var/lib/kafka --write-to ./schemas
        kstore schemas --schemas-from /backup/_schemas-0 --subjects 'orders-*' --json
    """
    if not paths and schemas_from is None:
        raise click.UsageError("give the data dirs (PATHS) or the store topic's partition dir (--schemas-from)")
    store = load_schema_store(paths, topic=schemas_topic, schemas_from=schemas_from)
    versions = _selected(store, subjects, include_deleted)
    written = None
    if write_to is not None:
        inputs = list(paths) + ([schemas_from] if schemas_from else [])
        written = write_schema_files(write_to, versions, inputs=inputs)
    if as_json:
        _json_lines(store, versions, written)
    else:
        _render_text(store, versions, write_to, written)
    for note in store.notes:
        click.echo(f"kstore: note: {note}", err=True)
    for p in store.problems:
        click.echo(f"kstore: warning: {p.path}: the record at offset {p.offset} is not applied: {p.reason}", err=True)
    if store.problems:
        exit_with(ExitStatus.PROBLEMS)
