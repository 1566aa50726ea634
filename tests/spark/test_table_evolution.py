"""spark-export --format delta|iceberg with decoded values (kstore_cli.spark.tables, table_schema): the table's
columns are the decoded ones, the dead letters stay outside the table, and an evolved Avro subject evolves the
table's schema.

The data is produced as a producer and the registry write it: run 1 sees `orders-value` at v1 only (a
`_schemas` partition holding the KafkaStore's record of v1), values in Confluent's wire format by
KafkaAvroSerializer's rules (fastavro's schemaless writer), one with a wrong magic byte; then v2 (a field
added with a default) is registered in `_schemas` and records are appended written with v2 and with v1; run 2
(reader schema: the subject's latest version, now v2) evolves the table. Rows are read back through deltalake,
pyiceberg, DuckDB (on the Parquet files the table's snapshot names) and Spark (the same files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastavro")
deltalake = pytest.importorskip("deltalake")

from kstore_cli.errors import UsageError  # noqa: E402
from kstore_cli.record.builder import RecordSpec, build_v2_batch  # noqa: E402
from kstore_cli.spark.decoded import DEAD_LETTERS_DIR  # noqa: E402
from kstore_cli.spark.engines import LocalEngine  # noqa: E402
from kstore_cli.spark.export import ExportRequest, export_on  # noqa: E402
from tests.cluster import schema_registry_data as data  # noqa: E402
from tests.cluster.test_wire_format import serialize  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
V1, V2 = data.ORDER_V1, data.ORDER_V2          # v2 adds "note" (a string, default "été")
WRONG_MAGIC = b"\x01" + serialize(1, V1, {"id": 0, "amount": 0.0})[1:]


def _append(partition: Path, records) -> None:
    """Records (key, value) after the partition's last offset, one batch each, onto its one segment."""
    partition.mkdir(parents=True, exist_ok=True)
    log = partition / "00000000000000000000.log"
    first = _next_offset(partition)
    with open(log, "ab") as f:
        for i, (key, value) in enumerate(records):
            offset = first + i
            f.write(build_v2_batch([RecordSpec(offset, data.T0 + offset, key, value)], base_offset=offset))


def _next_offset(partition: Path) -> int:
    from kstore_cli.log.log_segment import read_next_offset

    log = partition / "00000000000000000000.log"
    return read_next_offset(str(log), 0) if log.exists() else 0


def _register(root: Path, version: int, schema_id: int, schema: dict) -> None:
    """The KafkaStore's record of a new version of orders-value."""
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    _append(root / "_schemas-0", [(data.schema_key("orders-value", version),
                                   data.schema_value("orders-value", version, schema_id, text))])


def _order(schema_id: int, schema: dict, datum: dict, offset: int):
    return b"k%d" % offset, serialize(schema_id, schema, datum)


#: what the producer serialized at each offset of orders-0 (None: the dead letter)
RUN1 = [(1, V1, {"id": 10, "amount": 1.5}), None, (1, V1, {"id": 12, "amount": 2.5})]
RUN2 = [(2, V2, {"id": 13, "amount": 3.5, "note": "rush"}), (1, V1, {"id": 14, "amount": 4.5}),
        (2, V2, {"id": 15, "amount": 5.5, "note": "late"})]


def _first_run_data(root: Path) -> None:
    _register(root, 1, 1, V1)
    _append(root / "orders-0", [(b"k0", serialize(*RUN1[0])), (b"k1", WRONG_MAGIC), (b"k2", serialize(*RUN1[2]))])


def _evolve(root: Path) -> None:
    _register(root, 2, 2, V2)
    _append(root / "orders-0", [(b"k%d" % (3 + i), serialize(*r)) for i, r in enumerate(RUN2)])


def _expected(after_run2: bool):
    """(offset, value) as the table holds them: rows of run 1 have note null (not back-filled), a v1 record
    of run 2 read with v2 gets the default."""
    rows = [(0, {"id": 10, "amount": 1.5}), (2, {"id": 12, "amount": 2.5})]
    if not after_run2:
        return rows
    rows = [(o, dict(v, note=None)) for o, v in rows]
    return rows + [(3, RUN2[0][2]), (4, dict(RUN2[1][2], note="\u00e9t\u00e9")), (5, RUN2[2][2])]


def export(root: Path, out: Path, table_format: str, **kwargs):
    request = ExportRequest([str(root)], str(out), topics="orders", engine="arrow", jobs=1,
                            table_format=table_format, value_format="avro", key_format="string", **kwargs)
    request.validate()
    return export_on(LocalEngine(1), request)


def _dead_letters(out: Path):
    import pyarrow.parquet as pq

    rows = pq.read_table(str(out / DEAD_LETTERS_DIR)).to_pylist()
    return [(r["offset"], r["value"], r["reason"]) for r in rows]


def _duckdb_rows(files):
    """DuckDB over the Parquet files the table's snapshot names (no Delta/Iceberg extension here)."""
    duckdb = pytest.importorskip("duckdb")
    listed = ", ".join(f"'{f.removeprefix('file://')}'" for f in files)
    got = duckdb.sql(f"select \"offset\", value from read_parquet([{listed}], union_by_name=true) order by 1")
    return [(o, {k: v for k, v in value.items()}) for o, value in got.fetchall()]


def _spark_rows(spark, files):
    df = spark.read.option("mergeSchema", "true").parquet(*files)
    return sorted((r.offset, r.value.asDict()) for r in df.select("offset", "value").collect())


def _fill(rows):
    """DuckDB's and Spark's rows of files without `note` (merged schemas) have it null, as the table's."""
    return [(o, {"note": None, **v}) for o, v in rows]


def test_delta_decoded_export_evolves_the_tables_schema(spark, tmp_path):
    root, out = tmp_path / "data", tmp_path / "table"
    _first_run_data(root)
    first = export(root, out, "delta")
    assert (first.records, first.dead_letters) == (2, 1)
    table = deltalake.DeltaTable(str(out))
    assert _value_fields(table) == ["id", "amount"]                               # v1's columns
    assert _delta_rows(out) == _expected(False)
    [(offset, raw, reason)] = _dead_letters(out)
    assert (offset, raw) == (1, WRONG_MAGIC) and "magic byte 0x01" in reason
    version = table.version()
    again = export(root, out, "delta")                                            # a rerun: no row, no commit
    assert again.records == 0 and deltalake.DeltaTable(str(out)).version() == version

    _evolve(root)
    second = export(root, out, "delta")
    assert second.records == 3 and second.dead_letters == 0
    assert second.table["schema_evolution"] == {"added": ["value.note"], "promoted": []}
    assert second.notes() == ["the Delta table's schema evolved: added value.note (nullable: rows already in the "
                              "table read null)"]
    table = deltalake.DeltaTable(str(out))
    assert table.version() == version + 2       # the schema update's commit, then the files' commit
    assert _value_fields(table) == ["id", "amount", "note"]
    assert _delta_rows(out) == _expected(True)
    assert _duckdb_rows(table.file_uris()) == _fill(_expected(True))
    assert _spark_rows(spark, table.file_uris()) == _fill(_expected(True))
    log = "".join(p.read_text() for p in (out / "_delta_log").glob("*.json"))
    assert DEAD_LETTERS_DIR not in log and (out / DEAD_LETTERS_DIR).is_dir()
    assert export(root, out, "delta").records == 0 and deltalake.DeltaTable(str(out)).version() == version + 2


def _value_fields(table):
    import pyarrow as pa

    value = pa.schema(table.schema().to_arrow()).field("value").type
    return [value.field(i).name for i in range(value.num_fields)]


def _delta_rows(out: Path):
    rows = deltalake.DeltaTable(str(out)).to_pyarrow_table(columns=["topic", "offset", "key", "value"]).to_pylist()
    assert all(r["topic"] == "orders" and r["key"] == "k%d" % r["offset"] for r in rows)
    return sorted((r["offset"], r["value"]) for r in rows)


def test_iceberg_decoded_export_evolves_the_tables_schema(spark, tmp_path):
    pytest.importorskip("pyiceberg")
    from kstore_cli.spark.tables import iceberg_table

    root, out = tmp_path / "data", tmp_path / "table"
    _first_run_data(root)
    assert export(root, out, "iceberg").records == 2
    assert _iceberg_rows(out) == _expected(False)
    snapshots = len(iceberg_table(str(out)).snapshots())
    assert export(root, out, "iceberg").records == 0 and len(iceberg_table(str(out)).snapshots()) == snapshots
    commits = len(iceberg_table(str(out)).metadata.metadata_log)

    _evolve(root)
    second = export(root, out, "iceberg")
    assert second.records == 3 and second.table["schema_evolution"] == {"added": ["value.note"], "promoted": []}
    table = iceberg_table(str(out))
    assert len(table.snapshots()) == snapshots + 1
    assert len(table.metadata.metadata_log) == commits + 1      # the schema update and the files: one commit
    assert [f.name for f in table.schema().find_field("value").field_type.fields] == ["id", "amount", "note"]
    assert _iceberg_rows(out) == _expected(True)
    files = table.inspect.files().column("file_path").to_pylist()
    assert not any(DEAD_LETTERS_DIR in f for f in files) and len(_dead_letters(out)) == 1
    catalog = [out / "_kstore_catalog.db", *(out / "metadata").iterdir()]     # metadata JSON, manifests, lists
    assert len(catalog) > 3 and not any(DEAD_LETTERS_DIR.encode() in p.read_bytes() for p in catalog)
    assert _duckdb_rows(files) == _fill(_expected(True))
    arrow = table.scan().to_arrow()  # noqa: F841 - DuckDB scans pyiceberg's Arrow table by name
    duckdb = pytest.importorskip("duckdb")
    assert duckdb.sql("select count(*), count(value.note) from arrow").fetchall() == [(5, 3)]
    assert _spark_rows(spark, files) == _fill(_expected(True))
    assert export(root, out, "iceberg").records == 0 and len(iceberg_table(str(out)).snapshots()) == snapshots + 1


def _iceberg_rows(out: Path):
    from kstore_cli.spark.tables import iceberg_table

    rows = iceberg_table(str(out)).scan(selected_fields=("topic", "offset", "key", "value")).to_arrow().to_pylist()
    assert all(r["topic"] == "orders" and r["key"] == "k%d" % r["offset"] for r in rows)
    return sorted((r["offset"], r["value"]) for r in rows)


NARROWED = {**V1, "fields": [{"name": "id", "type": "int"}, {"name": "amount", "type": "double"}]}
NO_DEFAULT = {**V1, "fields": V1["fields"] + [{"name": "region", "type": "string"}]}
DROPPED = {**V1, "fields": [{"name": "id", "type": "long"}]}


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
@pytest.mark.parametrize("reader, message", [
    (NARROWED, "narrows value.id from int64 to int32"),
    (NO_DEFAULT, "adds value.region with no default"),
    (DROPPED, "drops value.amount, a column the table has"),
])
def test_a_change_the_table_cannot_take_is_refused_before_anything_is_written(tmp_path, table_format, reader,
                                                                             message):
    if table_format == "iceberg":
        pytest.importorskip("pyiceberg")
    root, out = tmp_path / "data", tmp_path / "table"
    _first_run_data(root)
    export(root, out, table_format)
    _evolve(root)
    before = sorted(str(p) for p in out.rglob("*"))
    avsc = tmp_path / "reader.avsc"
    avsc.write_text(json.dumps(reader))
    with pytest.raises(UsageError, match=message):
        export(root, out, table_format, reader_schema=str(avsc))
    assert sorted(str(p) for p in out.rglob("*")) == before           # nothing written, not even staging


def test_the_cli_refuses_with_one_line_and_exit_2(tmp_path):
    root, out = tmp_path / "data", tmp_path / "table"
    _first_run_data(root)
    export(root, out, "delta")
    avsc = tmp_path / "reader.avsc"
    avsc.write_text(json.dumps(NARROWED))
    done = subprocess.run([sys.executable, "-m", "kstore_cli", "spark-export", str(root), "--output", str(out),
                           "--topics", "orders", "--engine", "arrow", "--format", "delta", "--value-format", "avro",
                           "--key-format", "string",
                           "--reader-schema", str(avsc)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "narrows value.id from int64 to int32" in lines[0] and "Delta table" in lines[0]


def test_evolution_rules():
    import pyarrow as pa

    from kstore_cli.spark.table_schema import evolution

    def schema(value_type):
        return pa.schema([pa.field("offset", pa.int64()), pa.field("value", value_type)])

    old = schema(pa.struct([pa.field("n", pa.int32()),
                            pa.field("tags", pa.list_(pa.struct([pa.field("a", pa.string())])))]))
    new = schema(pa.struct([pa.field("n", pa.int64()), pa.field("tags", pa.list_(pa.struct(
        [pa.field("a", pa.string()), pa.field("b", pa.float64())])))]))
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "n", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": {"type": "record", "name": "T", "fields": [
            {"name": "a", "type": "string"}, {"name": "b", "type": ["null", "double"], "default": None}]}}}]}
    got = evolution(old, new, promotions=True, where="t", readers={"value": (reader, {})})
    assert (got.added, got.promoted, got.columns) == (["value.tags[].b"], ["value.n"], ["value"])
    with pytest.raises(UsageError, match=r"^t: this export's schema changes value.n from int32 to int64: not a "
                                         r"schema evolution a Delta table takes"):
        evolution(old, new, promotions=False, where="t", readers={"value": (reader, {})})
    no_default = json.loads(json.dumps(reader))
    del no_default["fields"][1]["type"]["items"]["fields"][1]["default"]
    with pytest.raises(UsageError, match=r"adds value.tags\[\].b with no default"):
        evolution(old, new, promotions=True, where="t", readers={"value": (no_default, {})})
    headers = pa.schema(list(new) + [pa.field("headers", pa.list_(pa.string()))])
    assert evolution(new, headers, promotions=False, where="t").added == ["headers"]   # not Avro: no default needed
    assert not evolution(new, new, promotions=False, where="t")


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_dead_letter_at_a_partitions_end_is_not_taken_again(tmp_path, table_format):
    if table_format == "iceberg":
        pytest.importorskip("pyiceberg")
    from kstore_cli.spark.tables import iceberg_table

    root, out = tmp_path / "data", tmp_path / "table"
    _register(root, 1, 1, V1)
    _append(root / "orders-0", [(b"k0", WRONG_MAGIC)])            # the table's first run: a dead letter only
    first = export(root, out, table_format)
    assert (first.records, first.dead_letters) == (0, 1)
    _append(root / "orders-0", [(b"k1", serialize(*RUN1[0])), (b"k2", WRONG_MAGIC)])
    second = export(root, out, table_format)
    assert (second.records, second.dead_letters) == (1, 1)
    version = lambda: deltalake.DeltaTable(str(out)).version() if table_format == "delta" else \
        len(iceberg_table(str(out)).metadata.metadata_log)  # noqa: E731
    before = version()
    again = export(root, out, table_format)                        # nothing new: no row, no dead letter, no commit
    assert (again.records, again.dead_letters) == (0, 0) and version() == before
    assert [(o, v) for o, v, _ in sorted(_dead_letters(out))] == [(0, WRONG_MAGIC), (2, WRONG_MAGIC)]


@pytest.mark.parametrize("table_format, message", [
    ("delta", "a type a Delta table cannot store: .*Decimal256"),
    ("iceberg", "an Iceberg table cannot store: .*decimal256")])
def test_a_column_type_the_format_has_not_is_refused_before_anything_is_written(tmp_path, table_format, message):
    if table_format == "iceberg":
        pytest.importorskip("pyiceberg")
    root, out = tmp_path / "data", tmp_path / "table"
    _first_run_data(root)
    wide = {**V1, "fields": V1["fields"] + [{"name": "big", "default": b"\x00".decode("latin-1"), "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 2}}]}
    avsc = tmp_path / "reader.avsc"
    avsc.write_text(json.dumps(wide))
    with pytest.raises(UsageError, match=message):
        export(root, out, table_format, reader_schema=str(avsc))
    assert not (out / "_temporary").exists() and not list(out.rglob("*.parquet"))
