"""``--cluster-metadata-decoder`` and ``--remote-log-metadata-decoder`` (``AbstractApiMessageSerde`` frames).

Layout of a value::

    unsigned varint frame version (must be 1) | unsigned varint api key | unsigned varint version | message

Every failure becomes a "skipping" payload; nothing aborts.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from kstore_cli.parsers import jsonout
from kstore_cli.parsers.decoded import RAW, JsonDecoded
from kstore_cli.parsers.schema import Message, plain, read_message, to_json
from kstore_cli.parsers.metadata_records import KAFKA_COMMIT, METADATA_RECORD_TYPES
from kstore_cli.parsers.schema import MetadataRecordType
from kstore_cli.parsers.wire import JavaError, WireReader

__all__ = ["KAFKA_COMMIT", "METADATA_RECORD_TYPES", "MetadataRecordType", "record_type", "read_metadata_record",
           "ClusterMetadataMessageParser"]

#: api key -> (MetadataRecordType enum name, message): the shape ``read_frame`` takes.
METADATA_RECORDS: Dict[int, Tuple[str, Message]] = {
    key: (t.name, t.message) for key, t in METADATA_RECORD_TYPES.items()}


def record_type(api_key: int) -> MetadataRecordType:
    """``MetadataRecordType.fromId``; raises :class:`JavaError` (UnsupportedVersionException) if unknown."""
    try:
        return METADATA_RECORD_TYPES[api_key]
    except KeyError:
        raise JavaError(f"Unknown metadata id {api_key}",
                        "org.apache.kafka.common.errors.UnsupportedVersionException") from None


def _to_short(value: int) -> int:
    value &= 0xFFFF
    return value - 0x10000 if value >= 0x8000 else value


def _unsigned_int_to_short(r: WireReader, entity: str) -> int:
    try:
        value = r.unsigned_varint()
    except JavaError:
        raise JavaError(f"Error while reading {entity}") from None
    if value > 0x7FFF:
        raise JavaError(f"Value for {entity} was too large.")
    return _to_short(value)


def read_frame(records: Dict[int, Tuple[str, Message]], value: Optional[bytes]) -> Tuple[int, int, Dict[str, Any]]:
    """``AbstractApiMessageSerde.read``: (api key, version, field values). Raises :class:`JavaError`."""
    if value is None:
        raise JavaError("Error while reading frame version")  # the NPE is caught and wrapped the same way
    r = WireReader(value)
    frame = _unsigned_int_to_short(r, "frame version")
    if frame == 0:
        raise JavaError("Could not deserialize metadata record with frame version 0. Note that upgrades from "
                        "the preview release of KRaft in 2.8 to newer versions are not supported.")
    if frame != 1:
        raise JavaError(f"Could not deserialize metadata record due to unknown frame version {frame}"
                        "(only frame version 1 is supported)")
    api_key = _unsigned_int_to_short(r, "type")
    version = _unsigned_int_to_short(r, "version")
    if api_key not in records:
        raise JavaError("org.apache.kafka.common.errors.UnsupportedVersionException: "
                        f"Unknown metadata id {api_key}")
    try:
        values = read_message(records[api_key][1], r, version)
    except JavaError:
        raise JavaError(f"Failed to deserialize record with type {api_key}") from None
    if r.remaining() > 0:
        raise JavaError(f"Found {r.remaining()} byte(s) of garbage after {api_key}")
    return api_key, version, values


def read_metadata_record(value: Optional[bytes]) -> Tuple[MetadataRecordType, int, Dict[str, Any]]:
    """``MetadataRecordSerde.read`` of one record value: (record type, version, field values by schema name).

    Raises :class:`JavaError` with the text Kafka's exception would carry.
    """
    api_key, version, values = read_frame(METADATA_RECORDS, value)
    return METADATA_RECORD_TYPES[api_key], version, values


class ClusterMetadataMessageParser:
    """``--cluster-metadata-decoder``: no key; payload ``{"type":NAME,"version":V,"data":{...}}``."""

    skipped = 0

    def _tree(self, offset: int, value: Optional[bytes]) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        try:
            t, version, values = read_metadata_record(value)
            return {"type": t.name, "version": version, "data": to_json(t.message, values, version)}, None
        except JavaError as e:
            return None, f"Error at {offset}, skipping. {e.text}"

    def parse(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[str]]:
        tree, skipped = self._tree(offset, value)
        if tree is None:
            self.skipped += 1
            return None, skipped
        return None, jsonout.dumps(tree)

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        """The value as ``{"type": NAME, "version": V, "data": {...}}``; the key (Kafka ignores it) stays raw."""
        tree, skipped = self._tree(offset, value)
        if tree is None:
            return JsonDecoded(RAW, RAW, skipped)
        return JsonDecoded(RAW, plain(tree))
