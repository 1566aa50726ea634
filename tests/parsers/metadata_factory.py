"""KRaft metadata logs and snapshots with every record type and version, written with kstore's own builders.

Values come from the generated schema table (kstore_cli/parsers/metadata_records.py): for each record type and
each version, four variants with every field of the version set (non-default values, nulls, empty and long
strings, extreme numbers, non-ASCII text, floats Java prints in both notations), plus the all-defaults message.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from kstore_cli.parsers.metadata import METADATA_RECORD_TYPES
from kstore_cli.parsers.schema import Field, Message, write_message
from kstore_cli.parsers.schemas import (
    KRAFT_VERSION_RECORD,
    LEADER_CHANGE_MESSAGE,
    SNAPSHOT_FOOTER_RECORD,
    SNAPSHOT_HEADER_RECORD,
    VOTERS_RECORD,
)
from kstore_cli.parsers.wire import encode_unsigned_varint
from kstore_cli.record.builder import RecordSpec, build_v2_batch

#: Record types of kstore's table (generated from a newer Kafka) that the oracle's Kafka (commit 1eb7644349cb,
#: 4.0.0-SNAPSHOT) predates: its dump-log and metadata-image cannot judge them (ClearElrRecord came with 4.0.0).
NEWER_THAN_ORACLE = {28: "CLEAR_ELR_RECORD"}
#: The record types the oracle's Kafka knows: every one the files written here hold.
ORACLE_RECORD_TYPES = {k: t for k, t in METADATA_RECORD_TYPES.items() if k not in NEWER_THAN_ORACLE}

BASE_TS = 1_700_000_000_000
VARIANTS = 4

_INTS = {
    "int8": [7, -128, 127, 1],
    "int16": [-12345, 32767, -32768, 2],
    "uint16": [65535, 0, 9092, 1],
    "int32": [123456789, -2147483648, 2147483647, 3],
    "uint32": [4294967295, 0, 1, 77],
    "int64": [(1 << 40) + 5, -(1 << 63), (1 << 63) - 1, 4],
}
_FLOATS = [0.1, math.inf, float("nan"), 1e7, -1.5e-300, 123456.789, 1e-3, -math.inf]
_STRINGS = ['tópic-"q"\\ \t\x01\u20ac\U0001F600/', "", "x" * 300, "plain.name_1"]
_BYTES = [b"\x00\x01\xfe\xff", b"", bytes(range(256)), b"salt"]
_UUIDS = ["AAECAwQFBgcICQoLDA0ODw", "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ", "_____________________w"]


def _value(f: Field, version: int, variant: int, depth: int = 0) -> Any:
    nullable = version in f.nullable
    if variant == 1 and nullable:
        return None
    if f.element is not None:
        count = [2, 0, 3, 1][variant]
        if f.is_struct:
            return [sample_values(f.fields, version, (variant + i) % VARIANTS, depth + 1) for i in range(count)]
        return [_value(Field(f.name, f.element), version, (variant + i) % VARIANTS, depth + 1) for i in range(count)]
    if f.is_struct:
        return sample_values(f.fields, version, variant, depth + 1)
    t = f.type
    if t == "bool":
        return [not f.default, True, False, not f.default][variant]
    if t in _INTS:
        return _INTS[t][variant]
    if t == "float64":
        return _FLOATS[variant + 4 * (depth % 2)]
    if t == "string":
        return _STRINGS[variant]
    if t == "bytes":
        return _BYTES[variant]
    if t == "uuid":
        return _UUIDS[variant]
    raise AssertionError(f"no sample for type {t}")


def sample_values(fields: List[Field], version: int, variant: int, depth: int = 0) -> Dict[str, Any]:
    """Every field of ``version`` set (variant 0..3); fields outside the version keep their default."""
    return {f.name: _value(f, version, variant, depth) for f in fields if version in f.versions}


def frame(api_key: int, version: int, message: bytes) -> bytes:
    """``AbstractApiMessageSerde`` frame: frame version 1, api key, version (unsigned varints), message."""
    return encode_unsigned_varint(1) + encode_unsigned_varint(api_key) + encode_unsigned_varint(version) + message


def metadata_values() -> List[Tuple[int, int, bytes]]:
    """(api key, version, framed value) for every record type, version and variant, plus the defaults."""
    out = []
    for api_key, t in sorted(ORACLE_RECORD_TYPES.items()):
        msg = t.message
        for version in range(msg.valid.lo, msg.valid.hi + 1):
            out.append((api_key, version, frame(api_key, version, write_message(msg, {}, version))))
            for variant in range(VARIANTS):
                values = sample_values(msg.fields, version, variant)
                out.append((api_key, version, frame(api_key, version, write_message(msg, values, version))))
    return out


def damaged_values() -> List[Optional[bytes]]:
    """Record values Kafka's parser prints as "Error at ..., skipping." lines."""
    partition = METADATA_RECORD_TYPES[3].message
    good = write_message(partition, sample_values(partition.fields, 2, 0), 2)
    return [
        None,                                    # a null value
        b"",                                     # no frame version
        b"\x00\x00\x00",                         # frame version 0 (KRaft preview)
        b"\x02\x00\x00",                         # frame version 2
        frame(99, 0, b"\x00"),                   # unknown api key
        frame(20, 0, b"\x00\x07"),               # a byte of garbage after NoOpRecord
        frame(3, 2, good[:-3]),                  # truncated PartitionRecord
        frame(3, 3, good),                       # PartitionRecord v3 (unknown to this build)
        frame(20, 1, b"\x00"),                   # NoOpRecord v1
        b"\x01\xff\xff\xff\xff\x0f",             # api key varint too long
        frame(2, 0, b"\x00" * 17 + b"\x00"),     # TopicRecord with a bad (empty compact) name length
    ]


def _control(type_id: int, msg: Message, values: Dict[str, Any]) -> Tuple[bytes, bytes]:
    return struct.pack(">hh", 0, type_id), write_message(msg, values, 0)


def leader_change() -> Tuple[bytes, bytes]:
    return _control(2, LEADER_CHANGE_MESSAGE, {"Version": 0, "LeaderId": 1, "Voters": [{"VoterId": 1}, {"VoterId": 2}],
                                               "GrantingVoters": [{"VoterId": 1}]})


def kraft_version() -> Tuple[bytes, bytes]:
    return _control(5, KRAFT_VERSION_RECORD, {"Version": 0, "KRaftVersion": 1})


def voters() -> Tuple[bytes, bytes]:
    return _control(6, VOTERS_RECORD, {"Version": 0, "Voters": [{
        "VoterId": 1, "VoterDirectoryId": _UUIDS[0],
        "Endpoints": [{"Name": "CONTROLLER", "Host": "localhost", "Port": 9093}],
        "KRaftVersionFeature": {"MinSupportedVersion": 0, "MaxSupportedVersion": 1}}]})


class LogWriter:
    """Batches at consecutive offsets, as the raft leader appends them (leader epoch 1)."""

    def __init__(self, base_offset: int = 0) -> None:
        self.offset = base_offset
        self.data = bytearray()

    def batch(self, pairs: List[Tuple[Optional[bytes], Optional[bytes]]], *, control: bool = False,
              codec: int = 0) -> None:
        specs = [RecordSpec(self.offset + i, BASE_TS + self.offset + i, k, v) for i, (k, v) in enumerate(pairs)]
        self.data += build_v2_batch(specs, codec=codec, is_control=control, partition_leader_epoch=1)
        self.offset += len(pairs)


def write_metadata_log(directory: Path) -> Path:
    """``__cluster_metadata-0/00000000000000000000.log``: control records, every record type/version, damage."""
    part = directory / "__cluster_metadata-0"
    part.mkdir(parents=True, exist_ok=True)
    w = LogWriter()
    w.batch([leader_change()], control=True)
    w.batch([kraft_version(), voters()], control=True)
    by_type: Dict[int, List[bytes]] = {}
    for api_key, _, value in metadata_values():
        by_type.setdefault(api_key, []).append(value)
    for i, (api_key, values) in enumerate(sorted(by_type.items())):
        w.batch([(None, v) for v in values], codec=i % 5)
    w.batch([(None, v) for v in damaged_values()])
    w.batch([(b"a key", frame(20, 0, b"\x00"))])  # metadata records carry no key; Kafka ignores one
    path = part / "00000000000000000000.log"
    path.write_bytes(bytes(w.data))
    return path


def write_snapshot(directory: Path, end_offset: int = 500, epoch: int = 3) -> Path:
    """``<end offset>-<epoch>.checkpoint``: header, every record type/version (one batch each), footer."""
    part = directory / "__cluster_metadata-0"
    part.mkdir(parents=True, exist_ok=True)
    w = LogWriter()
    w.batch([_control(3, SNAPSHOT_HEADER_RECORD, {"Version": 0, "LastContainedLogTimestamp": BASE_TS})],
            control=True)
    for i, (api_key, version, value) in enumerate(metadata_values()):
        if i % 5 == 0:
            w.batch([(None, value)], codec=api_key % 5)
        else:
            w.batch([(None, value)])
    w.batch([_control(4, SNAPSHOT_FOOTER_RECORD, {"Version": 0})], control=True)
    path = part / f"{end_offset:020d}-{epoch:010d}.checkpoint"
    path.write_bytes(bytes(w.data))
    return path
