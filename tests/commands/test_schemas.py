"""kstore schemas: the text table, JSON Lines, --write-to and the exit status on fixtures/schema-registry."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli, main
from tests.cluster import schema_registry_data as data
from tests.cluster.test_schema_registry import REGISTRY, write_partition

_register_commands()


def _run(*argv):
    return CliRunner().invoke(cli, ["schemas", *argv])


def test_text_table_in_a_pipe() -> None:
    res = _run(str(REGISTRY))
    assert res.exit_code == 1  # two records the registry would not apply
    assert res.stdout.splitlines() == [
        "subject\tversion\tid\ttype\tcompatibility\tdeleted",
        "customer-value\t1\t3\tAVRO\tFULL (global)\tno",
        "events-value\t1\t5\tJSON\tFULL (global)\tno",
        "orders-value\t2\t2\tAVRO\tBACKWARD_TRANSITIVE\tno",
        "pings-value\t1\t6\tPROTOBUF\tFULL (global)\tno",
        "shipments-value\t1\t4\tAVRO\tFULL (global)\tno",
    ]
    warnings = res.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("kstore: warning: ") for w in warnings)
    assert "00000000000000000000.log: the record at offset 21 is not applied: the value is not JSON" in warnings[0]
    assert "offset 22 is not applied: schema id 2 is already registered" in warnings[1]


def test_json_lines() -> None:
    res = _run(str(REGISTRY), "--json", "--include-deleted", "--subjects", "orders-*,shipments-value")
    assert res.exit_code == 1
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    schemas = [r for r in rows if r["type"] == "schema"]
    assert [(r["subject"], r["version"], r["id"], r["deleted"]) for r in schemas] == [
        ("orders-value", 1, 1, True), ("orders-value", 2, 2, False), ("shipments-value", 1, 4, False)]
    assert schemas[0]["schema"] == data._c(data.ORDER_V1) and schemas[0]["schema_type"] == "AVRO"
    assert (schemas[0]["compatibility"], schemas[0]["compatibility_source"]) == ("BACKWARD_TRANSITIVE", "subject")
    assert (schemas[2]["compatibility"], schemas[2]["compatibility_source"]) == ("FULL", "global")
    assert schemas[2]["references"] == [{"name": "com.acme.Customer", "subject": "customer-value", "version": 1}]
    assert [(r["subject"], r["config"]["compatibilityLevel"]) for r in rows if r["type"] == "config"] == [
        (None, "FULL"), ("orders-value", "BACKWARD_TRANSITIVE")]
    assert [(r["subject"], r["mode"]) for r in rows if r["type"] == "mode"] == [(None, "READWRITE"),
                                                                                ("events-value", "READONLY")]
    assert [r["offset"] for r in rows if r["type"] == "problem"] == [21, 22]
    summary = rows[-1]
    assert summary["type"] == "summary"
    assert (summary["records"], summary["versions"], summary["deleted_versions"], summary["subjects"],
            summary["problems"], summary["tombstones"]) == (24, 3, 1, 2, 2, 1)
    assert summary["keytypes"] == {"clear_subject": 1, "config": 2, "delete_subject": 1, "mode": 2, "noop": 2,
                                   "schema": 16}


def test_write_to(tmp_path) -> None:
    out = tmp_path / "schemas"
    res = _run(str(REGISTRY), "--write-to", str(out), "--json")
    assert res.exit_code == 1
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["customer-value/v1.avsc", "events-value/v1.json", "orders-value/v2.avsc",
                     "pings-value/v1.proto", "shipments-value/v1.avsc"]
    assert (out / "events-value" / "v1.json").read_text() == data._c(data.EVENT_JSON)
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert {r["subject"]: r["file"] for r in rows if r["type"] == "schema"}["pings-value"] == str(
        out / "pings-value" / "v1.proto")
    assert rows[-1]["files_written"] == 5
    again = _run(str(REGISTRY), "--write-to", str(out))  # a rerun replaces them
    assert again.exit_code == 1 and "5 schema files written" in again.stderr


def _main(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(["schemas", *argv])
    return exit_info.value.code, capsys.readouterr().err


def test_write_to_inside_a_data_dir_is_refused(tmp_path, capsys) -> None:
    shutil.copytree(REGISTRY, tmp_path / "d")
    shutil.copytree(REGISTRY, tmp_path / "other")
    code, err = _main(capsys, str(tmp_path / "d"), "--write-to", str(tmp_path / "d" / "out"))
    assert code == 2 and err.count("\n") == 1 and "--write-to is or lies inside the input" in err
    code, err = _main(capsys, str(tmp_path / "d"), "--write-to", str(tmp_path / "other" / "out"))
    assert code == 2 and "--write-to is or lies inside the Kafka data dir" in err
    assert not (tmp_path / "d" / "out").exists() and not (tmp_path / "other" / "out").exists()


def test_clean_store_exits_zero_and_schemas_from(tmp_path) -> None:
    part = write_partition(tmp_path / "backup" / "store-0", [
        (data.NOOP, None), (data.schema_key("a-value", 1), data.schema_value("a-value", 1, 1, '"string"'))])
    res = _run("--schemas-from", str(part))
    assert res.exit_code == 0 and res.stderr == ""
    assert res.stdout.splitlines()[1] == "a-value\t1\t1\tAVRO\tBACKWARD (default)\tno"


def test_no_input_is_a_usage_error(capsys) -> None:
    code, err = _main(capsys)
    assert code == 2 and err.startswith("kstore: error: schemas: give the data dirs") and err.count("\n") == 1
