"""``--remote-log-metadata-decoder``: ``__remote_log_metadata`` records (``RemoteLogMetadataSerde``).

Same frame as cluster metadata (see ``metadata.py``); the payload is the Java ``toString()`` of the object
``RemoteLogMetadataSerde`` builds (its transforms' and constructors' checks included: what they throw
becomes Kafka's "skipping" text).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from kstore_cli.parsers.metadata import read_frame
from kstore_cli.parsers.decoded import RAW, JsonDecoded
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
#: RemoteLogSegmentState ids
_SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED", 2: "DELETE_SEGMENT_STARTED",
                   3: "DELETE_SEGMENT_FINISHED"}


def _topic_id_partition(tip: dict) -> str:
    """``TopicIdPartition.toString()``: ``<topic id>:<topic>-<partition>``."""
    return f"{tip['Id']}:{tip['Name']}-{tip['Partition']}"


def _segment_id(entry: dict) -> str:
    """``RemoteLogSegmentId.toString()``."""
    return f"RemoteLogSegmentId{{topicIdPartition={_topic_id_partition(entry['TopicIdPartition'])}, id={entry['Id']}}}"


def _custom_metadata(data: Optional[bytes]) -> str:
    """``Optional.ofNullable(bytes).map(CustomMetadata::new).toString()``."""
    return "Optional.empty" if data is None else f"Optional[CustomMetadata{{{len(data)} bytes}}]"


def _leader_epochs(entries: list) -> str:
    """The entries put into a HashMap (the last of equal epochs wins), then a TreeMap's ``toString()``.

    Raises what the constructors throw for an empty map."""
    epochs = {}
    for e in entries:
        epochs[e["LeaderEpoch"]] = e["Offset"]
    if not epochs:
        raise JavaError("segmentLeaderEpochs can not be null or empty", "java.lang.IllegalArgumentException")
    return "{" + ", ".join(f"{k}={epochs[k]}" for k in sorted(epochs)) + "}"


def _segment_state(state_id: int, message: str = "state can not be null") -> str:
    """``RemoteLogSegmentState.forId``, then ``Objects.requireNonNull(state, message)``."""
    try:
        return _SEGMENT_STATES[state_id]
    except KeyError:
        raise JavaError(message, "java.lang.NullPointerException") from None


def _check_offsets(start: int, end: int) -> None:
    """``RemoteLogSegmentMetadata``'s constructor checks."""
    if start < 0:
        raise JavaError(f"Unexpected start offset = {start}. StartOffset for a remote segment cannot be negative",
                        "java.lang.IllegalArgumentException")
    if end < start:
        raise JavaError(f"Unexpected end offset = {end}. EndOffset for a remote segment cannot be less than "
                        f"startOffset = {start}", "java.lang.IllegalArgumentException")


def to_string(api_key: int, v: dict) -> str:
    """``RemoteLogMetadataSerde.deserialize(bytes).toString()`` for a decoded record.

    Raises :class:`JavaError` with the message of the exception Kafka's transforms and constructors throw.
    """
    if api_key == 0:  # RemoteLogSegmentMetadataTransform: the COPY_SEGMENT_STARTED object, then the update
        _check_offsets(v["StartOffset"], v["EndOffset"])
        epochs = _leader_epochs(v["SegmentLeaderEpochs"])
        state = _segment_state(v["RemoteLogSegmentState"])
        return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id(v['RemoteLogSegmentId'])}, "
                f"startOffset={v['StartOffset']}, endOffset={v['EndOffset']}, brokerId={v['BrokerId']}, "
                f"maxTimestampMs={v['MaxTimestampMs']}, eventTimestampMs={v['EventTimestampMs']}, "
                f"segmentLeaderEpochs={epochs}, segmentSizeInBytes={v['SegmentSizeInBytes']}, "
                f"customMetadata={_custom_metadata(v['CustomMetadata'])}, state={state}}}")
    if api_key == 1:
        state = _segment_state(v["RemoteLogSegmentState"])
        return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_segment_id(v['RemoteLogSegmentId'])}, "
                f"customMetadata={_custom_metadata(v['CustomMetadata'])}, state={state}, "
                f"eventTimestampMs={v['EventTimestampMs']}, brokerId={v['BrokerId']}}}")
    if api_key == 2:
        state = _DELETE_STATES.get(v["RemotePartitionDeleteState"])
        if state is None:
            raise JavaError(None, "java.lang.NullPointerException")  # Objects.requireNonNull(state)
        return (f"RemotePartitionDeleteMetadata{{topicPartition={_topic_id_partition(v['TopicIdPartition'])}, "
                f"state={state}, eventTimestampMs={v['EventTimestampMs']}, brokerId={v['BrokerId']}}}")
    # 3: RemoteLogSegmentMetadataSnapshot: state checked before the epochs, offsets not checked
    state = _segment_state(v["RemoteLogSegmentState"])
    epochs = _leader_epochs(v["SegmentLeaderEpochs"])
    return (f"RemoteLogSegmentMetadataSnapshot{{segmentId={v['SegmentId']}, startOffset={v['StartOffset']}, "
            f"endOffset={v['EndOffset']}, maxTimestampMs={v['MaxTimestampMs']}, segmentLeaderEpochs={epochs}, "
            f"segmentSizeInBytes={v['SegmentSizeInBytes']}, customMetadata={_custom_metadata(v['CustomMetadata'])}, "
            f"state={state}}}")


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
            return None, to_string(api_key, v)
        except JavaError as e:
            self.skipped += 1
            return None, f"Error at offset {offset}, skipping. {e.text}"

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
