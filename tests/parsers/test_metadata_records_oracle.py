"""kstore's generated KRaft metadata table against the message classes the oracle's Kafka generated.

The table comes from a newer Kafka than the oracle's (its ``KAFKA_COMMIT``); every record type the oracle's
Kafka has is compared, and the ones it predates (``NEWER_THAN_ORACLE``) are named.

tests/oracle_java/MetadataSchemas.java asks the oracle's Kafka build (one JVM for the module) for every
``MetadataRecordType``: id, enum name, version range, ``SCHEMAS[v]`` of every version (field order, wire
types, nullability, compact encodings, tagged fields by tag) and the default of every field. The same facts
are derived here from ``kstore_cli/parsers/metadata_records.py``; any disagreement fails.
"""

from __future__ import annotations

import base64
from typing import Any, Dict

import pytest

from kstore_cli.parsers.metadata import KAFKA_COMMIT, METADATA_RECORD_TYPES
from kstore_cli.parsers.metadata_versions import KAFKA_COMMIT as VERSIONS_COMMIT
from tests.parsers.metadata_factory import NEWER_THAN_ORACLE, ORACLE_RECORD_TYPES
from tests.parsers.schema_compare import check_defaults, kafka_everything, our_schemas

ORACLE_COMMIT = "1eb7644349cb07139d6a3c1ad1986979647cac99"  # ../shared/kafka-oracle/README.md


@pytest.fixture(scope="module")
def kafka_types(oracle) -> Dict[int, Dict[str, Any]]:
    return {t["id"]: t for t in kafka_everything(oracle) if "id" in t}


def test_tables_record_one_kafka_commit_newer_than_the_oracles() -> None:
    # the record table and the metadata.version table come from one Kafka (4.2 branch, 4.2.1)
    assert KAFKA_COMMIT == VERSIONS_COMMIT == "18d5ecd939c8d510fdd72d0abb1f7099659dcd58" != ORACLE_COMMIT


def test_every_record_type_id_name_and_version_range(kafka_types) -> None:
    ours = {k: (t.name, t.message.name, t.lowest_supported_version, t.highest_supported_version)
            for k, t in METADATA_RECORD_TYPES.items()}
    kafka = {k: (t["name"], t["class"], t["lowest"], t["highest"]) for k, t in kafka_types.items()}
    # the oracle's types all, the same; the newer ones exactly those named
    assert {k: v for k, v in ours.items() if k in kafka} == kafka
    assert {k: ours[k][0] for k in set(ours) - set(kafka)} == NEWER_THAN_ORACLE
    # the ones issue 15 found wrong, spelled out
    assert {k: ours[k][0] for k in (14, 15, 17, 20, 21, 23, 24, 25, 27)} == {
        14: "CLIENT_QUOTA_RECORD", 15: "PRODUCER_IDS_RECORD", 17: "BROKER_REGISTRATION_CHANGE_RECORD",
        20: "NO_OP_RECORD", 21: "ZK_MIGRATION_STATE_RECORD", 23: "BEGIN_TRANSACTION_RECORD",
        24: "END_TRANSACTION_RECORD", 25: "ABORT_TRANSACTION_RECORD", 27: "REGISTER_CONTROLLER_RECORD"}


@pytest.mark.parametrize("api_key", sorted(ORACLE_RECORD_TYPES))
def test_every_version_schema_matches_kafka(kafka_types, api_key: int) -> None:
    kafka = kafka_types.get(api_key)
    assert kafka is not None, f"api key {api_key} unknown to the oracle's Kafka"
    msg = METADATA_RECORD_TYPES[api_key].message
    ours = our_schemas(msg)
    assert len(ours) == len(kafka["schemas"])
    for version, (a, b) in enumerate(zip(ours, kafka["schemas"])):
        assert a == b, f"{msg.name} v{version}"


@pytest.mark.parametrize("api_key", sorted(ORACLE_RECORD_TYPES))
def test_every_field_default_matches_kafka(kafka_types, api_key: int) -> None:
    msg = METADATA_RECORD_TYPES[api_key].message
    check_defaults(msg, kafka_types[api_key]["defaults"])


def test_partition_change_record_tags_are_kafkas() -> None:
    """Issue 15: Directories is tag 8, ELR 6, LastKnownElr 7 (the old table had 6/7/8)."""
    fields = {f.name: f for f in METADATA_RECORD_TYPES[5].message.fields}
    assert (fields["Directories"].tag, fields["EligibleLeaderReplicas"].tag, fields["LastKnownElr"].tag) == (8, 6, 7)
    assert base64.b64decode(fields["TopicId"].default + "==") == bytes(16)
