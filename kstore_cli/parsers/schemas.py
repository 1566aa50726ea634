"""The message schemas the record parsers use, by the names the parsers know them by.

The schemas themselves are generated from Kafka's message JSON files (``message_schemas.py``,
``metadata_records.py``; see ``generate_tables.py``). What is kstore's here is only how they are put
together, as Kafka's serdes do:

* a coordinator key's versions ARE its record types (``GroupCoordinatorRecordSerde.apiMessageKeyFor``):
  ``OffsetCommitKey`` (versions 0-1) is record types 0 and 1, and each ``XKey`` goes with ``XValue``;
* ``__remote_log_metadata`` records are framed by api key (``RemoteLogMetadataSerde``).
"""

from __future__ import annotations

from typing import Dict, Tuple

from kstore_cli.parsers.message_schemas import (
    CLIENTS,
    GROUP_COORDINATOR,
    KAFKA_COMMIT,
    REMOTE_LOG_METADATA,
    SHARE_COORDINATOR,
    TRANSACTION_COORDINATOR,
)
from kstore_cli.parsers.schema import Message

__all__ = [
    "KAFKA_COMMIT", "GROUP_COORDINATOR_RECORDS", "SHARE_COORDINATOR_RECORDS", "GROUP_METADATA_VALUE",
    "CONSUMER_PROTOCOL_SUBSCRIPTION", "CONSUMER_PROTOCOL_ASSIGNMENT", "TRANSACTION_LOG_KEY",
    "TRANSACTION_LOG_VALUE", "LEADER_CHANGE_MESSAGE", "SNAPSHOT_HEADER_RECORD", "SNAPSHOT_FOOTER_RECORD",
    "KRAFT_VERSION_RECORD", "VOTERS_RECORD", "REMOTE_LOG_METADATA",
]


def coordinator_records(messages: Dict[str, Message]) -> Dict[int, Tuple[Message, Message]]:
    """record type -> (key message, value message): every ``XKey``'s versions, paired with ``XValue``."""
    records: Dict[int, Tuple[Message, Message]] = {}
    for name, key in messages.items():
        if not name.endswith("Key"):
            continue
        value = messages[name[:-3] + "Value"]
        for record_type in range(key.valid.lo, key.valid.hi + 1):
            if record_type in records:
                raise ValueError(f"record type {record_type} claimed twice ({name})")  # a table bug
            records[record_type] = (key, value)
    return dict(sorted(records.items()))


#: __consumer_offsets: record type -> (key, value)
GROUP_COORDINATOR_RECORDS = coordinator_records(GROUP_COORDINATOR)
#: __share_group_state: record type -> (key, value)
SHARE_COORDINATOR_RECORDS = coordinator_records(SHARE_COORDINATOR)
GROUP_METADATA_VALUE = GROUP_COORDINATOR["GroupMetadataValue"]

CONSUMER_PROTOCOL_SUBSCRIPTION = CLIENTS["ConsumerProtocolSubscription"]
CONSUMER_PROTOCOL_ASSIGNMENT = CLIENTS["ConsumerProtocolAssignment"]

TRANSACTION_LOG_KEY = TRANSACTION_COORDINATOR["TransactionLogKey"]
TRANSACTION_LOG_VALUE = TRANSACTION_COORDINATOR["TransactionLogValue"]

# KRaft control records
LEADER_CHANGE_MESSAGE = CLIENTS["LeaderChangeMessage"]
SNAPSHOT_HEADER_RECORD = CLIENTS["SnapshotHeaderRecord"]
SNAPSHOT_FOOTER_RECORD = CLIENTS["SnapshotFooterRecord"]
KRAFT_VERSION_RECORD = CLIENTS["KRaftVersionRecord"]
VOTERS_RECORD = CLIENTS["VotersRecord"]
