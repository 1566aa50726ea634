"""Control records as DumpLogSegments prints them (``ControlRecordType``, ``EndTransactionMarker``,
``ControlRecordUtils`` and the KRaft records' JsonConverters).

EndTxnMarker value layout: ``int16 version (>= 0) | int32 coordinator epoch`` (6 bytes at least).
KRaft control values are generated messages read at their current version (0); their JSON is written at
the version stored in their own ``Version`` field, as Kafka does.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Optional, Tuple

from kstore_cli.errors import RecordParseError
from kstore_cli.parsers import jsonout
from kstore_cli.parsers.schema import Message, plain, read_message, to_json
from kstore_cli.parsers.schemas import (
    KRAFT_VERSION_RECORD,
    LEADER_CHANGE_MESSAGE,
    SNAPSHOT_FOOTER_RECORD,
    SNAPSHOT_HEADER_RECORD,
    VOTERS_RECORD,
)
from kstore_cli.parsers.wire import JavaError

_END_TXN = struct.Struct(">hi")  # version, coordinator epoch

CONTROL_TYPES: Dict[int, str] = {
    0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS",
}
#: type id -> (label DumpLogSegments prints, message)
_KRAFT: Dict[int, Tuple[str, Message]] = {
    3: ("SnapshotHeader", SNAPSHOT_HEADER_RECORD),
    4: ("SnapshotFooter", SNAPSHOT_FOOTER_RECORD),
    5: ("KRaftVersion", KRAFT_VERSION_RECORD),
    6: ("KRaftVoters", VOTERS_RECORD),
}


def control_type_name(type_id: int) -> str:
    """``ControlRecordType.fromTypeId(id).name()`` (``UNKNOWN`` for ids Kafka does not know)."""
    return CONTROL_TYPES.get(type_id, "UNKNOWN")


def end_txn_marker(value: Optional[bytes]) -> Tuple[int, int]:
    """``EndTransactionMarker.deserializeValue``: (version, coordinator epoch)."""
    if value is None:
        raise RecordParseError('Cannot invoke "java.nio.ByteBuffer.remaining()" because "value" is null')
    if len(value) < _END_TXN.size:
        raise RecordParseError("Invalid value size found for end transaction marker. Must have at least "
                               f"{_END_TXN.size} bytes, but found only {len(value)}")
    version, epoch = _END_TXN.unpack_from(value)
    if version < 0:
        raise RecordParseError(f"Invalid version found for end transaction marker: {version}. "
                               "May indicate data corruption")
    return version, epoch


def _kraft_tree(msg: Message, value: Optional[bytes]) -> Dict[str, Any]:
    if value is None:
        raise RecordParseError(f"{msg.name} record has a null value")
    try:
        values = read_message(msg, value, 0)
        return to_json(msg, values, values["Version"])
    except JavaError as e:
        raise RecordParseError(e.text) from None


def render_control(type_id: int, key: bytes, value: Optional[bytes]) -> str:
    """The text DumpLogSegments appends for a control record (with its leading space)."""
    if type_id in (0, 1):
        _, epoch = end_txn_marker(value)
        return f" endTxnMarker: {CONTROL_TYPES[type_id]} coordinatorEpoch: {epoch}"
    if type_id in _KRAFT:
        label, msg = _KRAFT[type_id]
        return f" {label} {jsonout.dumps(_kraft_tree(msg, value))}"
    return f" controlType: {control_type_name(type_id)}({type_id})"


def decode_control(type_id: int, value: Optional[bytes]) -> Optional[dict]:
    """The control record's value as a plain dict, or None for types with no known value."""
    if type_id in (0, 1):
        version, epoch = end_txn_marker(value)
        return {"version": version, "coordinatorEpoch": epoch}
    if type_id in _KRAFT:
        return plain(_kraft_tree(_KRAFT[type_id][1], value))
    if type_id == 2:
        return plain(_kraft_tree(LEADER_CHANGE_MESSAGE, value))
    return None
