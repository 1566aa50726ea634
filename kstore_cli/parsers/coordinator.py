"""``--offsets-decoder`` and ``--share-group-state-decoder``: coordinator records as JSON.

Record layout (``CoordinatorRecordSerde``)::

    key   = int16 record type | key message written at version = record type
    value = int16 value version | value message at that version      (null value = tombstone)
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from kstore_cli.errors import RecordParseError
from kstore_cli.parsers import jsonout
from kstore_cli.parsers.decoded import RAW, JsonDecoded
from kstore_cli.parsers.schema import Message, plain, read_message, to_json
from kstore_cli.parsers.schemas import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    GROUP_COORDINATOR_RECORDS,
    GROUP_METADATA_VALUE,
    SHARE_COORDINATOR_RECORDS,
)
from kstore_cli.parsers.wire import JavaError, WireReader


class _UnknownRecordType(Exception):
    def __init__(self, record_type: int) -> None:
        super().__init__(record_type)
        self.record_type = record_type


def _read_version(r: WireReader, name: str) -> int:
    try:
        return r.int16()
    except JavaError:
        raise JavaError(f"Could not read version from {name}'s buffer.") from None


def _read(msg: Message, r: WireReader, version: int, name: str) -> Dict[str, Any]:
    try:
        return read_message(msg, r, version)
    except JavaError as e:
        raise JavaError(f"Could not read record with version {version} from {name}'s buffer "
                        f"due to: {e.text}.") from None


def deserialize(records: Dict[int, Tuple[Message, Message]], key: bytes, value: Optional[bytes]):
    """``CoordinatorRecordSerde.deserialize``: (type, key message, key values, value version, value message, values)."""
    kr = WireReader(key)
    record_type = _read_version(kr, "key")
    if record_type not in records:
        raise _UnknownRecordType(record_type)
    key_msg, value_msg = records[record_type]
    key_values = _read(key_msg, kr, record_type, "key")
    if value is None:
        return record_type, key_msg, key_values, None, value_msg, None
    vr = WireReader(value)
    value_version = _read_version(vr, "value")
    values = _read(value_msg, vr, value_version, "value")
    return record_type, key_msg, key_values, value_version, value_msg, values


def consumer_protocol(msg: Message, raw: bytes) -> Dict[str, Any]:
    """A classic consumer group member's subscription or assignment bytes as ``ConsumerProtocol``
    deserializes them: int16 version (a newer one read as the highest known, checkAssignmentVersion /
    checkSubscriptionVersion), then the message. Raises :class:`JavaError`."""
    r = WireReader(raw)
    version = r.int16()
    if version < msg.valid.lo:
        raise JavaError(f"Unsupported {'assignment' if msg is CONSUMER_PROTOCOL_ASSIGNMENT else 'subscription'} "
                        f"version: {version}")
    return read_message(msg, r, min(version, msg.valid.hi))


def _expand_consumer_protocol(tree: Dict[str, Any]) -> None:
    """Replace members' subscription/assignment bytes by their JSON where they decode (else keep them)."""
    if tree.get("protocolType") != "consumer":
        return
    members = tree.get("members")
    if not isinstance(members, list):
        return
    for member in members:
        for field, msg in (("subscription", CONSUMER_PROTOCOL_SUBSCRIPTION),
                           ("assignment", CONSUMER_PROTOCOL_ASSIGNMENT)):
            raw = member.get(field)
            if not isinstance(raw, bytes):
                continue
            try:
                r = WireReader(raw)
                version = r.int16()
                member[field] = to_json(msg, read_message(msg, r, version), version)
            except JavaError:
                pass  # Kafka swallows the RuntimeException and keeps the original bytes


class _CoordinatorParser:
    """Shared logic of Kafka's ``OffsetsMessageParser`` and ``ShareGroupStateMessageParser``."""

    records: Dict[int, Tuple[Message, Message]] = {}
    skipped = 0
    topic_words = ""
    value_label = "version"

    def _trees(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Any, Any, Optional[str]]:
        """(key tree, value tree or None for a tombstone, skip text or None), as Kafka's parser builds them."""
        if key is None:
            raise RecordParseError(f"Failed to decode message at offset {offset} using {self.topic_words} "
                                   "decoder (message had a missing key)")
        try:
            record_type, key_msg, key_values, value_version, value_msg, values = \
                deserialize(self.records, key, value)
            key_tree = {"type": str(record_type), "data": to_json(key_msg, key_values, record_type)}
            if values is None:
                return key_tree, None, None
            tree = to_json(value_msg, values, value_version)
            if value_msg is GROUP_METADATA_VALUE:
                _expand_consumer_protocol(tree)
            return key_tree, {self.value_label: str(value_version), "data": tree}, None
        except _UnknownRecordType as e:
            return None, None, f"Unknown record type {e.record_type} at offset {offset}, skipping."
        except JavaError as e:
            return None, None, f"Error at offset {offset}, skipping. {e.text}"

    def parse(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[str]]:
        key_tree, value_tree, skipped = self._trees(offset, key, value)
        if skipped is not None:
            self.skipped += 1
            return skipped, None
        return jsonout.dumps(key_tree), "<DELETE>" if value_tree is None else jsonout.dumps(value_tree)

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        key_tree, value_tree, skipped = self._trees(offset, key, value)
        if skipped is not None:
            return JsonDecoded(RAW, RAW, skipped)
        return JsonDecoded(plain(key_tree), plain(value_tree))


class OffsetsMessageParser(_CoordinatorParser):
    """``--offsets-decoder`` (``__consumer_offsets``)."""

    records = GROUP_COORDINATOR_RECORDS
    topic_words = "offset topic"
    value_label = "version"


class ShareGroupStateMessageParser(_CoordinatorParser):
    """``--share-group-state-decoder`` (``__share_group_state``); its values are labelled ``type`` too."""

    records = SHARE_COORDINATOR_RECORDS
    topic_words = "share group state topic"
    value_label = "type"
