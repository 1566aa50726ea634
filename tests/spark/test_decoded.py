"""spark-export's decoded columns and dead letters (kstore_cli.spark.decoded), on data produced as Confluent's
serializers write it: Avro by fastavro's schemaless_writer (KafkaAvroSerializer's rules), JSON Schema as the
JSON text, Protobuf as SerializeToString of protoc-generated classes after Confluent's message indexes; schemas in
a `_schemas` partition holding the registry's KafkaStore records (tests/cluster/schema_registry_data.py: an
evolved subject whose first version is soft-deleted, a reference, a hard delete, CONFIG, MODE...) plus a Protobuf
subject importing another. The step runs without Spark (the arrow writer's tasks run in this process); one Spark
run checks the typed columns end to end."""

from __future__ import annotations

import importlib
import json
import struct
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kstore_cli.errors import UsageError
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.spark.decoded import DEAD_LETTERS_DIR, build_decoding, dead_letter_count
from kstore_cli.spark.export import ExportRequest
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import plan_read
from kstore_cli.spark.write import WriteJob, commit_job, filesystem, write_task
from tests.cluster import schema_registry_data as data
from tests.cluster.test_schema_registry import write_partition
from tests.cluster.test_wire_format import EVENT, SHIPMENT, TRUNCATED, UNKNOWN, V1, V2, WRONG_MAGIC

COMMON = 'syntax = "proto3";\npackage acme.common;\n\nmessage Money {\n  int64 units = 1;\n  string currency = 2;\n}\n'
PAYMENTS = ('syntax = "proto3";\npackage acme;\nimport "acme/common.proto";\n\nmessage Envelope {\n'
            '  message Payment {\n    acme.common.Money amount = 1;\n    string memo = 2;\n  }\n'
            '  Payment payment = 1;\n}\nmessage Refund {\n  string reason = 1;\n}\n')
EXTRA = [
    (data.schema_key("common-value", 1), data.schema_value("common-value", 1, 20, COMMON, schema_type="PROTOBUF")),
    (data.schema_key("payments-value", 1), data.schema_value(
        "payments-value", 1, 21, PAYMENTS, schema_type="PROTOBUF",
        references=[{"name": "acme/common.proto", "subject": "common-value", "version": 1}])),
]


def _producer_classes(tmp: Path):
    """The classes a Protobuf producer compiles from the same .proto texts (protoc --python_out)."""
    from grpc_tools import protoc

    src = tmp / "proto"
    (src / "acme").mkdir(parents=True)
    (src / "acme" / "common.proto").write_text(COMMON)
    (src / "payments.proto").write_text(PAYMENTS)
    out = tmp / "py"
    out.mkdir()
    assert protoc.main(["protoc", f"-I{src}", f"--python_out={out}", str(src / "acme" / "common.proto"),
                        str(src / "payments.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("payments_pb2")
    finally:
        sys.path.remove(str(out))


def _wire(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decoded")
    write_partition(root / "_schemas-0", data.records() + EXTRA)
    pb = _producer_classes(root)
    payment = pb.Envelope.Payment(memo="rent")
    payment.amount.units = 1200
    payment.amount.currency = "EUR"
    topics = {
        "orders": [(b"k0", V1), (b"k1", V2), (b"k2", UNKNOWN), (b"k3", WRONG_MAGIC), (b"k4", TRUNCATED),
                   (b"k5", None), (b"k6", EVENT)],
        "shipments": [(b"s0", SHIPMENT)],
        "events": [(b"e0", EVENT), (b"e1", _wire(5, b'{"kind":5}')), (b"e2", _wire(5, b'{"kind":"view"'))],
        "payments": [(b"p0", _wire(21, b"\x04\x00\x00" + payment.SerializeToString())),   # indexes [0, 0]
                     (b"p1", _wire(21, b"\x02\x02" + pb.Refund(reason="late").SerializeToString())),  # [1]
                     (b"p2", _wire(21, b"\x02\x08" + b"\x0a\x01x"))],                      # index [4]: none
    }
    for topic, records in topics.items():
        (root / f"{topic}-0").mkdir()
        log = b"".join(build_v2_batch([RecordSpec(i, data.T0 + i, k, v)]) for i, (k, v) in enumerate(records))
        (root / f"{topic}-0" / "00000000000000000000.log").write_bytes(log)
    return root


def export_without_spark(root: Path, out: Path, topics: str, **formats):
    """What the arrow writer does, the tasks run here: (main rows, dead-letter rows, dead-letter count)."""
    request = ExportRequest([str(root)], str(out), topics=topics, writer="arrow", **formats)
    plan = plan_read(ReadOptions(request.reader_options()))
    decoding = build_decoding(request.paths, sorted({s.topic for s in plan.scans}), *request.formats[:2],
                              schemas_from=request.formats[2], reader_schema=request.formats[3])
    decoding = __import__("pickle").loads(__import__("pickle").dumps(decoding))  # as executors get it
    job = WriteJob(str(out), "j1", False, False, "topic,partition", "snappy", None, "fail", decoding)
    written = [w for i, task in enumerate(plan.tasks) for w in write_task(job, i, task)]
    fs, path = filesystem(str(out))
    commit_job(fs, path, job, written)
    main = pq.read_table(str(out), partitioning="hive", ignore_prefixes=["_", "."]).to_pylist()
    dead_dir = out / DEAD_LETTERS_DIR
    dead = pq.read_table(str(dead_dir)).to_pylist() if dead_dir.exists() else []
    return sorted(main, key=lambda r: r["offset"]), sorted(dead, key=lambda r: r["offset"]), \
        dead_letter_count(written)


def test_avro_values_typed_and_dead_letters(data_dir, tmp_path) -> None:
    main, dead, count = export_without_spark(data_dir, tmp_path / "o", "orders", value_format="avro",
                                             key_format="string")
    # v1 (its version soft-deleted: still served by id) read with the latest version, v2: the reader schema.
    assert [(r["offset"], r["key"], r["value"]) for r in main] == [
        (0, "k0", {"id": 7, "amount": 2.5, "note": "\u00e9t\u00e9"}),
        (1, "k1", {"id": 8, "amount": 3.25, "note": "rush"}),
        (5, "k5", None)]
    assert count == len(dead) == 4
    reasons = {r["offset"]: (r["side"], r["reason"], r["value"]) for r in dead}
    assert reasons[2][1] == "schema id 99 is not in the schema registry's store" and reasons[2][2] == UNKNOWN
    assert "magic byte 0x01" in reasons[3][1] and reasons[3][2] == WRONG_MAGIC
    assert reasons[4][1] == "the Avro payload of schema id 2 is cut short"
    assert reasons[6][1] == "schema id 5 is a JSON schema, not AVRO"
    assert all(r["side"] == "value" and r["topic"] == "orders" and r["partition"] == 0 for r in dead)
    schema = pq.read_schema(next((tmp_path / "o" / "topic=orders" / "partition=0").glob("*.parquet")))
    assert schema.field("value").type == pa.struct([("id", pa.int64()), ("amount", pa.float64()),
                                                    ("note", pa.string())])


def test_reader_schema_file_and_reference(data_dir, tmp_path) -> None:
    reader = tmp_path / "order.avsc"
    reader.write_text(json.dumps({"type": "record", "name": "Order", "namespace": "com.acme",
                                  "fields": [{"name": "id", "type": "long"}]}))
    main, dead, _ = export_without_spark(data_dir, tmp_path / "o", "orders", value_format="avro",
                                         reader_schema=str(reader))
    assert [r["value"] for r in main] == [{"id": 7}, {"id": 8}, None]
    main, dead, _ = export_without_spark(data_dir, tmp_path / "s", "shipments", value_format="auto")
    assert [r["value"] for r in main] == [{"to": {"name": "Zo\u00eb"}, "weight": 12}] and not dead


def test_reader_schema_that_does_not_resolve(data_dir, tmp_path) -> None:
    reader = tmp_path / "bad.avsc"
    reader.write_text(json.dumps({"type": "record", "name": "Order", "namespace": "com.acme",
                                  "fields": [{"name": "sku", "type": "string"}]}))
    main, dead, _ = export_without_spark(data_dir, tmp_path / "o", "orders", value_format="avro",
                                         reader_schema=str(reader))
    assert [r["offset"] for r in main] == [5]
    assert "does not resolve against the reader schema" in {r["offset"]: r["reason"] for r in dead}[0]


def test_json_schema_validated(data_dir, tmp_path) -> None:
    main, dead, count = export_without_spark(data_dir, tmp_path / "o", "events", value_format="auto")
    assert [json.loads(r["value"]) for r in main] == [{"kind": "click"}]
    assert count == 2
    why = {r["offset"]: r["reason"] for r in dead}
    assert why[1] == "the value fails JSON Schema id 5 at kind: 5 is not of type 'string'"
    assert why[2].startswith("the JSON Schema payload of schema id 5 is not JSON text")


def test_protobuf_with_reference_and_message_indexes(data_dir, tmp_path) -> None:
    main, dead, count = export_without_spark(data_dir, tmp_path / "o", "payments", value_format="protobuf")
    assert [json.loads(r["value"]) for r in main] == [
        {"amount": {"units": "1200", "currency": "EUR"}, "memo": "rent"},  # Envelope.Payment, the nested one
        {"reason": "late"}]
    assert count == 1 and dead[0]["reason"] == "message index [4] is not a message of schema id 21"


def test_binary_is_todays_output_and_usage_errors(data_dir) -> None:
    assert build_decoding([str(data_dir)], ["orders"]) is None
    with pytest.raises(UsageError, match="no live version of nothing-value"):
        build_decoding([str(data_dir)], ["nothing"], value_format="avro")
    with pytest.raises(UsageError, match="--reader-schema"):
        build_decoding([str(data_dir)], ["orders"], reader_schema="orders-value")
    with pytest.raises(UsageError, match="arrow writer"):
        ExportRequest([str(data_dir)], "/tmp/x", writer="spark", value_format="avro").validate()


def test_spark_reads_the_typed_columns(spark, data_dir, tmp_path) -> None:
    from kstore_cli.spark.export import export_with

    summary = export_with(spark, ExportRequest([str(data_dir)], str(tmp_path / "o"), topics="orders",
                                               value_format="avro", key_format="string"))
    assert summary.records == 3 and summary.dead_letters == 4 and summary.to_dict()["dead_letters"] == 4
    rows = spark.read.parquet(str(tmp_path / "o")).orderBy("offset").collect()
    assert [(r.key, r.value.asDict() if r.value else None) for r in rows] == [
        ("k0", {"id": 7, "amount": 2.5, "note": "\u00e9t\u00e9"}), ("k1", {"id": 8, "amount": 3.25, "note": "rush"}),
        ("k5", None)]
    dead = spark.read.parquet(str(tmp_path / "o" / DEAD_LETTERS_DIR)).orderBy("offset").collect()
    assert [r.offset for r in dead] == [2, 3, 4, 6] and dead[0].value == UNKNOWN


def test_command_refuses_before_spark_and_exits_1_on_dead_letters(data_dir, tmp_path, monkeypatch, capsys) -> None:
    from kstore_cli.cli import main
    from kstore_cli.spark import export

    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(data_dir), "-o", str(tmp_path / "o"), "--topics", "orders", "--value-format",
              "avro", "--reader-schema", "no-such-value"])
    assert exit_info.value.code == 2
    assert "--reader-schema no-such-value: neither a file nor a subject" in capsys.readouterr().err

    def fake_run(request):
        assert request.formats == ("binary", "avro", None, None)
        summary = export.ExportSummary()
        summary.output, summary.records, summary.dead_letters = str(tmp_path / "o"), 3, 4
        return summary

    monkeypatch.setattr(export, "run_export", fake_run)
    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(data_dir), "-o", str(tmp_path / "o"), "--value-format", "avro", "--json"])
    assert exit_info.value.code == 1
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[0])["dead_letters"] == 4
    assert f"kstore: error: 4 records did not decode: in {tmp_path / 'o'}/_kstore_dead_letters/" in err


def test_spark_data_source_decodes_with_dead_letter_path(spark, data_dir, tmp_path) -> None:
    reader = (spark.read.format("kstore").option("topics", "orders").option("valueFormat", "avro")
              .option("keyFormat", "string"))
    with pytest.raises(Exception, match="deadLetterPath"):
        reader.load(str(data_dir)).collect()
    df = reader.option("deadLetterPath", str(tmp_path / "dead")).load(str(data_dir))
    assert df.schema["value"].dataType.simpleString() == "struct<id:bigint,amount:double,note:string>"
    assert [(r.offset, r.value.id if r.value else None) for r in df.orderBy("offset").collect()] == \
        [(0, 7), (1, 8), (5, None)]
    assert sorted(pq.read_table(str(tmp_path / "dead")).column("offset").to_pylist()) == [2, 3, 4, 6]


def test_command_with_the_arrow_engine_decodes_end_to_end(data_dir, tmp_path, capsys) -> None:
    """--engine arrow (no JVM) and decoded values together: the same rows and dead letters as the tasks give."""
    from kstore_cli.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(data_dir), "-o", str(tmp_path / "o"), "--topics", "orders", "--engine", "arrow",
              "--jobs", "2", "--value-format", "avro", "--key-format", "string", "--json"])
    assert exit_info.value.code == 1  # dead letters
    summary = json.loads(capsys.readouterr().out.splitlines()[0])
    assert summary["engine"] == "arrow" and summary["dead_letters"] == 4 and summary["records"] == 3
    main_rows = pq.read_table(str(tmp_path / "o"), partitioning="hive", ignore_prefixes=["_", "."]).to_pylist()
    assert sorted((r["offset"], r["key"], r["value"]["id"] if r["value"] else None) for r in main_rows) == \
        [(0, "k0", 7), (1, "k1", 8), (5, "k5", None)]
    dead = pq.read_table(str(tmp_path / "o" / DEAD_LETTERS_DIR)).column("offset").to_pylist()
    assert sorted(dead) == [2, 3, 4, 6]


def test_a_whole_data_dir_leaves_the_schema_store_out_unless_named(data_dir, tmp_path, capsys) -> None:
    """Decoding a whole data dir: `_schemas` (the registry's JSON, not Confluent's wire format) is left out as
    the internal topics are, and said (no dead letter of it, no false alarm); named, it is exported."""
    import shutil

    from kstore_cli.cli import main

    root = tmp_path / "data"
    for topic in ("_schemas-0", "shipments-0"):
        shutil.copytree(data_dir / topic, root / topic)
    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(root), "-o", str(tmp_path / "o"), "--engine", "arrow", "--value-format", "avro",
              "--json"])
    assert exit_info.value.code == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[0])
    assert summary["records"] == 1 and summary["dead_letters"] == 0
    assert summary["internal_partitions_left_out"] == ["_schemas-0"]
    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(root), "-o", str(tmp_path / "o2"), "--engine", "arrow", "--value-format", "avro"])
    assert exit_info.value.code == 0
    assert ("not exported: 1 partition of internal topics (_schemas); name them (--topics '_schemas') to export "
            "them") in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # named: exported, and its JSON values do not decode as Avro
        main(["spark-export", str(root), "-o", str(tmp_path / "o3"), "--engine", "arrow", "--value-format", "avro",
              "--topics", "_schemas,shipments", "--json"])
    assert exit_info.value.code == 1
    summary = json.loads(capsys.readouterr().out.splitlines()[0])
    assert summary["internal_partitions_left_out"] == [] and summary["dead_letters"] > 0
    # raw, the store is a topic like any other
    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(root), "-o", str(tmp_path / "o4"), "--engine", "arrow", "--json"])
    assert exit_info.value.code == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["internal_partitions_left_out"] == []


def test_no_store_partition_names_the_option_spark_export_has(tmp_path, capsys) -> None:
    from kstore_cli.cli import main

    (tmp_path / "orders-0").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(tmp_path / "orders-0"), "-o", str(tmp_path / "o"), "--engine", "arrow",
              "--value-format", "avro"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "name the Schema Registry's store partition with --schemas-from PARTITION_DIR" in err
    assert "--schemas-topic" not in err and err.count("\n") == 1
