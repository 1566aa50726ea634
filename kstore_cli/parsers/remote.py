"""``--remote-log-metadata-decoder``: ``__remote_log_metadata`` records (``RemoteLogMetadataSerde``).

Same frame as cluster metadata (see ``metadata.py``); the payload is the Java ``toString()`` of the
deserialized object. Only ``RemotePartitionDeleteMetadata`` has its ``toString`` reproduced so far; the
other three record types raise :class:`RecordParseError` rather than print something Kafka would not.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from kstore_cli.errors import RecordParseError
from kstore_cli.parsers.metadata import read_frame
from kstore_cli.parsers import RAW, JsonDecoded
from kstore_cli.parsers.schema import Message, plain, to_json
from kstore_cli.parsers.schemas import REMOTE_LOG_METADATA
from kstore_cli.parsers.wire import JavaError

#: Java class each record becomes (``RemoteLogMetadataTransform``s), by api key
_JAVA_CLASSES = {0: "RemoteLogSegmentMetadata", 1: "RemoteLogSegmentMetadataUpdate",
                 2: "RemotePartitionDeleteMetadata", 3: "RemoteLogSegmentMetadataSnapshot"}

#: api key -> (Java class the record becomes, message); the messages are generated from Kafka's schemas.
REMOTE_RECORDS: Dict[int, Tuple[str, Message]] = {
    key: (_JAVA_CLASSES[key], msg) for key, msg in REMOTE_LOG_METADATA.items()}

_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED", 2: "DELETE_PARTITION_FINISHED"}


def _topic_id_partition(tip: dict) -> str:
    """``TopicIdPartition.toString()``: ``<topic id>:<topic>-<partition>``."""
    return f"{tip['Id']}:{tip['Name']}-{tip['Partition']}"


class RemoteLogMetadataMessageParser:
    """``--remote-log-metadata-decoder``: no key; payload = the object's ``toString()``."""

    skipped = 0

    def parse(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[str]]:
        if value is None:
            self.skipped += 1
            return None, (f"Error at offset {offset}, skipping. Cannot invoke \"java.nio.ByteBuffer.remaining()\" "
                          "because the return value of \"org.apache.kafka.common.record.Record.value()\" is null")
        try:
            api_key, _, v = read_frame(REMOTE_RECORDS, value)
        except JavaError as e:
            self.skipped += 1
            return None, f"Error at offset {offset}, skipping. {e.text}"
        java_class = REMOTE_RECORDS[api_key][0]
        if api_key == 2:
            state = _DELETE_STATES.get(v["RemotePartitionDeleteState"], "null")
            return None, (f"RemotePartitionDeleteMetadata{{topicPartition={_topic_id_partition(v['TopicIdPartition'])}, "
                          f"state={state}, eventTimestampMs={v['EventTimestampMs']}, brokerId={v['BrokerId']}}}")
        raise RecordParseError(f"offset {offset}: kstore cannot yet print {java_class}.toString() "
                               "(--remote-log-metadata-decoder supports RemotePartitionDeleteMetadata only)")

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        """The value as ``{"type": JAVA_CLASS, "version": V, "data": {...}}`` (every record type, as the
        record's JSON rather than Java's ``toString``); the key (Kafka ignores it) stays raw."""
        if value is None:
            return JsonDecoded(RAW, RAW, self.parse(offset, key, value)[1])
        try:
            api_key, version, v = read_frame(REMOTE_RECORDS, value)
        except JavaError as e:
            return JsonDecoded(RAW, RAW, f"Error at offset {offset}, skipping. {e.text}")
        java_class, msg = REMOTE_RECORDS[api_key]
        return JsonDecoded(RAW, {"type": java_class, "version": version, "data": plain(to_json(msg, v, version))})
