"""``kstore dump-segment`` with the coordinator decoders vs Kafka's ``dump-log``, byte for byte.

``__consumer_offsets`` (--offsets-decoder), ``__share_group_state`` (--share-group-state-decoder) and
``__transaction_state`` (--transaction-log-decoder) and ``__remote_log_metadata``
(--remote-log-metadata-decoder) logs holding every record type, every key and value
version the schema tables know (= what the oracle's Kafka knows: test_schemas_oracle.py), four value
variants each plus defaults and tombstones, group metadata carrying every consumer-protocol version, and
records Kafka's parsers skip. One JVM for the module.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from kstore_cli.parsers.schema import Message, write_message
from kstore_cli.parsers.schemas import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    GROUP_COORDINATOR_RECORDS,
    SHARE_COORDINATOR_RECORDS,
    TRANSACTION_LOG_KEY,
    TRANSACTION_LOG_VALUE,
)
from kstore_cli.parsers.remote import REMOTE_RECORDS
from tests.parsers.metadata_factory import VARIANTS, LogWriter, frame, sample_values
from tests.parsers.test_metadata_dump_oracle import _as_oracle_lines, run_kstore

Pair = Tuple[Optional[bytes], Optional[bytes]]


def _versioned(msg: Message, version: int, values: dict) -> bytes:
    return struct.pack(">h", version) + write_message(msg, values, version)


def coordinator_pairs(records: Dict[int, Tuple[Message, Message]]) -> List[Pair]:
    out: List[Pair] = []
    for record_type, (key_msg, value_msg) in records.items():
        for variant in range(VARIANTS):
            key = _versioned(key_msg, record_type, sample_values(key_msg.fields, record_type, variant))
            for version in range(value_msg.valid.lo, value_msg.valid.hi + 1):
                out.append((key, _versioned(value_msg, version, sample_values(value_msg.fields, version, variant))))
            out.append((key, None))  # tombstone
        out.append((_versioned(key_msg, record_type, {}), _versioned(value_msg, value_msg.valid.hi, {})))
    return out


def consumer_group_metadata() -> List[Pair]:
    """GroupMetadataValue with protocolType "consumer": Kafka expands each member's subscription and
    assignment bytes (every consumer-protocol version), and keeps bytes it cannot parse."""
    key_msg, value_msg = GROUP_COORDINATOR_RECORDS[2]
    key = _versioned(key_msg, 2, {"group": "g"})
    members = []
    for version in range(CONSUMER_PROTOCOL_SUBSCRIPTION.valid.hi + 1):
        for variant in (0, 2, 3):
            sub = _versioned(CONSUMER_PROTOCOL_SUBSCRIPTION, version,
                             sample_values(CONSUMER_PROTOCOL_SUBSCRIPTION.fields, version, variant))
            assignment = _versioned(CONSUMER_PROTOCOL_ASSIGNMENT, version,
                                    sample_values(CONSUMER_PROTOCOL_ASSIGNMENT.fields, version, variant))
            member = sample_values(value_msg.fields[5].fields, 4, variant)
            member.update(subscription=sub, assignment=assignment)
            members.append(member)
    garbage = sample_values(value_msg.fields[5].fields, 4, 0)
    garbage.update(subscription=b"\x00\x07junk", assignment=b"\x00")
    members.append(garbage)
    out = []
    for version in range(value_msg.valid.hi + 1):
        values = sample_values(value_msg.fields, version, 0)
        values.update(protocolType="consumer",
                      members=[{k: v for k, v in m.items() if version in _field(value_msg, k).versions}
                               for m in members])
        out.append((key, _versioned(value_msg, version, values)))
    return out


def _field(msg: Message, member_field: str):
    return next(f for f in msg.fields[5].fields if f.name == member_field)


def transaction_pairs() -> List[Pair]:
    out: List[Pair] = []
    for variant in range(VARIANTS):
        key = _versioned(TRANSACTION_LOG_KEY, 0, sample_values(TRANSACTION_LOG_KEY.fields, 0, variant))
        for version in range(TRANSACTION_LOG_VALUE.valid.hi + 1):
            for state in range(8):
                values = sample_values(TRANSACTION_LOG_VALUE.fields, version, variant)
                # only what Kafka's parser prints rather than dies on: a known state and transaction version
                values["TransactionStatus"] = state
                if version >= 1:
                    values["ClientTransactionVersion"] = state % 3
                if values["TransactionPartitions"] is None and state != 0:
                    values["TransactionPartitions"] = []
                out.append((key, _versioned(TRANSACTION_LOG_VALUE, version, values)))
        out.append((key, None))
    many = [{"Topic": f"t{i % 7}", "PartitionIds": [i, i + 40, i]} for i in range(30)]  # Scala HashSet order
    values = sample_values(TRANSACTION_LOG_VALUE.fields, 1, 0)
    values.update(TransactionStatus=1, ClientTransactionVersion=2, TransactionPartitions=many)
    out.append((out[0][0], _versioned(TRANSACTION_LOG_VALUE, 1, values)))
    out.append((struct.pack(">h", 5), b""))  # unknown key version: printed as unknown::version=5
    return out


def skipped_pairs(records: Dict[int, Tuple[Message, Message]]) -> List[Pair]:
    first_type = next(iter(records))
    key_msg, value_msg = records[first_type]
    key = _versioned(key_msg, first_type, {})
    return [
        (struct.pack(">h", 99), b"\x00\x00"),        # unknown record type
        (b"\x00", None),                            # no room for the record type
        (key[:-1], None),                           # truncated key
        (key, b"\x00"),                             # no room for the value version
        (key, struct.pack(">h", 0) + b"\x00"),      # truncated value
    ]


def null_tagged_struct() -> List[Pair]:
    """ConsumerGroupMemberMetadataValue whose tagged ClassicMemberMetadata (a nullable struct) is present but
    null: inside a tagged field the null marker is an unsigned varint 0 (Kafka never writes it; others may)."""
    key_msg, value_msg = GROUP_COORDINATOR_RECORDS[5]
    key = _versioned(key_msg, 5, {"GroupId": "g", "MemberId": "m"})
    body = write_message(value_msg, {}, 0)
    assert body.endswith(b"\x00")  # no tagged fields
    return [(key, struct.pack(">h", 0) + body[:-1] + bytes([1, 0, 1, 0]))]  # 1 field: tag 0, size 1, marker 0


def remote_pairs() -> List[Pair]:
    """Every __remote_log_metadata record type, with values Kafka's transforms accept and refuse."""
    out: List[Pair] = []
    for api_key, (_, msg) in REMOTE_RECORDS.items():
        for variant in range(VARIANTS):
            out.append((None, frame(api_key, 0, write_message(msg, sample_values(msg.fields, 0, variant), 0))))
        for state in range(-1, 5):
            values = sample_values(msg.fields, 0, 3)
            state_field = "RemotePartitionDeleteState" if api_key == 2 else "RemoteLogSegmentState"
            values[state_field] = state
            if "SegmentLeaderEpochs" in values:
                values["SegmentLeaderEpochs"] = [{"LeaderEpoch": 5, "Offset": 100}, {"LeaderEpoch": 0, "Offset": 0},
                                                 {"LeaderEpoch": 5, "Offset": 7}, {"LeaderEpoch": -3, "Offset": 1}]
            if "EndOffset" in values:
                values["StartOffset"], values["EndOffset"] = (10, 20) if state != 4 else (20, 10)
            out.append((None, frame(api_key, 0, write_message(msg, values, 0))))
    out.append((None, None))
    return out


def _write(directory: Path, topic: str, pairs: List[Pair], per_batch: int = 7) -> Path:
    part = directory / f"{topic}-0"
    part.mkdir(parents=True)
    w = LogWriter()
    for i in range(0, len(pairs), per_batch):
        w.batch(pairs[i:i + per_batch], codec=(i // per_batch) % 5)
    path = part / "00000000000000000000.log"
    path.write_bytes(bytes(w.data))
    return path


CASES = [
    ("offsets", "__consumer_offsets", ["--offsets-decoder"]),
    ("offsets-skip-metadata", "__consumer_offsets", ["--offsets-decoder", "--skip-record-metadata"]),
    ("share", "__share_group_state", ["--share-group-state-decoder"]),
    ("transactions", "__transaction_state", ["--transaction-log-decoder"]),
    ("remote", "__remote_log_metadata", ["--remote-log-metadata-decoder"]),
]


@pytest.fixture(scope="module")
def dumps(oracle, tmp_path_factory):
    work = tmp_path_factory.mktemp("coordinators")
    files = {
        "__consumer_offsets": _write(work, "__consumer_offsets", coordinator_pairs(GROUP_COORDINATOR_RECORDS)
                                     + consumer_group_metadata() + null_tagged_struct()
                                     + skipped_pairs(GROUP_COORDINATOR_RECORDS)),
        "__share_group_state": _write(work, "__share_group_state", coordinator_pairs(SHARE_COORDINATOR_RECORDS)
                                      + skipped_pairs(SHARE_COORDINATOR_RECORDS)),
        "__transaction_state": _write(work, "__transaction_state", transaction_pairs()),
        "__remote_log_metadata": _write(work, "__remote_log_metadata", remote_pairs()),
    }
    results = oracle.run_many([("dump-log", [*opts, "--files", str(files[topic])]) for _, topic, opts in CASES])
    return {name: (str(files[topic]), opts, r) for (name, topic, opts), r in zip(CASES, results)}


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_dump_matches_kafka_byte_for_byte(dumps, name: str) -> None:
    path, opts, kafka = dumps[name]
    assert kafka.rc == 0, kafka.stdout[-2000:]
    code, out, err = run_kstore([*opts, "--files", path])
    assert out.decode("utf-8", "surrogateescape") == kafka.stdout  # byte for byte
    assert code == (1 if "skipping." in kafka.stdout or "unknown::version=" in kafka.stdout else 0)
    assert b"Traceback" not in err


def test_every_record_type_and_version_was_decoded(dumps) -> None:
    _, _, kafka = dumps["offsets"]
    for record_type, (_, value_msg) in GROUP_COORDINATOR_RECORDS.items():
        for version in range(value_msg.valid.lo, value_msg.valid.hi + 1):
            assert f'key: {{"type":"{record_type}","data":' in kafka.stdout
            assert f'payload: {{"version":"{version}","data":' in kafka.stdout
    assert '"subscription":{"topics":' in kafka.stdout  # consumer protocol expanded
    _, _, share = dumps["share"]
    assert share.stdout.count('"type":"0","data"') > 0 and share.stdout.count('"type":"1","data"') > 0
    _, _, txn = dumps["transactions"]
    assert "state=PrepareEpochFence" in txn.stdout and "unknown::version=5" in txn.stdout
    _, _, remote = dumps["remote"]
    for java_class in ("RemoteLogSegmentMetadata{", "RemoteLogSegmentMetadataUpdate{", "RemotePartitionDeleteMetadata{",
                       "RemoteLogSegmentMetadataSnapshot{"):
        assert "payload: " + java_class in remote.stdout
    assert "segmentLeaderEpochs={-3=1, 0=0, 5=7}" in remote.stdout
