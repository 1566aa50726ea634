"""kstore's generated KRaft metadata table against the message classes Kafka generated from the same schemas.

tests/oracle_java/MetadataSchemas.java asks the oracle's Kafka build (one JVM for the module) for every
``MetadataRecordType``: id, enum name, version range, ``SCHEMAS[v]`` of every version (field order, wire
types, nullability, compact encodings, tagged fields by tag) and the default of every field. The same facts
are derived here from ``kstore_cli/parsers/metadata_records.py``; any disagreement fails.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

from kstore_cli.parsers.generate_tables import to_snake_case
from kstore_cli.parsers.metadata import KAFKA_COMMIT, METADATA_RECORD_TYPES
from kstore_cli.parsers.schema import Field, Message

JAVA = Path(__file__).resolve().parent.parent / "oracle_java" / "MetadataSchemas.java"
ORACLE_COMMIT = "1eb7644349cb07139d6a3c1ad1986979647cac99"  # ../shared/kafka-oracle/README.md

_FIXED = {"bool": "BOOLEAN", "int8": "INT8", "int16": "INT16", "uint16": "UINT16", "int32": "INT32",
          "uint32": "UINT32", "int64": "INT64", "uuid": "UUID", "float64": "FLOAT64"}


@pytest.fixture(scope="module")
def kafka_types(oracle) -> Dict[int, Dict[str, Any]]:
    classpath, _ = oracle._env_and_classpath()
    proc = subprocess.run(["java", "-cp", classpath, str(JAVA)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {t["id"]: t for t in lines}


def _type_json(f: Field, version: int, flexible: bool, nullable: bool) -> Any:
    """What SchemaGenerator.fieldTypeToSchemaType produces for a field at a version, as the helper prints it."""
    if f.element is not None:
        if f.is_struct:
            element = _struct_json(f.fields, version, flexible)
        else:
            element = _type_json(Field("element", f.element), version, flexible, False)
        return {"array": element, "compact": flexible, "nullable": nullable}
    if f.is_struct:
        return _struct_json(f.fields, version, flexible)
    if f.type in ("string", "bytes"):
        return ("COMPACT_" if flexible else "") + ("NULLABLE_" if nullable else "") + f.type.upper()
    return _FIXED[f.type]


def _struct_json(fields: List[Field], version: int, flexible: bool) -> Dict[str, Any]:
    out = [[to_snake_case(f.name), _type_json(f, version, flexible, version in f.nullable)]
           for f in fields if version in f.versions and version not in f.tagged]
    if flexible:
        tagged = sorted([f.tag, to_snake_case(f.name), _type_json(f, version, True, version in f.nullable)]
                        for f in fields if version in f.versions and version in f.tagged)
        out.append(["_tagged_fields", {"tagged": tagged}])
    return {"struct": out}


def _schemas(msg: Message) -> List[Any]:
    return [_struct_json(msg.fields, v, v in msg.flexible) if v in msg.valid else None
            for v in range(msg.valid.hi + 1)]


def _default_json(f: Field) -> Any:
    d = f.default
    if isinstance(d, (bytes, bytearray)):
        return {"bytes": len(d)}
    if f.is_struct and f.element is None and d is not None:
        return "<" + f.type + ">"
    return d


def _defaults(fields: List[Field], struct_name: str, out: Dict[str, Dict[str, Any]]) -> None:
    out[struct_name] = {f.json_name: _default_json(f) for f in fields}
    for f in fields:
        if f.is_struct:
            _defaults(f.fields, f.element or f.type, out)


def test_table_records_the_oracles_kafka_commit() -> None:
    assert KAFKA_COMMIT == ORACLE_COMMIT


def test_every_record_type_id_name_and_version_range(kafka_types) -> None:
    ours = {k: (t.name, t.message.name, t.lowest_supported_version, t.highest_supported_version)
            for k, t in METADATA_RECORD_TYPES.items()}
    kafka = {k: (t["name"], t["class"], t["lowest"], t["highest"]) for k, t in kafka_types.items()}
    assert ours == kafka
    # the ones issue 15 found wrong, spelled out
    assert {k: ours[k][0] for k in (14, 15, 17, 20, 21, 23, 24, 25, 27)} == {
        14: "CLIENT_QUOTA_RECORD", 15: "PRODUCER_IDS_RECORD", 17: "BROKER_REGISTRATION_CHANGE_RECORD",
        20: "NO_OP_RECORD", 21: "ZK_MIGRATION_STATE_RECORD", 23: "BEGIN_TRANSACTION_RECORD",
        24: "END_TRANSACTION_RECORD", 25: "ABORT_TRANSACTION_RECORD", 27: "REGISTER_CONTROLLER_RECORD"}


@pytest.mark.parametrize("api_key", sorted(METADATA_RECORD_TYPES))
def test_every_version_schema_matches_kafka(kafka_types, api_key: int) -> None:
    kafka = kafka_types.get(api_key)
    assert kafka is not None, f"api key {api_key} unknown to the oracle's Kafka"
    msg = METADATA_RECORD_TYPES[api_key].message
    ours = _schemas(msg)
    assert len(ours) == len(kafka["schemas"])
    for version, (a, b) in enumerate(zip(ours, kafka["schemas"])):
        assert a == b, f"{msg.name} v{version}"


@pytest.mark.parametrize("api_key", sorted(METADATA_RECORD_TYPES))
def test_every_field_default_matches_kafka(kafka_types, api_key: int) -> None:
    msg = METADATA_RECORD_TYPES[api_key].message
    ours: Dict[str, Dict[str, Any]] = {}
    _defaults(msg.fields, msg.name, ours)
    kafka = kafka_types[api_key]["defaults"]
    for struct_name, fields in ours.items():
        assert struct_name in kafka, f"{struct_name} not a class of {msg.name}"
        got = {}
        for name, value in kafka[struct_name].items():
            if name in fields:
                got[name] = value
        # the uuid default: Uuid.ZERO_UUID.toString()
        assert fields == got, struct_name


def test_partition_change_record_tags_are_kafkas() -> None:
    """Issue 15: Directories is tag 8, ELR 6, LastKnownElr 7 (the old table had 6/7/8)."""
    fields = {f.name: f for f in METADATA_RECORD_TYPES[5].message.fields}
    assert (fields["Directories"].tag, fields["EligibleLeaderReplicas"].tag, fields["LastKnownElr"].tag) == (8, 6, 7)
    assert base64.b64decode(fields["TopicId"].default + "==") == bytes(16)
