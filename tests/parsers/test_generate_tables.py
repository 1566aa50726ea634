"""The generator of kstore's message tables, on small schema files written like Kafka's."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstore_cli.parsers import generate_tables as gen
from kstore_cli.parsers.schema import read_message

COMMIT = "0123456789abcdef0123456789abcdef01234567"

SPEC = """// Licensed to the Apache Software Foundation (a comment line, as in Kafka's files)
{
  "apiKey": 7,
  "type": "metadata",
  "name": "SampleThingRecord", // a trailing comment, and "// inside a string" below
  "validVersions": "0-1",
  "flexibleVersions": "0+",
  "fields": [
    { "name": "Id", "type": "int32", "versions": "0+", "default": "-1", "about": "a // not a comment" },
    { "name": "Things", "type": "[]Thing", "versions": "0+" },
    { "name": "Note", "type": "string", "nullableVersions": "1+", "default": "null",
      "taggedVersions": "1+", "tag": 0, "about": "no versions: FieldSpec takes the taggedVersions" }
  ],
  "commonStructs": [
    { "name": "Thing", "versions": "0+", "fields": [
      { "name": "Name", "type": "string", "versions": "0+", "mapKey": true }
    ]}
  ]
}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_generated_module_decodes_what_the_schema_describes(tmp_path: Path) -> None:
    _write(tmp_path, "SampleThingRecord.json", SPEC)
    _write(tmp_path, "OtherMessage.json", '{"apiKey": 1, "type": "request", "name": "X", "validVersions": "0", '
                                          '"flexibleVersions": "none", "fields": []}')
    out = tmp_path / "table.py"
    assert gen.main([str(tmp_path), "--commit", COMMIT, "-o", str(out)]) == 0
    namespace: dict = {}
    exec(compile(out.read_text(), str(out), "exec"), namespace)
    assert namespace["KAFKA_COMMIT"] == COMMIT
    types = namespace["METADATA_RECORD_TYPES"]
    assert list(types) == [7]  # only "type": "metadata" files
    t = types[7]
    assert (t.id, t.name, t.lowest_supported_version, t.highest_supported_version) == (7, "SAMPLE_THING_RECORD", 0, 1)
    things = t.message.fields[1]
    assert things.fields[0].name == "Name" and things.fields[0].map_key  # from commonStructs
    # v1: Id, one Thing "ab", no top-level tagged field except Note (tag 0) = "hi"
    data = bytes([0, 0, 0, 5, 2, 3]) + b"ab" + bytes([0, 1, 0, 3, 3]) + b"hi"
    assert read_message(t.message, data, 1) == {"Id": 5, "Things": [{"Name": "ab"}], "Note": "hi"}
    assert read_message(t.message, bytes([0, 0, 0, 5, 1, 0]), 0) == {"Id": 5, "Things": [], "Note": None}


@pytest.mark.parametrize("text, why", [
    (SPEC.replace('"about": "a // not a comment"', '"zeroCopy": true, "flexibleVersions": "1+"'),
     "unsupported field keys ['flexibleVersions']"),
    (SPEC.replace('"type": "[]Thing"', '"type": "[]Missing"'), "struct type Missing has no fields"),
    (SPEC.replace('"name": "Id", "type": "int32", "versions": "0+",', '"name": "Id", "type": "int32",'),
     "SampleThingRecord.Id: no versions"),
    (SPEC.replace('"validVersions"', '"newKey": 1, "validVersions"'), "unsupported message keys ['newKey']"),
])
def test_generator_refuses_what_it_cannot_represent(tmp_path: Path, text: str, why: str, capsys) -> None:
    _write(tmp_path, "A.json", text)
    assert gen.main([str(tmp_path), "--commit", COMMIT, "-o", str(tmp_path / "t.py")]) == 1
    assert why in capsys.readouterr().err
    assert not (tmp_path / "t.py").exists()


def test_generator_refuses_two_records_with_one_api_key(tmp_path: Path, capsys) -> None:
    _write(tmp_path, "A.json", SPEC)
    _write(tmp_path, "B.json", SPEC.replace("SampleThingRecord", "OtherRecord"))
    assert gen.main([str(tmp_path), "--commit", COMMIT, "-o", str(tmp_path / "t.py")]) == 1
    assert "api key 7 claimed by" in capsys.readouterr().err


def test_snake_case_is_kafkas() -> None:
    assert gen.to_snake_case("ZkMigrationStateRecord").upper() == "ZK_MIGRATION_STATE_RECORD"
    assert gen.to_snake_case("IsrChangeRecord") == "isr_change_record"
    assert gen.to_snake_case("EligibleLeaderReplicas") == "eligible_leader_replicas"
