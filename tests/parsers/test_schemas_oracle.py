"""The schemas kstore decodes besides KRaft metadata (parsers/message_schemas.py, generated from Kafka's JSON
files and put together in parsers/schemas.py and parsers/remote.py) vs the classes Kafka generated.

Every version of every message: ``__consumer_offsets`` keys/values (and the consumer protocol inside group
metadata), ``__share_group_state``, ``__transaction_state``, the KRaft control records, and
``__remote_log_metadata``; plus the record type -> (key, value) mapping of Kafka's coordinator serdes.
One JVM for the module (tests/oracle_java/MetadataSchemas.java).
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest

from kstore_cli.parsers import schemas as S
from kstore_cli.parsers.remote import REMOTE_RECORDS
from kstore_cli.parsers.schema import Message
from tests.parsers.schema_compare import check_defaults, kafka_everything, our_schemas
from tests.parsers.test_metadata_records_oracle import ORACLE_COMMIT

GROUP = "org.apache.kafka.coordinator.group.generated."
SHARE = "org.apache.kafka.coordinator.share.generated."
TXN = "org.apache.kafka.coordinator.transaction.generated."
COMMON = "org.apache.kafka.common.message."
REMOTE = "org.apache.kafka.server.log.remote.metadata.storage.generated."
GROUP_SERDE = "org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde"
SHARE_SERDE = "org.apache.kafka.coordinator.share.ShareCoordinatorRecordSerde"


def _messages() -> List[Tuple[str, Message]]:
    out: Dict[str, Message] = {}
    for package, table in ((GROUP, S.GROUP_COORDINATOR_RECORDS), (SHARE, S.SHARE_COORDINATOR_RECORDS)):
        for key, value in table.values():
            out[package + key.name] = key
            out[package + value.name] = value
    out[TXN + "TransactionLogKey"] = S.TRANSACTION_LOG_KEY
    out[TXN + "TransactionLogValue"] = S.TRANSACTION_LOG_VALUE
    for msg in (S.CONSUMER_PROTOCOL_SUBSCRIPTION, S.CONSUMER_PROTOCOL_ASSIGNMENT, S.LEADER_CHANGE_MESSAGE,
                S.SNAPSHOT_HEADER_RECORD, S.SNAPSHOT_FOOTER_RECORD, S.KRAFT_VERSION_RECORD, S.VOTERS_RECORD):
        out[COMMON + msg.name] = msg
    for _, msg in REMOTE_RECORDS.values():
        out[REMOTE + msg.name] = msg
    return sorted(out.items())


MESSAGES = _messages()
JAVA_ARGS = [name for name, _ in MESSAGES] + ["serde:" + GROUP_SERDE, "serde:" + SHARE_SERDE]


def test_tables_record_the_oracles_kafka_commit() -> None:
    assert S.KAFKA_COMMIT == ORACLE_COMMIT


@pytest.fixture(scope="module")
def kafka(oracle) -> Dict[str, Dict[str, Any]]:
    return {line.get("serde") or line["name"]: line for line in kafka_everything(oracle) if "id" not in line}


@pytest.mark.parametrize("java_class, msg", MESSAGES, ids=[m.name for _, m in MESSAGES])
def test_every_version_matches_kafka(kafka, java_class: str, msg: Message) -> None:
    k = kafka[java_class]
    assert (msg.name, msg.valid.lo, msg.valid.hi) == (k["class"], k["lowest"], k["highest"])
    for version, (a, b) in enumerate(zip(our_schemas(msg), k["schemas"])):
        assert a == b, f"{msg.name} v{version}"
    assert len(our_schemas(msg)) == len(k["schemas"])
    check_defaults(msg, k["defaults"])


@pytest.mark.parametrize("serde, package, table", [
    (GROUP_SERDE, GROUP, S.GROUP_COORDINATOR_RECORDS),
    (SHARE_SERDE, SHARE, S.SHARE_COORDINATOR_RECORDS),
])
def test_record_types_map_to_kafkas_key_and_value_classes(kafka, serde: str, package: str, table) -> None:
    ours = {str(t): [package + key.name, package + value.name] for t, (key, value) in table.items()}
    assert ours == kafka[serde]["types"]
