"""``spark-export --format delta|iceberg``: the export as a Delta Lake table (``deltalake``, delta-rs) or an
Iceberg table (``pyiceberg``, a local SQL catalog: ``OUTPUT/_kstore_catalog.db``, table ``kstore.export``).

The arrow writer's tasks write the Parquet files (``topic=T/partition=P/part-*.parquet``, the Delta layout
for partition columns ``topic`` and ``partition``) under ``_temporary/<job id>/``; once every task is done
the files are moved into the table's directory and ONE commit adds them all (Delta: with each file's
record count and offset range as its statistics; Iceberg: ``add_files``, the files keeping their topic and
partition columns, from which Iceberg takes their partition). Until that commit a reader of the table sees it as it
was: a failed or killed export leaves only files no commit names (``deltalake``'s vacuum removes them).

Idempotent: before planning, the table gives each (topic, partition) the highest offset already in it
(Delta: its files' statistics; Iceberg: a scan of its three columns), and the export starts after it; a rerun of the same export adds no row, a run after new
appends adds exactly those. Concurrent writers to one table are not supported (the second commit of two
racing exports could add rows twice); run one export per table at a time.

Decoded formats (``--key-format/--value-format``): the table's columns are the decoded ones, and a later run's
reader schema may evolve them (kstore_cli.spark.table_schema: checked before anything is written; Delta: a
column commit of its own just before the files' commit, Iceberg: the same transaction). The dead letters stay in
``OUTPUT/_kstore_dead_letters/``, named by no commit; their highest offsets per partition are recorded
(``kstore.dead_letter_offsets``) so that one at a partition's end is not taken again.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import MissingDependencyError, UsageError
from kstore_cli.spark.options import partition_json

#: The table's partition columns (Delta keeps their values in the log, not in the files).
PARTITION_COLUMNS = ["topic", "partition"]

Key = Tuple[str, int]


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError:
        raise MissingDependencyError("--format delta needs deltalake: pip install 'kstore-cli[tables]'") from None
    return deltalake


def committed_offsets(table_uri: str, storage_options: Optional[Dict[str, str]] = None) -> Dict[Key, int]:
    """Per (topic, partition) the highest offset the table holds (its files' statistics) or took as a dead letter
    (its commits' ``kstore.dead_letter_offsets``); {} without a table."""
    deltalake = _deltalake()
    if not deltalake.DeltaTable.is_deltatable(table_uri, storage_options=storage_options):
        return {}
    table = deltalake.DeltaTable(table_uri, storage_options=storage_options)
    actions = table.get_add_actions(flatten=True)
    columns = set(actions.column_names)
    out: Dict[Key, int] = {}
    if actions.num_rows and not {"partition.topic", "partition.partition", "max.offset"} <= columns:
        raise UsageError(f"{table_uri} is a Delta table without topic/partition columns or offset statistics: "
                         "not one spark-export --format delta wrote")
    if actions.num_rows:
        _merge(out, zip(*(actions.column(c).to_pylist() for c in ("partition.topic", "partition.partition",
                                                                   "max.offset"))))
    for commit in table.history():
        _merge(out, _offsets_of(commit.get(DEAD_LETTER_OFFSETS)))
    return out


#: A commit's (Delta) or the table's (Iceberg) record of the highest offset per partition among the dead
#: letters ({"topic": {"partition": offset}}): a dead letter at a partition's end is not taken again by the next run.
DEAD_LETTER_OFFSETS = "kstore.dead_letter_offsets"


def _merge(into: Dict[Key, int], tops: Any) -> Dict[Key, int]:
    """`into` with each (topic, partition, offset) of `tops` kept where it is higher."""
    for topic, partition, top in tops:
        if top is not None:
            key = (topic, int(partition))
            into[key] = max(into.get(key, -1), int(top))
    return into


def _triples(offsets: Dict[Key, int]) -> List[Tuple[str, int, int]]:
    return [(topic, partition, offset) for (topic, partition), offset in offsets.items()]


def _offsets_of(text: Optional[str]) -> List[Tuple[str, int, int]]:
    if not text:
        return []
    return [(topic, int(p), int(o)) for topic, parts in json.loads(text).items() for p, o in parts.items()]


def dead_letter_offsets(fs: Any, root: str, written: List[Dict]) -> Dict[Key, int]:
    """Per (topic, partition) the highest offset among the dead letters of this run's files (moved into place)."""
    import pyarrow.parquet as pq

    out: Dict[Key, int] = {}
    for entry in written:
        if "dead_letters" in entry:
            with fs.open_input_file(f"{root}/{entry['path']}") as f:
                rows = pq.read_table(f, columns=["topic", "partition", "offset"])
            top = rows.group_by(["topic", "partition"]).aggregate([("offset", "max")])
            _merge(out, zip(top.column("topic").to_pylist(), top.column("partition").to_pylist(),
                            top.column("offset_max").to_pylist()))
    return out


def _starting_offsets(targets: List[Any], committed: Dict[Key, int]) -> str:
    """startingOffsets JSON: after the table's highest offset, else the partition's earliest (-2)."""
    keys = [(t.partition.topic, t.partition.partition) for t in targets]
    return partition_json({key: committed[key] + 1 if key in committed else -2 for key in keys})


def _plan_after(engine: Any, request: Any, committed: Dict[Key, int]) -> Any:
    """The export's plan with each partition started after the table's highest offset (`committed`)."""
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read, select_partitions

    targets = select_partitions(ReadOptions(request.reader_options()))
    request.starting_offsets = _starting_offsets(targets, committed)
    try:
        return plan_read(ReadOptions(request.reader_options(min_partitions=engine.parallelism)))
    finally:
        request.starting_offsets = None


def _add_action(fs: Any, root: str, entry: Dict, now_ms: int) -> Any:
    """The Delta add action of one written file: its partition values and offset statistics."""
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    path = entry["path"]
    values = dict(part.split("=", 1) for part in path.split("/")[:-1])
    with fs.open_input_file(f"{root}/{path}") as f:
        meta = pq.ParquetFile(f).metadata
    column = meta.schema.names.index("offset")
    stats = [meta.row_group(i).column(column).statistics for i in range(meta.num_row_groups)]
    lo = min(s.min for s in stats if s is not None and s.has_min_max)
    hi = max(s.max for s in stats if s is not None and s.has_min_max)
    from kstore_cli.spark.write import unescape_path_name

    partition_values = {"topic": unescape_path_name(values["topic"]), "partition": values["partition"]}
    return AddAction(path, entry["bytes"], partition_values, now_ms, True,
                     json.dumps({"numRecords": meta.num_rows, "minValues": {"offset": lo},
                                 "maxValues": {"offset": hi}, "nullCount": {"offset": 0}}))


def run_delta(engine: Any, request: Any, progress: Optional[Callable[..., None]] = None, *,
              summary_of: Callable[[Any], Any], spark_metadata: Optional[str] = None) -> Any:
    """The export as one Delta commit (see the module's docstring), after a schema update commit when the
    export's columns evolve the table's (kstore_cli.spark.table_schema); its summary."""
    import time

    from kstore_cli.spark.incremental import run_and_move
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.table_schema import Evolution, describe, export_schema
    from kstore_cli.spark.write import filesystem

    deltalake = _deltalake()
    from deltalake.transaction import CommitProperties, create_table_with_add_actions

    _check(request, "delta")
    storage = ReadOptions(request.reader_options()).storage or None
    committed = committed_offsets(request.output, storage)
    table = deltalake.DeltaTable(request.output, storage_options=storage) \
        if committed or deltalake.DeltaTable.is_deltatable(request.output, storage_options=storage) else None
    new = export_schema(request)
    schema = _stored(lambda: deltalake.Schema.from_arrow(new), "a Delta")
    evolved = _delta_evolution(deltalake, table, schema, request)   # refused before anything is read or written
    plan = _plan_after(engine, request, committed)
    summary = summary_of(plan)
    fs, root = filesystem(request.output)
    written = run_and_move(engine, request, plan, uuid.uuid4().hex, fs, root, summary, progress, spark_metadata,
                           success=False)
    now_ms = int(time.time() * 1000)
    actions = [_add_action(fs, root, w, now_ms) for w in table_files(written)]
    dead = dead_letter_offsets(fs, root, written)
    commit = CommitProperties(custom_metadata={"kstore.rows": str(summary.records),
                                               **({DEAD_LETTER_OFFSETS: partition_json(dead)} if dead else {})})
    if table is not None:
        if actions and evolved:
            # delta-rs's create_write_transaction ignores its schema (no metaData action): the columns are
            # added by a commit of their own first (ALTER TABLE ADD COLUMNS, nested struct fields merged)
            table.alter.add_columns([f for f in schema.fields if f.name in evolved.columns],
                                    commit_properties=CommitProperties(
                                        custom_metadata={"kstore.schema_evolution": describe(evolved)}))
            table = deltalake.DeltaTable(request.output, storage_options=storage)
        if actions or dead:
            table.create_write_transaction(actions, "append", schema, partition_by=PARTITION_COLUMNS,
                                           commit_properties=commit)
    else:
        create_table_with_add_actions(request.output, schema, actions, mode="append", partition_by=PARTITION_COLUMNS,
                                      storage_options=storage, commit_properties=commit)
    summary.table = {"format": "delta", "committed_before": len(committed), "files_added": len(actions),
                     "schema_evolution": evolved.to_dict() if actions else Evolution().to_dict()}
    summary.table_notes = [evolved.text("the Delta")] if actions and evolved else []
    return summary


def table_files(written: List[Dict]) -> List[Dict]:
    """The written files the table's commit names: not the dead letters (``_kstore_dead_letters/``, beside
    the table's data, never in its log or catalog)."""
    return [w for w in written if "dead_letters" not in w]


def _stored(convert: Callable[[], Any], kind: str) -> Any:
    """The export's schema converted to the table format's (`convert`); UsageError when a column's type has none."""
    try:
        return convert()
    except Exception as exc:  # noqa: BLE001 - deltalake and pyiceberg raise several kinds
        raise UsageError(f"the export's columns have a type {kind} table cannot store: "
                         f"{str(exc).strip().splitlines()[0]}") from None


def _delta_evolution(deltalake: Any, table: Any, new: Any, request: Any) -> Any:
    """How the export's columns (`new`, a Delta schema) evolve the Delta table's (none for a new table);
    UsageError when they cannot."""
    import pyarrow as pa

    from kstore_cli.spark.table_schema import Evolution, avro_readers, evolution

    if table is None:
        return Evolution()
    as_stored = lambda schema: pa.schema(schema.to_arrow())  # noqa: E731 - both sides through Delta's types
    return evolution(as_stored(table.schema()), as_stored(new), promotions=False,
                     where=f"{request.output} (Delta table)", readers=avro_readers(request))


#: Iceberg: the SQL catalog's file under the output, and the table's name in it.
ICEBERG_CATALOG = "_kstore_catalog.db"
ICEBERG_TABLE = "kstore.export"


def iceberg_table(output: str, schema: Any = None) -> Any:
    """The export's Iceberg table under `output` (created, partitioned by topic and partition, when
    `schema` is given and there is none); None when there is none and no schema is given."""
    try:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import NoSuchTableError
    except ImportError:
        raise MissingDependencyError("--format iceberg needs pyiceberg: pip install 'kstore-cli[tables]'") from None
    root = os.path.abspath(output)
    os.makedirs(root, exist_ok=True)
    catalog = SqlCatalog("kstore", uri=f"sqlite:///{root}/{ICEBERG_CATALOG}", warehouse=f"file://{root}")
    try:
        return catalog.load_table(ICEBERG_TABLE)
    except NoSuchTableError:
        if schema is None:
            return None
    catalog.create_namespace_if_not_exists(ICEBERG_TABLE.split(".")[0])
    table = catalog.create_table(ICEBERG_TABLE, schema=schema, location=f"file://{root}")
    with table.update_spec() as spec:
        spec.add_identity("topic")
        spec.add_identity("partition")
    return catalog.load_table(ICEBERG_TABLE)


def iceberg_offsets(table: Any) -> Dict[Key, int]:
    """Per (topic, partition) the highest offset the Iceberg table holds or took as a dead letter (its
    ``kstore.dead_letter_offsets`` property)."""
    if table is None:
        return {}
    rows = table.scan(selected_fields=("topic", "partition", "offset")).to_arrow()
    top = rows.group_by(["topic", "partition"]).aggregate([("offset", "max")])
    out = _merge({}, zip(top.column("topic").to_pylist(), top.column("partition").to_pylist(),
                         top.column("offset_max").to_pylist()))
    return _merge(out, _offsets_of(table.properties.get(DEAD_LETTER_OFFSETS)))


def run_iceberg(engine: Any, request: Any, progress: Optional[Callable[..., None]] = None, *,
                summary_of: Callable[[Any], Any], spark_metadata: Optional[str] = None) -> Any:
    """The export as one Iceberg commit to ``kstore.export`` of the output's SQL catalog: the files added
    (add_files), after ``update_schema().union_by_name`` in the same transaction when the export's columns evolve
    the table's (kstore_cli.spark.table_schema)."""
    from kstore_cli.spark.incremental import run_and_move
    from kstore_cli.spark.table_schema import Evolution, export_schema
    from kstore_cli.spark.write import filesystem

    _check(request, "iceberg")
    if "://" in request.output and not request.output.startswith("file://"):
        raise UsageError("--format iceberg writes to a local --output (its SQL catalog is a file there)")
    table = iceberg_table(request.output)   # MissingDependencyError without pyiceberg
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
    from pyiceberg.schema import assign_fresh_schema_ids

    new = export_schema(request)
    # pyiceberg's own conversion of an Arrow schema (as create_table does)
    stored = _stored(lambda: assign_fresh_schema_ids(_pyarrow_to_schema_without_ids(new)), "an Iceberg")
    evolved = _iceberg_evolution(table, stored, request)   # refused before anything is read or written
    committed = iceberg_offsets(table)
    plan = _plan_after(engine, request, committed)
    summary = summary_of(plan)
    fs, root = filesystem(request.output)
    written = run_and_move(engine, request, plan, uuid.uuid4().hex, fs, root, summary, progress, None,
                           success=False, keep_partition_columns=True)
    table = table or iceberg_table(request.output, new)
    dead = dead_letter_offsets(fs, root, written)
    written = table_files(written)
    if written or dead:
        with table.transaction() as tx:
            if evolved and written:
                with tx.update_schema() as update:
                    update.union_by_name(new)
            if dead:
                before = _merge({}, _offsets_of(table.properties.get(DEAD_LETTER_OFFSETS)))
                tx.set_properties({DEAD_LETTER_OFFSETS: partition_json(_merge(before, _triples(dead)))})
            if written:
                tx.add_files([f"{root}/{w['path']}" for w in written],
                             snapshot_properties={"kstore.rows": str(summary.records)})
    summary.table = {"format": "iceberg", "committed_before": len(committed), "files_added": len(written),
                     "schema_evolution": evolved.to_dict() if written else Evolution().to_dict()}
    summary.table_notes = [evolved.text("the Iceberg")] if written and evolved else []
    return summary


def _iceberg_evolution(table: Any, new: Any, request: Any) -> Any:
    """How the export's columns (`new`, an Iceberg schema) evolve the Iceberg table's (none for a new table);
    UsageError when they cannot."""
    from kstore_cli.spark.table_schema import Evolution, avro_readers, evolution

    if table is None:
        return Evolution()
    return evolution(table.schema().as_arrow(), new.as_arrow(), promotions=True,
                     where=f"{request.output} (Iceberg table {ICEBERG_TABLE})", readers=avro_readers(request))


def _check(request: Any, name: str) -> None:
    if request.writer != "arrow" or request.partition_by != "topic,partition":
        raise UsageError(f"--format {name} writes with the arrow writer, partitioned by topic and partition")
    if request.starting_offsets or request.starting_timestamp:
        raise UsageError(f"--format {name} starts each partition after the table's highest offset; drop --starting-*")
