"""spark-export --format delta (kstore_cli.spark.tables): one Delta commit per export; a rerun adds no row,
a run after appends adds exactly those; a failed export leaves the table's version as it was; deltalake
(pyarrow), DuckDB and Spark read the table's rows as the Parquet export has them."""

from __future__ import annotations

import pytest

deltalake = pytest.importorskip("deltalake")

from kstore_cli.spark.engines import LocalEngine  # noqa: E402
from kstore_cli.spark.export import ExportRequest, export_on  # noqa: E402
from tests.spark.test_incremental import append, expected  # noqa: E402


def export(root, out, engine=None, **kwargs):
    request = ExportRequest([str(root)], str(out), engine="arrow", jobs=2, table_format="delta", **kwargs)
    request.validate()
    return export_on(engine or LocalEngine(2), request)


def table_rows(out):
    table = deltalake.DeltaTable(str(out)).to_pyarrow_table(columns=["topic", "partition", "offset", "value"])
    rows = table.to_pylist()
    for r in rows:
        assert r["value"] == b"%s-%d@%d" % (r["topic"].encode(), r["partition"], r["offset"])
    return sorted((r["topic"], r["partition"], r["offset"]) for r in rows)


def test_delta_export_is_idempotent_and_adds_only_new_offsets(tmp_path):
    root, out = tmp_path / "data", tmp_path / "table"
    append(root, "events-0", 0, 5)
    append(root, "events-1", 0, 3)
    first = export(root, out)
    assert first.records == 8 and first.table == {"format": "delta", "committed_before": 0, "files_added": 2,
                                                 "schema_evolution": {"added": [], "promoted": []}}
    assert table_rows(out) == expected({"events-0": 5, "events-1": 3})
    version = deltalake.DeltaTable(str(out)).version()
    again = export(root, out)                           # a rerun: nothing new, no commit
    assert again.records == 0 and deltalake.DeltaTable(str(out)).version() == version
    append(root, "events-0", 5, 2, new_segment=True)
    append(root, "events-2", 0, 1)
    third = export(root, out)
    assert third.records == 3 and deltalake.DeltaTable(str(out)).version() == version + 1
    assert table_rows(out) == expected({"events-0": 7, "events-1": 3, "events-2": 1})


class _Failing(LocalEngine):
    def run_tasks(self, job, tasks, progress=None):
        super().run_tasks(job, tasks, progress)  # the files are written (staged)...
        raise RuntimeError("a task failed")           # ... and then the job fails


def test_a_failed_export_leaves_the_table_as_it_was(tmp_path):
    root, out = tmp_path / "data", tmp_path / "table"
    append(root, "events-0", 0, 3)
    export(root, out)
    version = deltalake.DeltaTable(str(out)).version()
    append(root, "events-0", 3, 3)
    with pytest.raises(Exception, match="a task failed"):
        export(root, out, engine=_Failing(2))
    assert deltalake.DeltaTable(str(out)).version() == version
    assert table_rows(out) == expected({"events-0": 3}) and not (out / "_temporary").exists()
    export(root, out)
    assert table_rows(out) == expected({"events-0": 6})


def test_duckdb_and_spark_read_the_table(spark, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    root, out = tmp_path / "data", tmp_path / "table"
    append(root, "events-0", 0, 4)
    append(root, "events-1", 0, 2)
    export(root, out)
    dataset = deltalake.DeltaTable(str(out)).to_pyarrow_dataset()  # noqa: F841 - DuckDB scans it by name
    got = duckdb.sql("select topic, partition, count(*), max(\"offset\") from dataset group by all order by all").fetchall()
    assert got == [("events", 0, 4, 3), ("events", 1, 2, 1)]
    files = deltalake.DeltaTable(str(out)).file_uris()
    df = spark.read.option("basePath", str(out)).parquet(*files)
    assert sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect()) == \
        expected({"events-0": 4, "events-1": 2})


def iceberg_rows(out):
    from kstore_cli.spark.tables import iceberg_table

    rows = iceberg_table(str(out)).scan(selected_fields=("topic", "partition", "offset", "value")).to_arrow().to_pylist()
    for r in rows:
        assert r["value"] == b"%s-%d@%d" % (r["topic"].encode(), r["partition"], r["offset"])
    return sorted((r["topic"], r["partition"], r["offset"]) for r in rows)


def test_iceberg_export_is_idempotent_and_partitioned(tmp_path):
    pytest.importorskip("pyiceberg")
    duckdb = pytest.importorskip("duckdb")
    from kstore_cli.spark.tables import iceberg_table

    root, out = tmp_path / "data", tmp_path / "table"
    append(root, "events-0", 0, 5)
    append(root, "events-1", 0, 3)
    first = _iceberg(root, out)
    assert first.records == 8 and first.table["files_added"] == 2
    assert iceberg_rows(out) == expected({"events-0": 5, "events-1": 3})
    table = iceberg_table(str(out))
    snapshots = len(table.snapshots())
    assert [f.name for f in table.spec().fields] == ["topic", "partition"]
    again = _iceberg(root, out)                          # a rerun: no row, no snapshot
    assert again.records == 0 and len(iceberg_table(str(out)).snapshots()) == snapshots
    append(root, "events-0", 5, 2, new_segment=True)
    assert _iceberg(root, out).records == 2
    assert iceberg_rows(out) == expected({"events-0": 7, "events-1": 3})
    arrow = iceberg_table(str(out)).scan().to_arrow()  # noqa: F841 - DuckDB scans it by name
    assert duckdb.sql("select partition, count(*) from arrow group by all order by all").fetchall() == [(0, 7), (1, 3)]
    # only the partition the filter names is planned (Iceberg's partition pruning on topic/partition)
    pruned = iceberg_table(str(out)).scan(row_filter="partition == 1").plan_files()
    assert pruned and all("partition=1/" in task.file.file_path for task in pruned)


def _iceberg(root, out):
    request = ExportRequest([str(root)], str(out), engine="arrow", jobs=2, table_format="iceberg")
    request.validate()
    return export_on(LocalEngine(2), request)


def test_spark_reads_the_iceberg_tables_files(spark, tmp_path):
    pytest.importorskip("pyiceberg")
    from kstore_cli.spark.tables import iceberg_table

    root, out = tmp_path / "data", tmp_path / "table"
    append(root, "events-0", 0, 4)
    append(root, "events-1", 0, 2)
    _iceberg(root, out)
    # Spark without the Iceberg runtime jar (not downloadable here): the files the table's snapshot names
    files = [task.file.file_path for task in iceberg_table(str(out)).scan().plan_files()]
    df = spark.read.parquet(*files)
    assert sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect()) == \
        expected({"events-0": 4, "events-1": 2})
