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


NEWER_MV = """public enum MetadataVersion {
    IBP_3_0_IV0(-1, "3.0", "IV0"),
    IBP_3_3_IV3(7, "3.3", "IV3", true),
    // a comment between constants
    IBP_4_1_IV0(26, "4.1", "IV0", false),
    IBP_4_2_IV1(29, "4.2", "IV1", false),
    IBP_4_3_IV0(30, "4.3", "IV0", false);
    public static final MetadataVersion MINIMUM_VERSION = IBP_3_3_IV3;
    public static final MetadataVersion LATEST_PRODUCTION = IBP_4_2_IV1;
}
"""
OLDER_MV = """public enum MetadataVersion {
    IBP_3_0_IV1(1, "3.0", "IV1", true),
    IBP_3_3_IV3(7, "3.3", "IV3", true);
    public static final MetadataVersion LATEST_PRODUCTION = IBP_3_3_IV3;
}
"""


def test_metadata_versions_from_kafkas_enum_with_the_dropped_levels_from_an_older_one(tmp_path: Path) -> None:
    java = Path(gen.METADATA_VERSION_JAVA)
    for name, text in (("new", NEWER_MV), ("old", OLDER_MV)):
        (tmp_path / name / java.parent).mkdir(parents=True)
        (tmp_path / name / java).write_text(text, encoding="utf-8")
        (tmp_path / name / gen.METADATA_SCHEMA_DIR).mkdir(parents=True)
        _write(tmp_path / name / gen.METADATA_SCHEMA_DIR, "SampleThingRecord.json", SPEC)
    out = tmp_path / "versions.py"
    assert gen.main([str(tmp_path / "new"), "--commit", COMMIT, "--metadata-only", "-o", str(tmp_path / "t.py"),
                     "--versions-output", str(out), "--older-kafka", str(tmp_path / "old"),
                     "--older-commit", "f" * 40]) == 0
    assert not (tmp_path / "message_schemas.py").exists()
    namespace: dict = {}
    exec(compile(out.read_text(), str(out), "exec"), namespace)
    assert namespace["METADATA_VERSIONS"] == {1: "3.0-IV1", 7: "3.3-IV3", 26: "4.1-IV0", 29: "4.2-IV1", 30: "4.3-IV0"}
    assert (namespace["LATEST_PRODUCTION_LEVEL"], namespace["MINIMUM_LEVEL"], namespace["KAFKA_COMMIT"]) == (29, 7, COMMIT)
    assert "(level 1, which that Kafka no longer lists, from commit " + "f" * 40 in out.read_text()
    # a level whose name differs between the two is a contradiction, not something to pick from
    (tmp_path / "old" / java).write_text(OLDER_MV.replace('"3.3", "IV3"', '"3.4", "IV0"'), encoding="utf-8")
    assert gen.main([str(tmp_path / "new"), "--commit", COMMIT, "--metadata-only", "-o", str(tmp_path / "t.py"),
                     "--versions-output", str(out), "--older-kafka", str(tmp_path / "old")]) == 1


def test_kstores_metadata_versions_name_kafkas_levels() -> None:
    from kstore_cli.parsers.metadata_versions import LATEST_PRODUCTION_LEVEL, METADATA_VERSIONS, MINIMUM_LEVEL

    assert sorted(METADATA_VERSIONS) == list(range(1, 31))
    assert (METADATA_VERSIONS[25], METADATA_VERSIONS[27], METADATA_VERSIONS[29]) == ("4.0-IV3", "4.1-IV1", "4.2-IV1")
    assert (LATEST_PRODUCTION_LEVEL, MINIMUM_LEVEL) == (29, 7)
